#include "perf_args.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <sstream>
#include <type_traits>

namespace basp::bench {
namespace {

std::string quoted(const std::string& text) { return "'" + text + "'"; }

[[noreturn]] void bad(const char* option, const std::string& text, const std::string& why) {
  throw ArgError(std::string(option) + " (" + quoted(text) + "): " + why);
}

// Whether this build's basp.h has BASP_PLACEMENT_TOPOLOGY (another release adds it): the enumerator is looked
// up through the enum type, so its absence is a substitution failure rather than a compile error.
template <typename E, typename = void>
struct TopologyPlacement {
  static constexpr int32_t value = -1;
};
template <typename E>
struct TopologyPlacement<E, std::void_t<decltype(E::BASP_PLACEMENT_TOPOLOGY)>> {
  static constexpr int32_t value = static_cast<int32_t>(E::BASP_PLACEMENT_TOPOLOGY);
};
constexpr int32_t kPlacementTopology = TopologyPlacement<basp_placement_t>::value;

struct Named {
  const char* name;
  int32_t value;
};

constexpr Named kDtypes[] = {
    {"byte", BASP_DTYPE_BYTE},         {"uint8", BASP_DTYPE_BYTE},        {"int8", BASP_DTYPE_BYTE},
    {"fp8_e4m3", BASP_DTYPE_FP8_E4M3}, {"fp8_e5m2", BASP_DTYPE_FP8_E5M2}, {"fp16", BASP_DTYPE_FP16},
    {"half", BASP_DTYPE_FP16},         {"bf16", BASP_DTYPE_BF16},         {"bfloat16", BASP_DTYPE_BF16},
    {"fp32", BASP_DTYPE_FP32},         {"float", BASP_DTYPE_FP32},        {"fp64", BASP_DTYPE_FP64},
    {"double", BASP_DTYPE_FP64},       {"int32", BASP_DTYPE_INT32},       {"int64", BASP_DTYPE_INT64},
};

template <size_t N>
int32_t lookup(const Named (&table)[N], const std::string& text, const char* option) {
  for (const Named& n : table) {
    if (text == n.name) return n.value;
  }
  std::string choices;
  for (const Named& n : table) choices += std::string(choices.empty() ? "" : ", ") + n.name;
  bad(option, text, "unknown value; expected one of: " + choices);
}

// Options that take a value, by their spelling on the command line.
enum class Opt {
  kMinBytes,
  kMaxBytes,
  kStepBytes,
  kStepFactor,
  kIters,
  kWarmup,
  kCheck,
  kDtype,
  kBlocking,
  kGraph,
  kAverage,
  kJson,
  kMicroBatch,
  kMode,
  kLayout,
  kHeads,
  kKvHeads,
  kHeadDim,
  kHeadDims,
  kBackend,
  kPlacement,
  kCorrupt,
  kModel,
  kPass,
  kDocLengths,
  kDocDist,
};

struct OptSpec {
  const char* short_name;  // "-b", or nullptr
  const char* long_name;   // "--minbytes", or nullptr
  Opt opt;
};

constexpr OptSpec kOpts[] = {
    {"-b", "--minbytes", Opt::kMinBytes},
    {"-e", "--maxbytes", Opt::kMaxBytes},
    {"-i", "--stepbytes", Opt::kStepBytes},
    {"-f", "--stepfactor", Opt::kStepFactor},
    {"-n", "--iters", Opt::kIters},
    {"-w", "--warmup_iters", Opt::kWarmup},
    {"-c", "--check", Opt::kCheck},
    {"-d", "--datatype", Opt::kDtype},
    {"-z", "--blocking", Opt::kBlocking},
    {"-G", "--cudagraph", Opt::kGraph},
    {"-a", "--average", Opt::kAverage},
    {"-J", "--output_file", Opt::kJson},
    {"-B", "--micro-batch", Opt::kMicroBatch},
    {nullptr, "--mode", Opt::kMode},
    {nullptr, "--layout", Opt::kLayout},
    {nullptr, "--heads", Opt::kHeads},
    {nullptr, "--kv-heads", Opt::kKvHeads},
    {nullptr, "--head-dims", Opt::kHeadDims},
    {nullptr, "--head-dim", Opt::kHeadDim},
    {nullptr, "--backend", Opt::kBackend},
    {nullptr, "--placement", Opt::kPlacement},
    {nullptr, "--corrupt", Opt::kCorrupt},
    {nullptr, "--model", Opt::kModel},
    {nullptr, "--pass", Opt::kPass},
    {nullptr, "--doc-lengths", Opt::kDocLengths},
    {nullptr, "--doc-dist", Opt::kDocDist},
};

// The paper's models and their neighbours (Hugging Face config.json: num_attention_heads,
// num_key_value_heads, hidden_size / num_attention_heads), and models with multi-head latent attention
// (num_attention_heads; qk_nope_head_dim + qk_rope_head_dim for Q and K, v_head_dim for V; K and V decompressed
// to one head per query head).
const std::vector<ModelPreset> kModels = {
    {"llama-3.2-1b", 32, 8, 64, {}},
    {"llama-3.2-3b", 24, 8, 128, {}},
    {"llama-3.1-8b", 32, 8, 128, {}},
    {"qwen1.5-1.8b", 16, 16, 128, {}},
    {"qwen2.5-1.5b", 12, 2, 128, {}},
    {"qwen2.5-3b", 16, 2, 128, {}},
    {"qwen2.5-7b", 28, 4, 128, {}},
    {"deepseek-v2-lite", 16, 16, 128, {kMlaHeadDims[0], kMlaHeadDims[1], kMlaHeadDims[2]}},
    {"deepseek-v3", 128, 128, 128, {kMlaHeadDims[0], kMlaHeadDims[1], kMlaHeadDims[2]}},
    {"kimi-k2", 64, 64, 128, {kMlaHeadDims[0], kMlaHeadDims[1], kMlaHeadDims[2]}},
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The documents' total, bounded (an overflow-free sum: each length is at most kMaxDocTokens).
void check_batch(const std::vector<int64_t>& lengths, const char* option, const std::string& text) {
  int64_t total = 0;
  for (int64_t l : lengths) {
    total += l;
    if (total > kMaxBatchTokens) {
      bad(option, text, "more than " + std::to_string(kMaxBatchTokens) + " tokens in all");
    }
  }
}

constexpr int64_t kMaxCount = 1000000000;  // iterations, heads, head dim, micro-batch: far above any real use

void apply(PerfOptions& o, Opt opt, const char* name, const std::string& v) {
  switch (opt) {
    case Opt::kMinBytes: o.min_bytes = parse_size(v, name); break;
    case Opt::kMaxBytes: o.max_bytes = parse_size(v, name); break;
    case Opt::kStepBytes: o.step_bytes = parse_size(v, name); break;
    case Opt::kStepFactor: o.step_factor = parse_int(v, name, 1, 1024); break;
    case Opt::kIters: o.iters = static_cast<int32_t>(parse_int(v, name, 1, kMaxCount)); break;
    case Opt::kWarmup: o.warmup_iters = static_cast<int32_t>(parse_int(v, name, 0, kMaxCount)); break;
    case Opt::kCheck: o.check = static_cast<int32_t>(parse_int(v, name, 0, 1)); break;
    case Opt::kDtype: o.dtype = static_cast<basp_dtype_t>(lookup(kDtypes, v, name)); break;
    case Opt::kBlocking: o.blocking = static_cast<int32_t>(parse_int(v, name, 0, 1)); break;
    case Opt::kGraph: o.graph_launches = static_cast<int32_t>(parse_int(v, name, 0, kMaxCount)); break;
    case Opt::kAverage: o.average = static_cast<int32_t>(parse_int(v, name, 0, 3)); break;
    case Opt::kJson:
      if (v.empty()) bad(name, v, "empty file name");
      o.json_path = v;
      break;
    case Opt::kMicroBatch: o.micro_batches = parse_int_list(v, name, 1, kMaxCount); break;
    case Opt::kMode: o.mode = parse_mode(v); break;
    case Opt::kLayout: o.layout = parse_layout(v); break;
    case Opt::kHeads: o.heads = parse_int(v, name, 1, kMaxCount); break;
    case Opt::kKvHeads: o.kv_heads = parse_int(v, name, 1, kMaxCount); break;
    case Opt::kHeadDim: o.head_dim = parse_int(v, name, 1, kMaxCount); break;
    case Opt::kHeadDims:
      o.head_dims = parse_int_list(v, name, 1, kMaxCount);
      if (o.head_dims.size() != 3) {
        bad(name, v,
            std::to_string(o.head_dims.size()) +
                " head sizes; expected 3, those of Q, K and V (O and dO take V's, dQ, dK and dV those of Q, K, V)");
      }
      break;
    case Opt::kBackend: o.backend = parse_backend(v); break;
    case Opt::kPlacement: o.placement = parse_placement(v); break;
    case Opt::kCorrupt: o.corrupt = static_cast<int32_t>(parse_int(v, name, 0, kMaxCount)); break;
    case Opt::kModel: {
      if (!find_model(v)) {
        std::string names;
        for (const ModelPreset& m : kModels) names += std::string(names.empty() ? "" : ", ") + m.name;
        bad(name, v, "unknown model; expected one of: " + names);
      }
      o.model = v;
      break;
    }
    case Opt::kPass: o.pass = parse_pass(v); break;
    case Opt::kDocLengths:
      if (std::count(v.begin(), v.end(), ',') >= kMaxDocs) {
        bad(name, v, "more than " + std::to_string(kMaxDocs) + " documents");
      }
      o.doc_lengths = parse_int_list(v, name, 1, kMaxDocTokens);
      check_batch(o.doc_lengths, name, v);
      o.doc_source = std::string(name) + " (" + std::to_string(o.doc_lengths.size()) + " documents)";
      break;
    case Opt::kDocDist:
      o.doc_lengths = parse_doc_dist(v, name);
      o.doc_source = std::string(name) + " " + v;
      break;
  }
}

// Which head options the command line gave, wherever on the line.
struct HeadsGiven {
  bool heads, kv_heads, head_dim, head_dims, mla;
};

// The preset's and --mla's head shape under the explicit options (parse_perf_args' rules).
void resolve_heads(PerfOptions& o, const HeadsGiven& given) {
  if (given.head_dim && (given.head_dims || given.mla)) {
    throw ArgError("--head-dim (" + std::to_string(o.head_dim) + ") and " +
                   (given.head_dims ? "--head-dims" : std::string("--mla")) +
                   ": two head sizes for the same tensors; give one of them");
  }
  if (const ModelPreset* m = o.model.empty() ? nullptr : find_model(o.model)) {
    if (!given.heads) o.heads = m->heads;
    if (!given.kv_heads) o.kv_heads = m->kv_heads;
    if (!given.head_dim) o.head_dim = m->head_dim;
    if (!given.head_dim && !given.head_dims && m->head_dims[0] > 0) {
      o.head_dims.assign(std::begin(m->head_dims), std::end(m->head_dims));
    }
  }
  if (given.mla) {
    if (!given.head_dims) o.head_dims.assign(std::begin(kMlaHeadDims), std::end(kMlaHeadDims));
    if (!given.kv_heads) o.kv_heads = o.heads;
  }
}

}  // namespace

const std::vector<ModelPreset>& model_presets() { return kModels; }

const ModelPreset* find_model(const std::string& name) {
  for (const ModelPreset& m : kModels) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

std::vector<int64_t> longtail_lengths(uint64_t seed, int64_t count, int64_t max_len) {
  int bits = 0;
  while (bits < 62 && (int64_t{2} << bits) <= max_len) ++bits;  // floor(log2 max_len)
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t x = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i)));
    const int e = static_cast<int>(x % static_cast<uint64_t>(bits + 1));
    const int64_t low = int64_t{1} << e;
    const int64_t len = low + static_cast<int64_t>(splitmix64(x) % static_cast<uint64_t>(low));
    out.push_back(std::min(len, max_len));
  }
  return out;
}

