// The perf binaries' table: nccl-tests' columns (size, count, type, time, algbw, busbw, #wrong) and footer,
// with B and S in place of redop and root, one column group per mode (Ulysses, BASP) where nccl-tests has
// out-of-place and in-place, and the Ulysses/BASP time ratio when both run. Pure formatting, unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace basp::bench {

// Bandwidths in GB/s (1e9 bytes per second), as nccl-tests reports them.
double algbw_gbs(int64_t bytes, double seconds);
// Bus bandwidth of a K-way all-to-all: a rank sends (K-1)/K of its bytes over links and keeps 1/K in place,
// so busbw = algbw * (K-1)/K (nccl-tests' alltoall formula with n = K). 0 for K = 1: nothing crosses a link.
double busbw_gbs(double algbw, int64_t group_size);

struct ModeResult {
  int32_t num_groups = 0;  // G
  int32_t group_size = 0;  // K
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = -1;  // -1: not checked (printed as N/A)
};

struct TableRow {
  int64_t bytes = 0;  // per rank, sequence-sharded tensors of one iteration
  int64_t count = 0;  // elements per rank
  std::string type;
  int64_t micro_batch = 0;        // B
  int64_t seq_len = 0;            // S
  std::vector<ModeResult> modes;  // in the order of the header's mode names
};

// Time with the precision nccl-tests uses: 2 decimals below 100 us, 1 below 10 ms, none above.
std::string format_time_us(double us);

// Three comment lines: mode names over their column groups, column names, units.
std::string table_header(const std::vector<std::string>& mode_names);
std::string table_row(const TableRow& row);
// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth    : X". `checked` false: no -c, "N/A".
std::string table_footer(int64_t wrong, bool checked, double avg_busbw);

}  // namespace basp::bench
