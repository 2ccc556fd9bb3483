// The -J output: one JSON object per run, read by scripts/bench/plot_benchmarks.py. Each measured (mode, B, size) is
// one flat record so a plot is a filter over "results".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace basp::bench {

struct JsonRecord {
  std::string mode;  // "ulysses" or "basp"
  int64_t micro_batch = 0;
  int32_t num_groups = 0;
  int32_t group_size = 0;
  int64_t seq_len = 0;
  int64_t bytes = 0;
  int64_t count = 0;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = -1;  // -1: not checked (written as null)
  // Per rank, over the ranks of this mode (-1: not recorded, left out): the sequence-sharded bytes of one
  // iteration and the bytes sent to other ranks in one iteration (the routing minimum, as the plans report it).
  int64_t rank_bytes_max = -1;
  int64_t rank_bytes_min = -1;
  int64_t sent_bytes_max = -1;
  int64_t sent_bytes_min = -1;
};

// A quoted JSON string.
std::string json_string(const std::string& text);
// A JSON number; NaN and infinities (which JSON lacks) become null.
std::string json_number(double value);

// `header` holds the run's settings as "key": value pairs already rendered (without braces).
std::string perf_json(const std::vector<std::pair<std::string, std::string>>& header,
                      const std::vector<JsonRecord>& records, int64_t wrong, bool checked, double avg_busbw);

}  // namespace basp::bench