std::vector<int64_t> parse_doc_dist(const std::string& text, const char* option) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (parts.size() < 5) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  const char* expected = "expected longtail:SEED:N, longtail:SEED:N:MAX or fixed:LEN:N";
  auto number = [&](const std::string& item, const char* what, int64_t lo, int64_t hi) {
    try {
      return parse_int(item, option, lo, hi);
    } catch (const ArgError&) {
      bad(option, text,
          std::string(what) + " ('" + item + "') is not an integer in " + std::to_string(lo) + ".." +
              std::to_string(hi) + "; " + expected);
    }
  };
  std::vector<int64_t> out;
  if (parts[0] == "longtail" && (parts.size() == 3 || parts.size() == 4)) {
    const auto seed = static_cast<uint64_t>(number(parts[1], "SEED", 0, kMaxCount));
    const int64_t count = number(parts[2], "N", 1, kMaxDocs);
    const int64_t max_len = parts.size() == 4 ? number(parts[3], "MAX", 1, kMaxDocTokens) : 4096;
    out = longtail_lengths(seed, count, max_len);
  } else if (parts[0] == "fixed" && parts.size() == 3) {
    const int64_t len = number(parts[1], "LEN", 1, kMaxDocTokens);
    const int64_t count = number(parts[2], "N", 1, kMaxDocs);
    if (len > kMaxBatchTokens / count) {
      bad(option, text, "more than " + std::to_string(kMaxBatchTokens) + " tokens in all");
    }
    out.assign(static_cast<size_t>(count), len);
  } else {
    bad(option, text, std::string("unknown length generator; ") + expected);
  }
  check_batch(out, option, text);
  return out;
}

