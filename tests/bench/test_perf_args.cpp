// The perf binaries' command line: sizes, integers, lists, names and their combinations. Every rejected value
// must produce a message naming the option and the value as typed.
#include <catch2/catch.hpp>

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
