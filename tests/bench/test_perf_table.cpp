// The perf table: bandwidth formulas, number formats, and that every value sits under its column name.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "perf_table.h"

using namespace basp::bench;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// End column (one past the last character) of every whitespace-separated token; '#' counts as blank.
std::vector<size_t> token_ends(const std::string& line) {
  std::vector<size_t> ends;
  for (size_t i = 0; i < line.size(); ++i) {
    const bool in_token = line[i] != ' ' && !(i == 0 && line[i] == '#');
    const bool next_blank = i + 1 == line.size() || line[i + 1] == ' ';
    if (in_token && next_blank) ends.push_back(i + 1);
  }
  return ends;
}

std::vector<std::string> tokens(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line[0] == '#' ? line.substr(1) : line);
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

ModeResult mode(double time_us, int64_t bytes, int32_t k, int64_t wrong) {
  ModeResult m;
  m.num_groups = 8 / k;
  m.group_size = k;
  m.time_us = time_us;
  m.algbw = algbw_gbs(bytes, time_us * 1e-6);
  m.busbw = busbw_gbs(m.algbw, k);
  m.wrong = wrong;
  return m;
}

}  // namespace

TEST_CASE("algbw is bytes per second in GB/s, busbw the K-way all-to-all share", "[bench][table]") {
  CHECK(algbw_gbs(1000000000, 1.0) == Approx(1.0));
  CHECK(algbw_gbs(3000000000, 0.5) == Approx(6.0));
  CHECK(algbw_gbs(100, 0.0) == 0.0);
  CHECK(busbw_gbs(10.0, 1) == 0.0);  // K = 1: nothing leaves the rank
  CHECK(busbw_gbs(10.0, 2) == Approx(5.0));
  CHECK(busbw_gbs(10.0, 4) == Approx(7.5));
  CHECK(busbw_gbs(16.0, 8) == Approx(14.0));
}

TEST_CASE("times are printed with nccl-tests' precision", "[bench][table]") {
  CHECK(format_time_us(1.234) == "1.23");
  CHECK(format_time_us(99.994) == "99.99");
  CHECK(format_time_us(123.45) == "123.5");
  CHECK(format_time_us(9999.9) == "9999.9");
  CHECK(format_time_us(123456.7) == "123457");
}

TEST_CASE("both modes: header names and row values line up, with the Ulysses/BASP ratio", "[bench][table]") {
  const std::vector<std::string> head = lines(table_header({"ulysses", "basp"}));
  REQUIRE(head.size() == 3);
  for (const std::string& l : head) CHECK(l[0] == '#');
  CHECK(tokens(head[0]) == std::vector<std::string>{"ulysses", "basp"});
  const std::vector<std::string> names{"size",  "count",  "type", "B",     "S",     "time",   "algbw",
                                       "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "ratio"};
  CHECK(tokens(head[1]) == names);

  TableRow row;
  row.bytes = 4000000;
  row.count = 2000000;
  row.type = "bf16";
  row.micro_batch = 4;
  row.seq_len = 8192;
  row.modes = {mode(2000.0, row.bytes, 8, 0), mode(500.0, row.bytes, 2, 3)};
  const std::string r = table_row(row);
  REQUIRE(r.back() == '\n');
  const std::string line = r.substr(0, r.size() - 1);
  const std::vector<std::string> values = tokens(line);
  // 4e6 bytes in 2000 us = 2 GB/s, busbw 2*7/8; in 500 us = 8 GB/s, busbw 8*1/2; ratio 2000/500.
  CHECK(values == std::vector<std::string>{"4000000", "2000000", "bf16", "4", "8192", "2000.0", "2.00", "1.75", "0",
                                           "500.0", "8.00", "4.00", "3", "4.00"});
  // Right-aligned columns: each value ends where its name ends.
  CHECK(token_ends(line) == token_ends(head[1]));
}

TEST_CASE("one mode: no ratio column; unchecked rows say N/A", "[bench][table]") {
  const std::vector<std::string> head = lines(table_header({"basp"}));
  CHECK(tokens(head[1]).back() == "#wrong");
  TableRow row;
  row.bytes = 1024;
  row.count = 1024;
  row.type = "byte";
  row.micro_batch = 1;
  row.seq_len = 8;
  row.modes = {mode(1.5, row.bytes, 1, -1)};
  std::string line = table_row(row);
  line.pop_back();
  CHECK(tokens(line).size() == 9);
  CHECK(tokens(line).back() == "N/A");
  CHECK(token_ends(line) == token_ends(head[1]));
}

TEST_CASE("the footer reports the wrong-value count and the average bus bandwidth", "[bench][table]") {
  CHECK_THAT(table_footer(0, true, 1.5), Contains("# Out of bounds values : 0 OK\n"));
  CHECK_THAT(table_footer(0, true, 1.5), Contains("# Avg bus bandwidth    : 1.5"));
  CHECK_THAT(table_footer(12, true, 0), Contains("# Out of bounds values : 12 FAILED\n"));
  const std::string unchecked = table_footer(0, false, 0);
  CHECK_THAT(unchecked, Contains("N/A"));
  CHECK(unchecked.find("OK") == std::string::npos);
}