int64_t parse_size(const std::string& text, const char* option) {
  if (text.empty()) bad(option, text, "empty size");
  size_t i = 0;
  int64_t value = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = value * 10 + (text[i] - '0');
    // Stop before the next digit could overflow: anything this large is out of range anyway.
    if (value > kMaxBytes) bad(option, text, "larger than the maximum " + std::to_string(kMaxBytes) + " bytes (1T)");
  }
  if (i == 0) bad(option, text, "not a size: expected digits with an optional K, M or G suffix");
  int64_t unit = 1;
  if (i < text.size()) {
    switch (text[i]) {
      case 'K':
      case 'k': unit = int64_t{1} << 10; break;
      case 'M':
      case 'm': unit = int64_t{1} << 20; break;
      case 'G':
      case 'g': unit = int64_t{1} << 30; break;
      default: bad(option, text, "not a size: expected digits with an optional K, M or G suffix");
    }
    ++i;
  }
  if (i != text.size()) bad(option, text, "not a size: unexpected characters after the suffix");
  if (value > kMaxBytes / unit) {
    bad(option, text, "larger than the maximum " + std::to_string(kMaxBytes) + " bytes (1T)");
  }
  if (value == 0) bad(option, text, "must be positive");
  return value * unit;
}

int64_t parse_int(const std::string& text, const char* option, int64_t lo, int64_t hi) {
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) i = 1;
  if (i == text.size()) bad(option, text, "not an integer");
  int64_t value = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') bad(option, text, "not an integer");
    value = value * 10 + (text[i] - '0');
    if (value > hi + 1 || value > kMaxCount * 10) {  // beyond any bound: stop before overflow
      bad(option, text, "out of range " + std::to_string(lo) + ".." + std::to_string(hi));
    }
  }
  if (negative) value = -value;
  if (value < lo || value > hi) bad(option, text, "out of range " + std::to_string(lo) + ".." + std::to_string(hi));
  return value;
}

