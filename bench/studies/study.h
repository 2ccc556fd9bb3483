// The skeleton every study shares: its command line read from a table of options, -h/--help, the errors of a bad
// option or value ("<program>: error: <what>", exit 2), its run, its exit code; and the helpers the studies all
// need (median, a path's name). study_mpi.h adds MPI around the same main for the studies that run under mpirun.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "perf_args.h"  // ArgError, parse_int, parse_size, ...

namespace basp::bench {

// A study's options: each a name and what to do with it. parse() reads argv[1..]; a flag takes no value, a valued
// option the next argument; -h and --help set help(). An unknown option or a missing value throws ArgError naming
// it; so does what a setter throws (parse_int and the like name the option and the value).
class StudyOptions {
 public:
  explicit StudyOptions(std::string usage) : usage_(std::move(usage)) {}
  StudyOptions& flag(std::string name, std::function<void()> set);
  StudyOptions& value(std::string name, std::function<void(const std::string&)> set);
  // At most one argument that is not an option (its name is for the errors), e.g. a count.
  StudyOptions& positional(std::string name, std::function<void(const std::string&)> set);
  // Arguments that begin with `prefix` are left for the run to read (Google Benchmark's --benchmark_*).
  StudyOptions& pass(std::string prefix);
  void parse(int argc, char** argv);
  bool help() const { return help_; }
  const std::string& usage() const { return usage_; }

 private:
  struct Option {
    std::string name;
    bool takes_value;
    std::function<void(const std::string&)> set;
  };
  std::string usage_;
  std::vector<Option> options_;
  std::vector<std::string> passed_;
  std::string positional_name_;
  std::function<void(const std::string&)> positional_;
  bool help_ = false;
};

// The main of a study without MPI: its options parsed (the usage printed on -h), then run() and its exit code;
// an ArgError from either is "<program>: error: <what>" on stderr and exit 2.
int study_main(const char* program, int argc, char** argv, StudyOptions& options, const std::function<int()>& run);

// A finite decimal number, as strtod reads it, all of `text`; else ArgError naming the option and the value.
double parse_double(const std::string& text, const char* option);

// The median of the values (the mean of the middle two when their number is even); 0 for none.
double median(std::vector<double> values);

// BASP_MPI_TRANSPORT as set, "auto" when it is not: the MPI backend's path, for the record (the library chooses per
// plan unless it is forced).
std::string transport_env();

// Sleeps `seconds` (nothing for <= 0) to an absolute CLOCK_MONOTONIC deadline, so that a signal does not lengthen
// it and the core stays free for other threads: the studies' emulated compute.
void sleep_seconds(double seconds);

// A basp_path_t value's name ("p2p", "cma", ...), "-" for none or an unknown one.
const char* path_name(int32_t path);

}  // namespace basp::bench
