// The perf binaries' command line: sizes, integers, lists, names and their combinations. Every rejected value
// must produce a message naming the option and the value as typed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "perf_args.h"

using basp::bench::ArgError;
using basp::bench::kMaxBytes;
using basp::bench::parse_int;
using basp::bench::parse_int_list;
using basp::bench::parse_perf_args;
using basp::bench::parse_size;
using basp::bench::PerfOptions;
using basp::bench::size_sweep;
using Catch::Matchers::Contains;

namespace {

PerfOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "basp_test_perf");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_perf_args(static_cast<int>(argv.size()), argv.data());
}

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const ArgError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("parse_size accepts digits with a binary K/M/G suffix", "[bench][args]") {
  CHECK(parse_size("1", "-b") == 1);
  CHECK(parse_size("4096", "-b") == 4096);
  CHECK(parse_size("64K", "-b") == 64 * 1024);
  CHECK(parse_size("64k", "-b") == 64 * 1024);
  CHECK(parse_size("32M", "-e") == 32 * 1024 * 1024);
  CHECK(parse_size("2G", "-e") == int64_t{2} * 1024 * 1024 * 1024);
  CHECK(parse_size("1024G", "-e") == kMaxBytes);  // the bound itself is accepted
}

TEST_CASE("parse_size rejects malformed and out-of-range sizes, naming option and value", "[bench][args]") {
  struct Bad {
    const char* text;
    const char* why;
  };
  const Bad bad[] = {
      {"", "empty size"},
      {"12x", "not a size"},
      {"M", "not a size"},
      {"-1", "not a size"},
      {"1.5M", "not a size"},
      {" 8", "not a size"},
      {"8 ", "not a size"},
      {"1KB", "unexpected characters after the suffix"},
      {"0", "must be positive"},
      {"0K", "must be positive"},
      {"1025G", "larger than the maximum"},
      {"1099511627777", "larger than the maximum"},
      {"99999999999999999999G", "larger than the maximum"},
      {"999999999999999999999999999999", "larger than the maximum"},
  };
  for (const Bad& b : bad) {
    INFO("size '" << b.text << "'");
    try {
      parse_size(b.text, "-b");
      FAIL("accepted");
    } catch (const ArgError& e) {
      const std::string msg = e.what();
      CHECK_THAT(msg, Contains("-b") && Contains(std::string("'") + b.text + "'") && Contains(b.why));
    }
  }
}