std::vector<int64_t> parse_int_list(const std::string& text, const char* option, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) bad(option, text, "empty item in the list (expected e.g. 1,2,4,8)");
    try {
      out.push_back(parse_int(item, option, lo, hi));
    } catch (const ArgError& e) {
      bad(option, text,
          std::string("item ") + quoted(item) + " is not an integer in " + std::to_string(lo) + ".." +
              std::to_string(hi));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

basp_dtype_t parse_dtype(const std::string& text) { return static_cast<basp_dtype_t>(lookup(kDtypes, text, "-d")); }

basp_layout_t parse_layout(const std::string& text) {
  constexpr Named kLayouts[] = {{"bshd", BASP_LAYOUT_BSHD}, {"sbhd", BASP_LAYOUT_SBHD}, {"thd", BASP_LAYOUT_THD}};
  return static_cast<basp_layout_t>(lookup(kLayouts, text, "--layout"));
}

basp_backend_t parse_backend(const std::string& text) {
  constexpr Named kBackends[] = {{"mpi", BASP_BACKEND_MPI}, {"nccl", BASP_BACKEND_NCCL}};
  return static_cast<basp_backend_t>(lookup(kBackends, text, "--backend"));
}

int32_t parse_placement(const std::string& text) {
  if (text == "topology" && kPlacementTopology < 0) {
    bad("--placement", text, "this libbasp has no topology-aware placement (BASP_PLACEMENT_TOPOLOGY)");
  }
  constexpr Named kPlacements[] = {
      {"default", BASP_PLACEMENT_DEFAULT}, {"contiguous", BASP_PLACEMENT_CONTIGUOUS}, {"topology", kPlacementTopology}};
  constexpr Named kWithoutTopology[] = {{"default", BASP_PLACEMENT_DEFAULT}, {"contiguous", BASP_PLACEMENT_CONTIGUOUS}};
  if (kPlacementTopology < 0) return lookup(kWithoutTopology, text, "--placement");
  return lookup(kPlacements, text, "--placement");
}

Mode parse_mode(const std::string& text) {
  constexpr Named kModes[] = {{"ulysses", static_cast<int32_t>(Mode::kUlysses)},
                              {"basp", static_cast<int32_t>(Mode::kBasp)},
                              {"both", static_cast<int32_t>(Mode::kBoth)}};
  return static_cast<Mode>(lookup(kModes, text, "--mode"));
}

Pass parse_pass(const std::string& text) {
  constexpr Named kPasses[] = {{"fwd", static_cast<int32_t>(Pass::kForward)},
                               {"bwd", static_cast<int32_t>(Pass::kBackward)},
                               {"both", static_cast<int32_t>(Pass::kBoth)}};
  return static_cast<Pass>(lookup(kPasses, text, "--pass"));
}

const char* dtype_name(basp_dtype_t dtype) {
  switch (dtype) {
    case BASP_DTYPE_BYTE: return "byte";
    case BASP_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case BASP_DTYPE_FP8_E5M2: return "fp8_e5m2";
    case BASP_DTYPE_FP16: return "fp16";
    case BASP_DTYPE_BF16: return "bf16";
    case BASP_DTYPE_FP32: return "fp32";
    case BASP_DTYPE_FP64: return "fp64";
    case BASP_DTYPE_INT32: return "int32";
    case BASP_DTYPE_INT64: return "int64";
    default: return "?";
  }
}

const char* layout_name(basp_layout_t layout) {
  return layout == BASP_LAYOUT_SBHD ? "sbhd" : layout == BASP_LAYOUT_THD ? "thd" : "bshd";
}

const char* backend_name(basp_backend_t backend) { return backend == BASP_BACKEND_NCCL ? "nccl" : "mpi"; }

const char* placement_name(int32_t placement) {
  if (placement == BASP_PLACEMENT_DEFAULT) return "default";
  if (placement == BASP_PLACEMENT_CONTIGUOUS) return "contiguous";
  if (placement == kPlacementTopology) return "topology";
  return "?";
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kUlysses: return "ulysses";
    case Mode::kBasp: return "basp";
    case Mode::kBoth: break;
  }
  return "both";
}

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::kForward: return "fwd";
    case Pass::kBackward: return "bwd";
    case Pass::kBoth: break;
  }
  return "both";
}

