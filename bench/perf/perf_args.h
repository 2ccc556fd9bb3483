// Command line of the perf binaries: nccl-tests' letters where they apply, plus the BASP shape options.
// Parsing is pure (no MPI, no I/O) so the unit tests can feed it any argv; every bad value throws ArgError with
// a message naming the option and the value as typed.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "basp/basp.h"

namespace basp::bench {

class ArgError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Mode { kUlysses, kBasp, kBoth };

// Which all-to-alls of one attention layer an iteration runs: the forward pass (scatter Q, K, V; gather O), the
// backward pass (scatter dO; gather dQ, dK, dV: the gather that sums KV heads held by several ranks) or both.
enum class Pass { kForward, kBackward, kBoth };

// A model's attention shape (--model): query heads, key/value heads, head dim, and for multi-head latent attention
// the head sizes of Q, K and V (all 0: every tensor at head_dim).
struct ModelPreset {
  const char* name;
  int64_t heads;
  int64_t kv_heads;
  int64_t head_dim;
  int64_t head_dims[3];
};

// Multi-head latent attention (DeepSeek-V2, V3; --mla): per head, Q and K of 192 elements (128 without position
// plus the 64 of the rotary key), V of 128; as many KV heads as query heads.
constexpr int64_t kMlaHeadDims[3] = {192, 192, 128};

// The presets --model knows, in --help order.
const std::vector<ModelPreset>& model_presets();
// nullptr when `name` is not a preset.
const ModelPreset* find_model(const std::string& name);

// Largest byte count any size option accepts: far above any per-rank tensor, far below int64 overflow in the
// arithmetic the driver does with it.
constexpr int64_t kMaxBytes = int64_t{1} << 40;  // 1 TiB
// Most sizes one sweep may have (-b/-e/-i/-f): far more than any useful table, far fewer than a runaway -i.
constexpr int64_t kMaxSizes = 4096;
// THD documents (--doc-lengths, --doc-dist): at most this many, each of at most kMaxDocTokens tokens, at most
// kMaxBatchTokens in all (basp_comm_assign_documents counts documents in int32).
constexpr int64_t kMaxDocs = 1 << 20;
constexpr int64_t kMaxDocTokens = int64_t{1} << 30;
constexpr int64_t kMaxBatchTokens = (int64_t{1} << 31) - 1;

struct PerfOptions {
  int64_t min_bytes = 32 << 20;           // -b
  int64_t max_bytes = 32 << 20;           // -e
  int64_t step_bytes = 1 << 20;           // -i (used when step_factor == 1)
  int64_t step_factor = 1;                // -f
  int32_t iters = 20;                     // -n
  int32_t warmup_iters = 1;               // -w
  int32_t check = 1;                      // -c
  basp_dtype_t dtype = BASP_DTYPE_BF16;   // -d
  int32_t blocking = 0;                   // -z
  int32_t graph_launches = 0;             // -G
  int32_t average = 1;                    // -a: 0 rank 0, 1 mean, 2 min, 3 max over ranks
  std::string json_path;                  // -J
  std::vector<int64_t> micro_batches{2};  // -B
  Mode mode = Mode::kBoth;
  basp_layout_t layout = BASP_LAYOUT_BSHD;  // --layout bshd, sbhd or thd
  int64_t heads = 32;                       // Hq (--heads, or --model)
  int64_t kv_heads = 8;                     // Hkv (--kv-heads, or --model): K and V follow the split of Q's heads
  int64_t head_dim = 128;                   // D (--head-dim, or --model)
  std::vector<int64_t> head_dims;           // Q, K, V head sizes (--head-dims, --mla, --model); empty: all D
  std::string model;                        // --model: the preset's name, "" for none
  Pass pass = Pass::kForward;               // --pass
  std::vector<int64_t> doc_lengths;         // THD: the micro-batch's documents (--doc-lengths or --doc-dist)
  std::string doc_source;                   // how they were given, as typed: "--doc-dist longtail:1:64"
  basp_backend_t backend = BASP_BACKEND_MPI;
  int32_t placement = BASP_PLACEMENT_DEFAULT;  // basp_placement_t value
  int32_t corrupt = 0;  // --corrupt: test hook, flips bytes of the iteration's last output tensor (-c can fail)
  bool help = false;
};

// "123", "64K", "32M", "2G" (binary multiples, either case) -> bytes. `option` names the flag in errors.
int64_t parse_size(const std::string& text, const char* option);
// A decimal integer in [lo, hi].
int64_t parse_int(const std::string& text, const char* option, int64_t lo, int64_t hi);
// "1,2,4,8" -> {1, 2, 4, 8}, each in [lo, hi].
std::vector<int64_t> parse_int_list(const std::string& text, const char* option, int64_t lo, int64_t hi);

// "longtail:SEED:N" or "longtail:SEED:N:MAX" (see longtail_lengths), "fixed:LEN:N" (N documents of LEN tokens).
std::vector<int64_t> parse_doc_dist(const std::string& text, const char* option);
// N document lengths from 1 to max_len tokens with a long tail: for each document a power of two 2^e with e uniform
// in 0..floor(log2 max_len), then a length uniform in [2^e, 2^(e+1)), capped at max_len. So every octave of lengths
// gets as many documents (most documents are short, most tokens are in the long ones), as in packed pretraining
// data. Integer arithmetic over splitmix64(seed, i): the same lengths on every machine.
std::vector<int64_t> longtail_lengths(uint64_t seed, int64_t count, int64_t max_len);

basp_dtype_t parse_dtype(const std::string& text);
basp_layout_t parse_layout(const std::string& text);
basp_backend_t parse_backend(const std::string& text);
int32_t parse_placement(const std::string& text);
Mode parse_mode(const std::string& text);
Pass parse_pass(const std::string& text);

const char* dtype_name(basp_dtype_t dtype);
const char* layout_name(basp_layout_t layout);
const char* backend_name(basp_backend_t backend);
const char* placement_name(int32_t placement);
const char* mode_name(Mode mode);
const char* pass_name(Pass pass);

// The whole command line (argv[0] skipped). Checks each value and the combinations (-b <= -e, Hkv dividing Hq,
// documents only with --layout thd, ...). --model sets Hq, Hkv, D and the head sizes; --heads, --kv-heads,
// --head-dim and --head-dims given anywhere on the line override the preset's value (--head-dim: every tensor at
// D). --mla sets Hkv = Hq and the head sizes kMlaHeadDims; --kv-heads and --head-dims override it, --head-dim
// with it (or with --head-dims) is an error: two head sizes for the same tensors.
PerfOptions parse_perf_args(int argc, const char* const* argv);

// The byte sizes -b/-e/-f/-i describe, in order.
std::vector<int64_t> size_sweep(const PerfOptions& options);

std::string perf_usage(const char* program);

}  // namespace basp::bench