TEST_CASE("parse_int and parse_int_list are bounded", "[bench][args]") {
  CHECK(parse_int("0", "-c", 0, 1) == 0);
  CHECK(parse_int("-3", "-x", -5, 5) == -3);
  CHECK_THROWS_WITH(parse_int("2", "-c", 0, 1), Contains("-c ('2'): out of range 0..1"));
  CHECK_THROWS_WITH(parse_int("", "-n", 1, 10), Contains("-n (''): not an integer"));
  CHECK_THROWS_WITH(parse_int("3x", "-n", 1, 10), Contains("not an integer"));
  CHECK_THROWS_WITH(parse_int("99999999999999999999999", "-n", 1, 1000000000), Contains("out of range"));
  CHECK(parse_int_list("1,2,4,8", "-B", 1, 100) == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(parse_int_list("6", "-B", 1, 100) == std::vector<int64_t>{6});
  CHECK_THROWS_WITH(parse_int_list("1,,2", "-B", 1, 100), Contains("-B ('1,,2'): empty item"));
  CHECK_THROWS_WITH(parse_int_list("1,2,", "-B", 1, 100), Contains("empty item"));
  CHECK_THROWS_WITH(parse_int_list("1,0", "-B", 1, 100), Contains("item '0'"));
  CHECK_THROWS_WITH(parse_int_list("1,x", "-B", 1, 100), Contains("item 'x'"));
}

TEST_CASE("the defaults follow nccl-tests where it has one", "[bench][args]") {
  const PerfOptions o = parse({});
  CHECK(o.min_bytes == 32 << 20);
  CHECK(o.max_bytes == 32 << 20);
  CHECK(o.iters == 20);
  CHECK(o.warmup_iters == 1);
  CHECK(o.check == 1);
  CHECK(o.average == 1);
  CHECK(o.graph_launches == 0);
  CHECK(o.backend == BASP_BACKEND_MPI);
  CHECK(o.mode == basp::bench::Mode::kBoth);
}

TEST_CASE("every option is parsed, in separate, attached and --long=value forms", "[bench][args]") {
  const PerfOptions o =
      parse({"-b",      "1K", "-e8M",        "-f",        "2",          "-n",     "7",         "-w",
             "3",       "-c", "0",           "-d",        "fp32",       "-z",     "1",         "-a",
             "3",       "-J", "out.json",    "-B",        "1,2,4,8",    "--mode", "basp",      "--layout=sbhd",
             "--heads", "16", "--kv-heads",  "4",         "--head-dim", "64",     "--backend", "nccl",
             "-G",      "5",  "--placement", "contiguous"});
  CHECK(o.min_bytes == 1024);
  CHECK(o.max_bytes == 8 << 20);
  CHECK(o.step_factor == 2);
  CHECK(o.iters == 7);
  CHECK(o.warmup_iters == 3);
  CHECK(o.check == 0);
  CHECK(o.dtype == BASP_DTYPE_FP32);
  CHECK(o.blocking == 1);
  CHECK(o.average == 3);
  CHECK(o.json_path == "out.json");
  CHECK(o.micro_batches == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(o.mode == basp::bench::Mode::kBasp);
  CHECK(o.layout == BASP_LAYOUT_SBHD);
  CHECK(o.heads == 16);
  CHECK(o.kv_heads == 4);
  CHECK(o.head_dim == 64);
  CHECK(o.backend == BASP_BACKEND_NCCL);
  CHECK(o.graph_launches == 5);
  CHECK(o.placement == BASP_PLACEMENT_CONTIGUOUS);
  CHECK(parse({"-d", "half"}).dtype == BASP_DTYPE_FP16);
  CHECK(parse({"-d", "byte"}).dtype == BASP_DTYPE_BYTE);
  CHECK(parse({"--mode", "ulysses"}).mode == basp::bench::Mode::kUlysses);
  CHECK(parse({"--help"}).help);
}

TEST_CASE("bad command lines get an error naming the option and the value", "[bench][args]") {
  CHECK_THAT(error_of({"--bogus"}), Contains("unknown option '--bogus'"));
  CHECK_THAT(error_of({"-q", "1"}), Contains("unknown option '-q'"));
  CHECK_THAT(error_of({"stray"}), Contains("unknown option 'stray'"));
  CHECK_THAT(error_of({"-n"}), Contains("-n: missing value"));
  CHECK_THAT(error_of({"-b", "99999999999999999999G"}), Contains("-b ('99999999999999999999G')"));
  CHECK_THAT(error_of({"-e", "12x"}), Contains("-e ('12x'): not a size"));
  CHECK_THAT(error_of({"-n", "0"}), Contains("-n ('0'): out of range"));
  CHECK_THAT(error_of({"-w", "-1"}), Contains("-w ('-1'): out of range"));
  CHECK_THAT(error_of({"-a", "4"}), Contains("-a ('4')"));
  CHECK_THAT(error_of({"-d", "float16x"}), Contains("-d ('float16x'): unknown value"));
  CHECK_THAT(error_of({"--mode", "fast"}), Contains("--mode ('fast'): unknown value; expected one of: ulysses"));
  CHECK_THAT(error_of({"--layout", "bhsd"}), Contains("--layout ('bhsd')"));
  CHECK_THAT(error_of({"--backend", "ucx"}), Contains("--backend ('ucx')"));
  CHECK_THAT(error_of({"--placement", "random"}), Contains("--placement ('random')"));
  CHECK_THAT(error_of({"--heads", "0"}), Contains("--heads ('0'): out of range"));
  CHECK_THAT(error_of({"-J", ""}), Contains("-J (''): empty file name"));
  CHECK_THAT(error_of({"-b", "2M", "-e", "1M"}), Contains("-b (2097152 bytes) is larger than -e (1048576 bytes)"));
  CHECK_THAT(error_of({"-f", "2", "-i", "1K"}), Contains("-f (2) and -i (1024) both given"));
  CHECK_THAT(error_of({"-G", "1"}), Contains("-G (1): CUDA-graph launches are not applicable to the MPI backend"));
}

TEST_CASE("--placement topology follows the library's enum", "[bench][args]") {
  // Either this basp.h has BASP_PLACEMENT_TOPOLOGY and the name parses to it, or the error says it is missing.
  std::string err;
  PerfOptions o;
  try {
    o = parse({"--placement", "topology"});
  } catch (const ArgError& e) {
    err = e.what();
  }
  if (err.empty()) {
    CHECK(std::string(basp::bench::placement_name(o.placement)) == "topology");
    CHECK(o.placement != BASP_PLACEMENT_DEFAULT);
    CHECK(o.placement != BASP_PLACEMENT_CONTIGUOUS);
  } else {
    CHECK_THAT(err, Contains("BASP_PLACEMENT_TOPOLOGY"));
  }
}

TEST_CASE("size_sweep steps by factor or by bytes and never passes -e", "[bench][args]") {
  CHECK(size_sweep(parse({"-b", "1K", "-e", "8K", "-f", "2"})) == std::vector<int64_t>{1024, 2048, 4096, 8192});
  CHECK(size_sweep(parse({"-b", "1K", "-e", "7K", "-f", "2"})) == std::vector<int64_t>{1024, 2048, 4096});
  CHECK(size_sweep(parse({"-b", "1K", "-e", "3K", "-i", "1K"})) == std::vector<int64_t>{1024, 2048, 3072});
  CHECK(size_sweep(parse({"-b", "5", "-e", "5"})) == std::vector<int64_t>{5});
  // At the upper bound the sweep stops without overflowing.
  CHECK(size_sweep(parse({"-b", "1", "-e", "1024G", "-f", "1024"})) ==
        std::vector<int64_t>{1, 1024, 1 << 20, 1 << 30, kMaxBytes});
  CHECK(size_sweep(parse({"-b", "1023G", "-e", "1024G", "-i", "1G"})).size() == 2);
}

TEST_CASE("--model sets Hq, Hkv and D; explicit head options override it anywhere on the line", "[bench][args]") {
  struct Expect {
    const char* name;
    int64_t hq, hkv, d;
    std::vector<int64_t> dims;  // Q, K, V head sizes; empty: all D
  };
  const Expect models[] = {
      {"llama-3.2-1b", 32, 8, 64, {}},
      {"llama-3.2-3b", 24, 8, 128, {}},
      {"llama-3.1-8b", 32, 8, 128, {}},
      {"qwen1.5-1.8b", 16, 16, 128, {}},
      {"qwen2.5-1.5b", 12, 2, 128, {}},
      {"qwen2.5-3b", 16, 2, 128, {}},
      {"qwen2.5-7b", 28, 4, 128, {}},
      {"deepseek-v2-lite", 16, 16, 128, {192, 192, 128}},
      {"deepseek-v3", 128, 128, 128, {192, 192, 128}},
      {"kimi-k2", 64, 64, 128, {192, 192, 128}},
  };
  REQUIRE(basp::bench::model_presets().size() == std::size(models));
  const std::string usage = basp::bench::perf_usage("basp_alltoall_perf");
  for (const Expect& m : models) {
    INFO(m.name);
    const PerfOptions o = parse({"--model", m.name});
    CHECK(o.model == m.name);
    CHECK(o.heads == m.hq);
    CHECK(o.kv_heads == m.hkv);
    CHECK(o.head_dim == m.d);
    CHECK(o.head_dims == m.dims);
    CHECK_THAT(usage, Contains(m.name));  // --help lists every preset
  }
  CHECK_THAT(usage, Contains("deepseek-v3      Hq 128  Hkv 128  D 192,192,128 (Q,K,V)"));
  const PerfOptions before = parse({"--heads", "16", "--model", "llama-3.1-8b"});
  CHECK(before.heads == 16);
  CHECK(before.kv_heads == 8);
  CHECK(before.head_dim == 128);
  const PerfOptions after = parse({"--model=qwen2.5-7b", "--head-dim", "64", "--kv-heads", "7"});
  CHECK(after.heads == 28);
  CHECK(after.kv_heads == 7);
  CHECK(after.head_dim == 64);
  CHECK(after.head_dims.empty());
  // An MLA preset's head sizes give way to --head-dims, or to --head-dim (then every tensor has D).
  CHECK(parse({"--head-dims", "96,96,64", "--model", "deepseek-v3"}).head_dims == std::vector<int64_t>{96, 96, 64});
  const PerfOptions flat = parse({"--model", "deepseek-v2-lite", "--head-dim", "64"});
  CHECK(flat.head_dim == 64);
  CHECK(flat.head_dims.empty());
  // The preset's Hkv stays unless --kv-heads (or --mla: Hkv = Hq) replaces it.
  CHECK_THAT(error_of({"--model", "deepseek-v3", "--heads", "32"}),
             Contains("--kv-heads (128) does not divide --heads (32)"));
  CHECK(parse({"--model", "deepseek-v3", "--heads", "32", "--mla"}).kv_heads == 32);
  CHECK_THAT(error_of({"--model", "gpt-2"}),
             Contains("--model ('gpt-2'): unknown model; expected one of: llama-3.2-1b"));
}

TEST_CASE("--head-dims gives Q, K and V their own head sizes; --mla is DeepSeek's", "[bench][args]") {
  CHECK(parse({}).head_dims.empty());
  CHECK(parse({"--head-dims", "192,192,128"}).head_dims == std::vector<int64_t>{192, 192, 128});
  CHECK(parse({"--head-dims=1,2,3"}).head_dims == std::vector<int64_t>{1, 2, 3});
  const PerfOptions mla = parse({"--mla", "--heads", "16"});
  CHECK(mla.heads == 16);
  CHECK(mla.kv_heads == 16);  // Hkv = Hq, whatever the default Hkv
  CHECK(mla.head_dims == std::vector<int64_t>{192, 192, 128});
  // --mla before or after --heads; --kv-heads and --head-dims override it.
  CHECK(parse({"--heads", "12", "--mla"}).kv_heads == 12);
  CHECK(parse({"--mla", "--heads", "12", "--kv-heads", "4"}).kv_heads == 4);
  CHECK(parse({"--head-dims", "64,64,32", "--mla"}).head_dims == std::vector<int64_t>{64, 64, 32});
  CHECK(parse({"--mla", "--model", "llama-3.1-8b"}).kv_heads == 32);
  // Bad lists name the option and the list as typed.
  CHECK_THAT(error_of({"--head-dims", "192,128"}),
             Contains("--head-dims ('192,128'): 2 head sizes; expected 3, those of Q, K and V"));
  CHECK_THAT(error_of({"--head-dims", "192,192,128,64"}),
             Contains("--head-dims ('192,192,128,64'): 4 head sizes; expected 3"));
  CHECK_THAT(error_of({"--head-dims", "192,0,128"}),
             Contains("--head-dims ('192,0,128'): item '0' is not an integer in 1..1000000000"));
  CHECK_THAT(error_of({"--head-dims", "192,192,-128"}),
             Contains("--head-dims ('192,192,-128'): item '-128' is not an integer in 1..1000000000"));
  CHECK_THAT(error_of({"--head-dims", "192,,128"}), Contains("--head-dims ('192,,128'): empty item"));
  CHECK_THAT(error_of({"--head-dims", ""}), Contains("--head-dims (''): empty item"));
  CHECK_THAT(error_of({"--head-dims"}), Contains("--head-dims: missing value"));
  // Two head sizes for the same tensors.
  CHECK_THAT(error_of({"--head-dim", "64", "--head-dims", "192,192,128"}),
             Contains("--head-dim (64) and --head-dims: two head sizes for the same tensors"));
  CHECK_THAT(error_of({"--mla", "--head-dim", "96"}),
             Contains("--head-dim (96) and --mla: two head sizes for the same tensors"));
  // --mla with Hkv = Hq needs no divisibility; an explicit Hkv still must divide.
  CHECK_THAT(error_of({"--mla", "--heads", "16", "--kv-heads", "3"}), Contains("--kv-heads (3) does not divide"));
}

TEST_CASE("heads: any Hq, Hkv dividing it, below the group size too", "[bench][args]") {
  const PerfOptions o = parse({"--heads", "12", "--kv-heads", "1"});
  CHECK(o.heads == 12);
  CHECK(o.kv_heads == 1);
  CHECK(parse({"--heads", "7", "--kv-heads", "7"}).heads == 7);
  CHECK_THAT(error_of({"--heads", "32", "--kv-heads", "6"}), Contains("--kv-heads (6) does not divide --heads (32)"));
  // The default Hkv (8) against a model-less Hq that it does not divide.
  CHECK_THAT(error_of({"--heads", "12"}), Contains("--kv-heads (8) does not divide --heads (12)"));
}

TEST_CASE("--pass picks the forward, backward or both passes' exchanges", "[bench][args]") {
  using basp::bench::Pass;
  CHECK(parse({}).pass == Pass::kForward);
  CHECK(parse({"--pass", "bwd"}).pass == Pass::kBackward);
  CHECK(parse({"--pass=both"}).pass == Pass::kBoth);
  CHECK_THAT(error_of({"--pass", "up"}), Contains("--pass ('up'): unknown value; expected one of: fwd, bwd, both"));
}

TEST_CASE("--layout thd takes the documents; sizes and documents do not mix", "[bench][args]") {
  const PerfOptions o = parse({"--layout", "thd", "--doc-lengths", "4096,17,1,900"});
  CHECK(o.layout == BASP_LAYOUT_THD);
  CHECK(o.doc_lengths == std::vector<int64_t>{4096, 17, 1, 900});
  CHECK_THAT(o.doc_source, Contains("--doc-lengths (4 documents)"));
  CHECK(parse({"--layout", "thd", "--doc-dist", "fixed:100:3"}).doc_lengths == std::vector<int64_t>{100, 100, 100});
  CHECK_THAT(error_of({"--layout", "thd"}), Contains("--layout thd needs the micro-batch's documents"));
  CHECK_THAT(error_of({"--doc-lengths", "5,6"}), Contains("--doc-lengths (2 documents): documents need --layout thd"));
  CHECK_THAT(error_of({"--doc-dist", "longtail:1:4"}),
             Contains("--doc-dist longtail:1:4: documents need --layout thd"));
  CHECK_THAT(error_of({"--layout", "thd", "--doc-lengths", "5", "-b", "1M"}),
             Contains("-b/-e/-i/-f: not applicable with --layout thd"));
  CHECK_THAT(error_of({"--layout", "thd", "--doc-lengths", "5,0"}), Contains("--doc-lengths ('5,0'): item '0'"));
  CHECK_THAT(error_of({"--layout", "thd", "--doc-lengths", "1073741825"}),
             Contains("is not an integer in 1..1073741824"));
  CHECK_THAT(error_of({"--layout", "thd", "--doc-lengths", "1073741824,1073741824"}),
             Contains("more than 2147483647 tokens in all"));
}

TEST_CASE("--doc-dist generators and their errors", "[bench][args]") {
  using basp::bench::longtail_lengths;
  using basp::bench::parse_doc_dist;
  CHECK(parse_doc_dist("longtail:7:50", "--doc-dist") == longtail_lengths(7, 50, 4096));
  CHECK(parse_doc_dist("longtail:7:50:100", "--doc-dist") == longtail_lengths(7, 50, 100));
  CHECK(parse_doc_dist("fixed:3:2", "--doc-dist") == std::vector<int64_t>{3, 3});
  const char* bad[][2] = {
      {"uniform:1:2", "unknown length generator"},
      {"longtail:1", "unknown length generator"},
      {"longtail:1:2:3:4", "unknown length generator"},
      {"longtail:x:2", "SEED ('x') is not an integer"},
      {"longtail:1:0", "N ('0') is not an integer in 1..1048576"},
      {"longtail:1:2:0", "MAX ('0')"},
      {"fixed:0:2", "LEN ('0')"},
      {"fixed:1073741824:3", "more than 2147483647 tokens in all"},
  };
  for (const auto& b : bad) {
    INFO(b[0]);
    try {
      parse_doc_dist(b[0], "--doc-dist");
      FAIL("accepted");
    } catch (const ArgError& e) {
      CHECK_THAT(std::string(e.what()), Contains(std::string("--doc-dist ('") + b[0] + "')") && Contains(b[1]));
    }
  }
}

TEST_CASE("longtail lengths: deterministic, 1 to MAX tokens, most documents short, most tokens long", "[bench][args]") {
  using basp::bench::longtail_lengths;
  const std::vector<int64_t> a = longtail_lengths(42, 2000, 4096);
  CHECK(a == longtail_lengths(42, 2000, 4096));
  CHECK(a != longtail_lengths(43, 2000, 4096));
  CHECK(*std::min_element(a.begin(), a.end()) == 1);
  CHECK(*std::max_element(a.begin(), a.end()) >= 3000);
  CHECK(*std::max_element(a.begin(), a.end()) <= 4096);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  int64_t total = 0, long_tokens = 0;
  for (int64_t l : a) {
    total += l;
    if (l >= 512) long_tokens += l;
  }
  CHECK(sorted[sorted.size() / 2] < 200);  // the median document is short (an octave in the middle)
  CHECK(long_tokens * 4 > total * 3);      // documents of 512 tokens and more hold most tokens
  // Every octave of lengths gets about as many documents: 13 octaves (1, 2-3, ..., 4096).
  int64_t first_octave = std::count(a.begin(), a.end(), 1);
  CHECK(first_octave > 2000 / 13 / 2);
  CHECK(first_octave < 2000 / 13 * 2);
  // A cap below a power of two still covers the range.
  const std::vector<int64_t> c = longtail_lengths(1, 500, 3000);
  CHECK(*std::max_element(c.begin(), c.end()) <= 3000);
  CHECK(*std::max_element(c.begin(), c.end()) > 2048);
}