PerfOptions parse_perf_args(int argc, const char* const* argv) {
  PerfOptions o;
  bool step_bytes_given = false;
  bool heads_given = false, kv_heads_given = false, head_dim_given = false, size_given = false;
  bool head_dims_given = false, mla = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a] ? argv[a] : "";
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "--mla") {
      mla = true;
      continue;
    }
    const OptSpec* spec = nullptr;
    std::string value;
    bool has_value = false;
    for (const OptSpec& s : kOpts) {
      if (s.long_name && arg.rfind(s.long_name, 0) == 0) {
        const size_t n = std::strlen(s.long_name);
        if (arg.size() == n) {
          spec = &s;
        } else if (arg[n] == '=') {
          spec = &s;
          value = arg.substr(n + 1);
          has_value = true;
        }
      } else if (s.short_name && arg.rfind(s.short_name, 0) == 0) {
        spec = &s;
        if (arg.size() > 2) {  // "-b8M"
          value = arg.substr(2);
          has_value = true;
        }
      }
      if (spec) break;
    }
    if (!spec) throw ArgError("unknown option " + quoted(arg) + " (see --help)");
    const char* name = spec->short_name ? spec->short_name : spec->long_name;
    if (!has_value) {
      if (a + 1 >= argc) throw ArgError(std::string(name) + ": missing value");
      value = argv[++a] ? argv[a] : "";
    }
    if (spec->opt == Opt::kStepBytes) step_bytes_given = true;
    heads_given = heads_given || spec->opt == Opt::kHeads;
    kv_heads_given = kv_heads_given || spec->opt == Opt::kKvHeads;
    head_dim_given = head_dim_given || spec->opt == Opt::kHeadDim;
    head_dims_given = head_dims_given || spec->opt == Opt::kHeadDims;
    size_given = size_given || spec->opt == Opt::kMinBytes || spec->opt == Opt::kMaxBytes ||
                 spec->opt == Opt::kStepBytes || spec->opt == Opt::kStepFactor;
    apply(o, spec->opt, name, value);
  }
  resolve_heads(o, HeadsGiven{heads_given, kv_heads_given, head_dim_given, head_dims_given, mla});
  if (o.heads % o.kv_heads != 0) {
    throw ArgError("--kv-heads (" + std::to_string(o.kv_heads) + ") does not divide --heads (" +
                   std::to_string(o.heads) + "): each key/value head serves Hq/Hkv query heads");
  }
  if (o.layout == BASP_LAYOUT_THD) {
    if (o.doc_lengths.empty()) {
      throw ArgError(
          "--layout thd needs the micro-batch's documents: --doc-lengths L1,L2,... or --doc-dist "
          "longtail:SEED:N");
    }
    if (size_given) {
      throw ArgError("-b/-e/-i/-f: not applicable with --layout thd (the documents set the tokens of each row)");
    }
  } else if (!o.doc_lengths.empty()) {
    throw ArgError(o.doc_source + ": documents need --layout thd");
  }
  if (o.min_bytes > o.max_bytes) {
    throw ArgError("-b (" + std::to_string(o.min_bytes) + " bytes) is larger than -e (" + std::to_string(o.max_bytes) +
                   " bytes)");
  }
  if (o.step_factor > 1 && step_bytes_given) {
    throw ArgError("-f (" + std::to_string(o.step_factor) + ") and -i (" + std::to_string(o.step_bytes) +
                   ") both given: a sweep steps by a factor or by bytes, not both");
  }
  // A sweep the driver can run: "-b 2M -i 1" would be 31 million sizes (found by tests/fuzz/fuzz_perf_args).
  // Counted without building it.
  int64_t sizes = 0;
  for (int64_t s = o.min_bytes; s <= o.max_bytes && sizes <= kMaxSizes; ++sizes) {
    if (o.step_factor > 1 ? s > o.max_bytes / o.step_factor : s > o.max_bytes - o.step_bytes) {
      ++sizes;
      break;
    }
    s = o.step_factor > 1 ? s * o.step_factor : s + o.step_bytes;
  }
  if (sizes > kMaxSizes) {
    throw ArgError("-b/-e/-i/-f (" + std::to_string(o.min_bytes) + " to " + std::to_string(o.max_bytes) +
                   " bytes, step " +
                   (o.step_factor > 1 ? "x" + std::to_string(o.step_factor) : "+" + std::to_string(o.step_bytes)) +
                   ") describe more than " + std::to_string(kMaxSizes) + " sizes");
  }
  if (o.graph_launches > 0 && o.backend == BASP_BACKEND_MPI) {
    throw ArgError("-G (" + std::to_string(o.graph_launches) +
                   "): CUDA-graph launches are not applicable to the MPI backend (host memory, no stream); "
                   "use --backend nccl or -G 0");
  }
  return o;
}

