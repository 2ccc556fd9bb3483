// libFuzzer target: the perf driver's command line (bench/perf/perf_args.h). The input is split into arguments at
// NUL bytes. Expected: PerfOptions, or ArgError naming the option, never a crash, and never a size sweep that
// cannot be held in memory.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "perf_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"basp_scatter_perf"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty()) args.push_back(current);
  if (args.size() > 64) return 0;
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    const basp::bench::PerfOptions o = basp::bench::parse_perf_args(static_cast<int>(argv.size()), argv.data());
    const std::vector<int64_t> sizes = basp::bench::size_sweep(o);
    for (int64_t s : sizes) {
      if (s < o.min_bytes || s > o.max_bytes) std::abort();
    }
    if (basp::bench::perf_usage("x").empty()) std::abort();
  } catch (const basp::bench::ArgError& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
