#include "study.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

namespace basp::bench {

StudyOptions& StudyOptions::flag(std::string name, std::function<void()> set) {
  options_.push_back({std::move(name), false, [set = std::move(set)](const std::string&) { set(); }});
  return *this;
}

StudyOptions& StudyOptions::value(std::string name, std::function<void(const std::string&)> set) {
  options_.push_back({std::move(name), true, std::move(set)});
  return *this;
}

StudyOptions& StudyOptions::positional(std::string name, std::function<void(const std::string&)> set) {
  positional_name_ = std::move(name);
  positional_ = std::move(set);
  return *this;
}

StudyOptions& StudyOptions::pass(std::string prefix) {
  passed_.push_back(std::move(prefix));
  return *this;
}

void StudyOptions::parse(int argc, char** argv) {
  bool positional_seen = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (std::any_of(passed_.begin(), passed_.end(), [&](const std::string& p) { return arg.rfind(p, 0) == 0; }))
      continue;
    const auto option = std::find_if(options_.begin(), options_.end(), [&](const Option& o) { return o.name == arg; });
    if (option != options_.end()) {
      if (!option->takes_value) {
        option->set("");
        continue;
      }
      if (a + 1 >= argc) throw ArgError(arg + ": missing value (see --help)");
      option->set(argv[++a]);
      continue;
    }
    if (positional_ && (arg.empty() || arg[0] != '-')) {
      if (positional_seen) throw ArgError("'" + arg + "': " + positional_name_ + " given twice (see --help)");
      positional_seen = true;
      positional_(arg);
      continue;
    }
    throw ArgError("unknown option '" + arg + "' (see --help)");
  }
}

int study_main(const char* program, int argc, char** argv, StudyOptions& options, const std::function<int()>& run) {
  try {
    options.parse(argc, argv);
    if (options.help()) {
      std::fputs(options.usage().c_str(), stdout);
      return 0;
    }
    return run();
  } catch (const ArgError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  }
}

double parse_double(const std::string& text, const char* option) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
    throw ArgError(std::string(option) + " ('" + text + "'): not a finite number");
  return v;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string transport_env() {
  const char* env = std::getenv("BASP_MPI_TRANSPORT");
  return env ? env : "auto";
}

void sleep_seconds(double seconds) {
  if (!(seconds > 0)) return;
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  const double ns = static_cast<double>(t.tv_nsec) + seconds * 1e9;
  t.tv_sec += static_cast<time_t>(ns / 1e9);
  t.tv_nsec = static_cast<long>(std::fmod(ns, 1e9));
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) != 0) {
  }
}

const char* path_name(int32_t path) {
  switch (path) {
    case BASP_PATH_LOCAL: return "local";
    case BASP_PATH_P2P: return "p2p";
    case BASP_PATH_CMA: return "cma";
    case BASP_PATH_SHARED: return "shared";
    case BASP_PATH_NCCL: return "nccl";
    case BASP_PATH_STAGED: return "staged";
    default: return "-";
  }
}

}  // namespace basp::bench