std::vector<int64_t> size_sweep(const PerfOptions& o) {
  std::vector<int64_t> sizes;
  for (int64_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    // Stop before stepping past the bound (which also keeps the arithmetic far from overflow).
    if (o.step_factor > 1) {
      if (s > o.max_bytes / o.step_factor) break;
      s *= o.step_factor;
    } else {
      if (s > o.max_bytes - o.step_bytes) break;
      s += o.step_bytes;
    }
  }
  return sizes;
}

std::string perf_usage(const char* program) {
  std::ostringstream u;
  u << "usage: mpirun -np N " << program << " [options]\n"
    << "nccl-tests options:\n"
    << "  -b, --minbytes <size>      smallest size (bytes per rank; K/M/G suffixes), default 32M\n"
    << "  -e, --maxbytes <size>      largest size, default 32M\n"
    << "  -i, --stepbytes <size>     step between sizes when -f is 1, default 1M\n"
    << "  -f, --stepfactor <n>       multiply the size by n each step, default 1 (use -i)\n"
    << "  -n, --iters <n>            timed iterations per size, default 20\n"
    << "  -w, --warmup_iters <n>     untimed iterations before timing, default 1\n"
    << "  -c, --check <0|1>          bit-exact check of every output, counted in #wrong, default 1\n"
    << "  -d, --datatype <type>      byte fp8_e4m3 fp8_e5m2 fp16 bf16 fp32 fp64 int32 int64, default bf16\n"
    << "  -z, --blocking <0|1>       synchronise after every call (NCCL backend), default 0\n"
    << "  -G, --cudagraph <n>        capture the iterations in a CUDA graph, launch it n times (NCCL only)\n"
    << "  -a, --average <0..3>       time reported: 0 rank 0, 1 mean, 2 min, 3 max over ranks, default 1\n"
    << "  -J, --output_file <path>   also write the results as JSON\n"
    << "BASP options:\n"
    << "  -B, --micro-batch <list>   micro-batch sizes B, e.g. 1,2,4,8, default 2 (groups G = gcd(N, B))\n"
    << "      --mode <m>             ulysses, basp or both (adds the Ulysses/BASP time ratio), default both\n"
    << "      --pass <p>             fwd (scatter Q, K, V; gather O), bwd (scatter dO; gather dQ, dK, dV) or both,\n"
    << "                             default fwd\n"
    << "      --layout <l>           bshd, sbhd or thd (packed documents, see --doc-lengths), default bshd\n"
    << "      --heads <n>            query heads Hq, any count (split as torch.tensor_split), default 32\n"
    << "      --kv-heads <n>         key/value heads Hkv, dividing Hq; K and V follow the split of Q's heads, so\n"
    << "                             Hkv below the group size replicates KV heads (GQA, MQA), default 8\n"
    << "      --head-dim <n>         head dimension D of every tensor, default 128\n"
    << "      --head-dims <q,k,v>    head sizes of Q, K and V, e.g. 192,192,128 (O and dO take V's; dQ, dK, dV\n"
    << "                             those of Q, K, V); size counts heads x head size of every tensor\n"
    << "      --mla                  multi-head latent attention: --head-dims 192,192,128 and Hkv = Hq\n"
    << "                             (--kv-heads, --head-dims override)\n"
    << "      --model <name>         Hq, Hkv and D of a model (--heads etc. override):\n";
  for (const ModelPreset& m : kModels) {
    char line[160];
    const std::string dims = m.head_dims[0] > 0
                                 ? std::to_string(m.head_dims[0]) + "," + std::to_string(m.head_dims[1]) + "," +
                                       std::to_string(m.head_dims[2]) + " (Q,K,V)"
                                 : std::to_string(m.head_dim);
    std::snprintf(line, sizeof line, "                               %-16s Hq %3lld  Hkv %3lld  D %s\n", m.name,
                  static_cast<long long>(m.heads), static_cast<long long>(m.kv_heads), dims.c_str());
    u << line;
  }
  u << "      --doc-lengths <list>   THD: the micro-batch's document lengths in tokens, e.g. 4096,17,900\n"
    << "      --doc-dist <gen>       THD: generated lengths: longtail:SEED:N[:MAX] (N documents of 1 to MAX tokens,\n"
    << "                             default MAX 4096, as many per octave: mostly short, most tokens long) or\n"
    << "                             fixed:LEN:N; documents go to groups by basp_comm_assign_documents\n"
    << "      --backend <b>          mpi (host memory) or nccl (device memory), default mpi\n"
    << "      --placement <p>        default, contiguous" << (kPlacementTopology >= 0 ? ", topology" : "") << "\n"
    << "size = bytes per rank of the sequence-sharded tensors one iteration moves, on average over the ranks:\n"
    << "S = floor(N * size / (B * bytes per token)); the size column is the largest rank's; see docs/benchmarks.md\n";
  return u.str();
}

}  // namespace basp::bench
