// The -J writer: strings are escaped, non-finite numbers become null, records carry every field.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "perf_json.h"

using namespace basp::bench;
using Catch::Matchers::Contains;

TEST_CASE("json_string escapes quotes, backslashes and control characters", "[bench][json]") {
  CHECK(json_string("a\"b\\c\nd\x01") == "\"a\\\"b\\\\c\\nd\\u0001\"");
}

TEST_CASE("json_number writes finite values and null otherwise", "[bench][json]") {
  CHECK(json_number(1.5) == "1.5");
  CHECK(json_number(std::numeric_limits<double>::quiet_NaN()) == "null");
  CHECK(json_number(std::numeric_limits<double>::infinity()) == "null");
}

TEST_CASE("perf_json lists every record and the footer", "[bench][json]") {
  JsonRecord a;
  a.mode = "ulysses";
  a.micro_batch = 2;
  a.num_groups = 1;
  a.group_size = 8;
  a.seq_len = 64;
  a.bytes = 4096;
  a.count = 2048;
  a.time_us = 10;
  a.wrong = 0;
  JsonRecord b = a;
  b.mode = "basp";
  b.wrong = -1;
  const std::string j = perf_json({{"nranks", "8"}}, {a, b}, 0, true, 2.5);
  CHECK_THAT(j, Contains("\"nranks\": 8,"));
  CHECK_THAT(j, Contains("{\"mode\": \"ulysses\", \"B\": 2, \"G\": 1, \"K\": 8, \"S\": 64, \"size\": 4096"));
  CHECK_THAT(j, Contains("\"mode\": \"basp\""));
  CHECK_THAT(j, Contains("\"wrong\": null"));
  CHECK_THAT(j, Contains("\"out_of_bounds\": 0"));
  CHECK_THAT(j, Contains("\"avg_busbw_gbs\": 2.5"));
  CHECK_THAT(perf_json({}, {}, 0, false, 0), Contains("\"out_of_bounds\": null"));
}

TEST_CASE("perf_json writes the per-rank byte counts when recorded", "[bench][json]") {
  JsonRecord a;
  a.mode = "basp";
  a.rank_bytes_max = 300;
  a.rank_bytes_min = 0;
  a.sent_bytes_max = 250;
  a.sent_bytes_min = 7;
  const std::string j = perf_json({}, {a}, 0, true, 0);
  CHECK_THAT(j, Contains("\"wrong\": null, \"rank_bytes_max\": 300, \"rank_bytes_min\": 0, \"sent_bytes_max\": 250, "
                         "\"sent_bytes_min\": 7}"));
  JsonRecord b;
  b.mode = "ulysses";
  CHECK_THAT(perf_json({}, {b}, 0, true, 0), !Contains("rank_bytes_max"));
}
