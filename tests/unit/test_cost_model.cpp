// The exchange cost model (plan/cost_model.h): the fit against synthetic timings of known coefficients and a
// reference least-squares solver written here (normal equations in long double), the text form's round trip bit
// for bit, then every malformed sample and every malformed text.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "plan/cost_model.h"

using basp::plan::CostModel;
using basp::plan::CostSample;

namespace {

uint64_t test_seed() {
  const char* env = std::getenv("BASP_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20261202u;
}

struct Truth {
  double a0, a1, beta_node, beta_network;
  double seconds(int32_t k, double node, double network) const {
    return a0 + a1 * (k - 1) + beta_node * node + beta_network * network;
  }
};

// Not the defaults, so that a coefficient left at base's value cannot pass for a fitted one.
constexpr Truth kTruth = {31e-6, 7e-6, 1.0 / 3.3e9, 1.0 / 11e9};

// A grid where every coefficient matters: from latency-bound (no bytes) to bandwidth-bound exchanges.
std::vector<CostSample> grid(const Truth& t, bool network = true) {
  std::vector<CostSample> out;
  for (const int32_t k : {2, 3, 4, 8}) {
    for (const double node : {0.0, 1e4, 1e6, 3e7}) {
      for (const double net : {0.0, 5e4, 2e6, 5e7}) {
        if (!network && net > 0.0) continue;
        out.push_back({k, node, net, t.seconds(k, node, net)});
      }
    }
  }
  return out;
}

void require_close(double got, double want, double rel) {
  INFO("got " << got << ", want " << want);
  REQUIRE(std::fabs(got - want) <= rel * std::fabs(want));
}

// The weighted least squares the fit is documented to solve, min sum ((x_i . c - t_i) / t_i)^2 over the columns
// `use` (0: 1, 1: k - 1, 2: node bytes, 3: network bytes) with the others at `fixed`, by the normal equations
// in long double and Gaussian elimination with partial pivoting: the plain way, not the code under test's QR.
std::vector<long double> reference_fit(const std::vector<CostSample>& samples, const std::vector<int>& use,
                                       const std::vector<double>& fixed) {
  const size_t m = use.size();
  std::vector<std::vector<long double>> a(m, std::vector<long double>(m + 1, 0.0L));
  for (const auto& s : samples) {
    const long double x[4] = {1.0L, static_cast<long double>(s.k - 1), s.node_bytes, s.network_bytes};
    const long double w = 1.0L / s.seconds;
    long double y = s.seconds;
    for (int j = 0; j < 4; ++j) {
      bool used = false;
      for (const int u : use) used = used || u == j;
      if (!used) y -= fixed[j] * x[j];
    }
    for (size_t r = 0; r < m; ++r) {
      for (size_t c = 0; c < m; ++c) a[r][c] += w * w * x[use[r]] * x[use[c]];
      a[r][m] += w * w * x[use[r]] * y;
    }
  }
  for (size_t c = 0; c < m; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < m; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    }
    std::swap(a[c], a[p]);
    for (size_t r = c + 1; r < m; ++r) {
      const long double f = a[r][c] / a[c][c];
      for (size_t d = c; d <= m; ++d) a[r][d] -= f * a[c][d];
    }
  }
  std::vector<long double> z(m);
  for (size_t c = m; c-- > 0;) {
    long double sum = a[c][m];
    for (size_t d = c + 1; d < m; ++d) sum -= a[c][d] * z[d];
    z[c] = sum / a[c][c];
  }
  return z;
}

uint64_t bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

void require_same(const CostModel& a, const CostModel& b) {
  REQUIRE(bits(a.a0) == bits(b.a0));
  REQUIRE(bits(a.a1) == bits(b.a1));
  REQUIRE(bits(a.beta_node) == bits(b.beta_node));
  REQUIRE(bits(a.beta_network) == bits(b.beta_network));
  REQUIRE(bits(a.c2) == bits(b.c2));
  REQUIRE(bits(a.c1) == bits(b.c1));
  REQUIRE(bits(a.per_piece) == bits(b.per_piece));
  REQUIRE(a.source == b.source);
  REQUIRE(a.world_size == b.world_size);
  REQUIRE(a.num_nodes == b.num_nodes);
  REQUIRE(a.note == b.note);
}

// The error `text` raises on import: its status must be INVALID_ARGUMENT, its message is returned.
std::string import_error(const std::string& text) {
  try {
    basp::plan::import_cost_model(text);
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    return e.what();
  }
  FAIL("no error for:\n" << text);
  return {};
}

std::string fit_error(const std::vector<CostSample>& samples) {
  try {
    basp::plan::fit_exchange(samples, basp::plan::default_cost_model());
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    return e.what();
  }
  FAIL("no error");
  return {};
}

// A valid file, written out by hand (not by export_cost_model), one "key value" per line.
const std::string kValid =
    "basp-cost-model 1\n"
    "a0 2e-05\n"
    "a1 5e-06\n"
    "beta_node 2e-10\n"
    "beta_network 8e-11\n"
    "c2 1.5e-12\n"
    "c1 3e-09\n"
    "source calibrated\n"
    "world_size 16\n"
    "num_nodes 2\n"
    "note 2026-01-05 two nodes, 8 ranks each\n";

// kValid with its line that starts with `key ` replaced by `line` (or removed when `line` is empty).
std::string with_line(const std::string& key, const std::string& line) {
  const size_t at = kValid.find("\n" + key + " ");
  REQUIRE(at != std::string::npos);
  const size_t end = kValid.find('\n', at + 1);
  return kValid.substr(0, at + 1) + (line.empty() ? "" : line + "\n") + kValid.substr(end + 1);
}

}  // namespace

TEST_CASE("cost model: the defaults", "[cost_model]") {
  const CostModel m = basp::plan::default_cost_model();
  CHECK(m.a0 == 20e-6);
  CHECK(m.a1 == 5e-6);
  CHECK(m.beta_node == 1.0 / 5e9);        // 5 GB/s
  CHECK(m.beta_network == 1.0 / 12.5e9);  // 100 Gbit/s
  CHECK(m.c2 == 0.0);
  CHECK(m.c1 == 0.0);
  CHECK(m.source == "default");
  // A 16 MB exchange of a group of 4 within one node: 20 + 15 us + 16e6 / 5e9 s = 3.235 ms.
  CHECK(std::fabs(m.exchange_seconds(4, 16e6, 0.0) - 3.235e-3) < 1e-12);
  CHECK(m.exchange_seconds(1, 16e6, 16e6) == 0.0);
}

TEST_CASE("cost model: check_cost_model names a bad coefficient", "[cost_model]") {
  CHECK_NOTHROW(basp::plan::check_cost_model(basp::plan::default_cost_model(), "model->"));
  CostModel bad = basp::plan::default_cost_model();
  bad.beta_node = -1.0;
  REQUIRE_THROWS_WITH(basp::plan::check_cost_model(bad, "model->"),
                      Catch::Contains("model->beta_node (-1) must be finite and >= 0"));
  bad = basp::plan::default_cost_model();
  bad.c1 = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_WITH(basp::plan::check_cost_model(bad, "m."), Catch::Contains("m.c1 (inf) must be finite and >= 0"));
}

TEST_CASE("cost model: the fit recovers exact coefficients from noise-free timings", "[cost_model]") {
  CostModel base = basp::plan::default_cost_model();
  base.c2 = 1e-12;
  base.c1 = 2e-9;
  base.world_size = 16;
  base.num_nodes = 2;
  base.note = "kept";
  const CostModel m = basp::plan::fit_exchange(grid(kTruth), base);
  require_close(m.a0, kTruth.a0, 1e-9);
  require_close(m.a1, kTruth.a1, 1e-9);
  require_close(m.beta_node, kTruth.beta_node, 1e-9);
  require_close(m.beta_network, kTruth.beta_network, 1e-9);
  CHECK(m.source == "calibrated");
  // Everything else is base's.
  CHECK(m.c2 == 1e-12);
  CHECK(m.c1 == 2e-9);
  CHECK(m.world_size == 16);
  CHECK(m.num_nodes == 2);
  CHECK(m.note == "kept");

  // The order of the samples does not matter, nor do repeated samples; the minimum: four independent ones.
  std::vector<CostSample> samples = grid(kTruth);
  std::reverse(samples.begin(), samples.end());
  samples.insert(samples.end(), samples.begin(), samples.begin() + 10);
  const CostModel r = basp::plan::fit_exchange(samples, base);
  require_close(r.a0, kTruth.a0, 1e-9);
  require_close(r.beta_network, kTruth.beta_network, 1e-9);
  const std::vector<CostSample> four = {{2, 0, 0, kTruth.seconds(2, 0, 0)},
                                        {5, 0, 0, kTruth.seconds(5, 0, 0)},
                                        {2, 1e6, 0, kTruth.seconds(2, 1e6, 0)},
                                        {2, 0, 1e6, kTruth.seconds(2, 0, 1e6)}};
  const CostModel f = basp::plan::fit_exchange(four, base);
  require_close(f.a0, kTruth.a0, 1e-9);
  require_close(f.a1, kTruth.a1, 1e-9);
  require_close(f.beta_node, kTruth.beta_node, 1e-9);
  require_close(f.beta_network, kTruth.beta_network, 1e-9);
}

TEST_CASE("cost model: the fit is within a few percent of the truth under 2% noise", "[cost_model]") {
  const uint64_t seed = test_seed();
  INFO("BASP_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<CostSample> samples;
  for (int repeat = 0; repeat < 4; ++repeat) {
    for (CostSample s : grid(kTruth)) {
      const double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // [0, 1)
      s.seconds *= 1.0 + 0.02 * (2.0 * u - 1.0);
      samples.push_back(s);
    }
  }
  const CostModel m = basp::plan::fit_exchange(samples, basp::plan::default_cost_model());
  require_close(m.a0, kTruth.a0, 0.04);
  require_close(m.a1, kTruth.a1, 0.04);
  require_close(m.beta_node, kTruth.beta_node, 0.04);
  require_close(m.beta_network, kTruth.beta_network, 0.04);
  // And it is the least-squares optimum, not merely close to the truth: the reference solver agrees.
  const std::vector<long double> ref = reference_fit(samples, {0, 1, 2, 3}, {0, 0, 0, 0});
  require_close(m.a0, static_cast<double>(ref[0]), 1e-9);
  require_close(m.a1, static_cast<double>(ref[1]), 1e-9);
  require_close(m.beta_node, static_cast<double>(ref[2]), 1e-9);
  require_close(m.beta_network, static_cast<double>(ref[3]), 1e-9);
}

TEST_CASE("cost model: coefficients the samples cannot determine keep base's value", "[cost_model]") {
  CostModel base = basp::plan::default_cost_model();
  base.a1 = 9e-6;
  base.beta_node = 1.0 / 4e9;
  base.beta_network = 1.0 / 7e9;

  SECTION("no sample crosses a node: beta_network is base's, the rest fitted") {
    const CostModel m = basp::plan::fit_exchange(grid(kTruth, false), base);
    CHECK(m.beta_network == base.beta_network);
    require_close(m.a0, kTruth.a0, 1e-9);
    require_close(m.a1, kTruth.a1, 1e-9);
    require_close(m.beta_node, kTruth.beta_node, 1e-9);
  }
  SECTION("one K: a1 is base's, a0 takes the rest of alpha(K)") {
    std::vector<CostSample> samples;
    for (const CostSample& s : grid(kTruth)) {
      if (s.k == 4) samples.push_back(s);
    }
    const CostModel m = basp::plan::fit_exchange(samples, base);
    CHECK(m.a1 == base.a1);
    // alpha(4) = a0 + 3 a1 is what the samples measure: a0 = 31 + 3 * 7 - 3 * 9 = 25 us.
    require_close(m.a0, kTruth.a0 + 3 * (kTruth.a1 - base.a1), 1e-9);
    require_close(m.beta_node, kTruth.beta_node, 1e-9);
    require_close(m.beta_network, kTruth.beta_network, 1e-9);
  }
  SECTION("no bytes at all and one K: only a0 is fitted") {
    const std::vector<CostSample> samples = {{3, 0, 0, 50e-6}, {3, 0, 0, 54e-6}};
    const CostModel m = basp::plan::fit_exchange(samples, base);
    CHECK(m.a1 == base.a1);
    CHECK(m.beta_node == base.beta_node);
    CHECK(m.beta_network == base.beta_network);
    // min (a - 50)^2 / 50^2 + (a - 54)^2 / 54^2 over a: a = (1/50 + 1/54) / (1/50^2 + 1/54^2), in us.
    const double want = (1.0 / 50 + 1.0 / 54) / (1.0 / (50.0 * 50) + 1.0 / (54.0 * 54)) - 2 * 9.0;
    require_close(m.a0, want * 1e-6, 1e-9);
  }
  SECTION("node bytes proportional to K - 1: beta_node is base's, a1 absorbs it") {
    // node = 1e6 (K - 1): t = a0 + (a1 + 1e6 beta_node) (K - 1) + ..., beta_node fixed at base's.
    std::vector<CostSample> samples;
    for (const int32_t k : {2, 3, 5, 9}) {
      for (const double net : {0.0, 1e5, 4e6}) {
        const double node = 1e6 * (k - 1);
        samples.push_back({k, node, net, kTruth.seconds(k, node, net)});
      }
    }
    const CostModel m = basp::plan::fit_exchange(samples, base);
    CHECK(m.beta_node == base.beta_node);
    require_close(m.a1, kTruth.a1 + 1e6 * (kTruth.beta_node - base.beta_node), 1e-9);
    require_close(m.a0, kTruth.a0, 1e-9);
    require_close(m.beta_network, kTruth.beta_network, 1e-9);
  }
}

TEST_CASE("cost model: a negative slope is clamped to 0 and the rest fitted again", "[cost_model]") {
  // Times that fall with the node bytes (a cache effect, say): t = 40 us + 5 us (K - 1) - 1e-13 s/B * node + ...
  const Truth falling = {40e-6, 5e-6, -1e-13, 1.0 / 11e9};
  const std::vector<CostSample> samples = grid(falling);
  for (const auto& s : samples) REQUIRE(s.seconds > 0.0);
  // The unconstrained optimum has beta_node < 0 (the test's premise) ...
  const std::vector<long double> full = reference_fit(samples, {0, 1, 2, 3}, {0, 0, 0, 0});
  REQUIRE(full[2] < 0.0L);
  // ... so the fit fixes beta_node at 0 and is the optimum of the other three.
  const CostModel m = basp::plan::fit_exchange(samples, basp::plan::default_cost_model());
  CHECK(m.beta_node == 0.0);
  const std::vector<long double> rest = reference_fit(samples, {0, 1, 3}, {0, 0, 0, 0});
  REQUIRE(rest[0] > 0.0L);
  REQUIRE(rest[1] > 0.0L);
  REQUIRE(rest[2] > 0.0L);
  require_close(m.a0, static_cast<double>(rest[0]), 1e-9);
  require_close(m.a1, static_cast<double>(rest[1]), 1e-9);
  require_close(m.beta_network, static_cast<double>(rest[2]), 1e-9);

  // A negative intercept: t = 1e-10 s/B * node - 2 us (node >= 1e5 B, so t >= 8 us): a0 = 0, beta_node refitted.
  std::vector<CostSample> bw_only;
  for (const double node : {1e5, 1e6, 1e7, 1e8}) bw_only.push_back({2, node, 0, 1e-10 * node - 2e-6});
  const CostModel b = basp::plan::fit_exchange(bw_only, basp::plan::default_cost_model());
  CHECK(b.a0 == 0.0);
  // With one K, a1 stays base's (5 us) and is taken off the times before beta_node is fitted.
  const std::vector<long double> slope = reference_fit(bw_only, {2}, {0, 5e-6, 0, 0});
  require_close(b.beta_node, static_cast<double>(slope[0]), 1e-9);
  CHECK(b.a1 == basp::plan::default_cost_model().a1);                      // one K
  CHECK(b.beta_network == basp::plan::default_cost_model().beta_network);  // no network bytes
}

TEST_CASE("cost model: every malformed sample is named by its index", "[cost_model]") {
  const std::vector<CostSample> good = grid(kTruth);
  auto with = [&](size_t i, auto change) {
    std::vector<CostSample> s = good;
    change(s[i]);
    return s;
  };
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  CHECK_THAT(fit_error({}), Catch::Contains("no samples"));
  CHECK_THAT(fit_error(with(3, [](CostSample& s) { s.k = 1; })), Catch::Contains("samples[3].k (1)"));
  CHECK_THAT(fit_error(with(0, [](CostSample& s) { s.k = -4; })), Catch::Contains("samples[0].k (-4)"));
  CHECK_THAT(fit_error(with(7, [](CostSample& s) { s.node_bytes = -1; })),
             Catch::Contains("samples[7].node_bytes (-1)"));
  CHECK_THAT(fit_error(with(2, [&](CostSample& s) { s.node_bytes = kNan; })),
             Catch::Contains("samples[2].node_bytes (nan)"));
  CHECK_THAT(fit_error(with(5, [](CostSample& s) { s.network_bytes = -3; })),
             Catch::Contains("samples[5].network_bytes (-3)"));
  CHECK_THAT(fit_error(with(6, [&](CostSample& s) { s.network_bytes = kInf; })),
             Catch::Contains("samples[6].network_bytes (inf)"));
  CHECK_THAT(fit_error(with(11, [](CostSample& s) { s.seconds = 0; })), Catch::Contains("samples[11].seconds (0)"));
  CHECK_THAT(fit_error(with(1, [](CostSample& s) { s.seconds = -2e-6; })),
             Catch::Contains("samples[1].seconds (-2e-06)"));
  CHECK_THAT(fit_error(with(4, [&](CostSample& s) { s.seconds = kNan; })), Catch::Contains("samples[4].seconds (nan)"));
  CHECK_THAT(fit_error(with(9, [&](CostSample& s) { s.seconds = kInf; })), Catch::Contains("samples[9].seconds (inf)"));
  // Seconds so small that bytes per second overflow: refused, not fitted to garbage.
  CHECK_THAT(fit_error(with(10, [](CostSample& s) { s.seconds = 1e-310; })),
             Catch::Contains("samples[10].seconds (1e-310) is too small"));
  CHECK_THAT(fit_error(with(13, [](CostSample& s) { s.seconds = 1e-300, s.node_bytes = 1e300; })),
             Catch::Contains("samples[13].seconds (1e-300) is too small for its bytes (node 1e+300"));
  // The first bad sample is the one named.
  std::vector<CostSample> two = with(8, [](CostSample& s) { s.k = 0; });
  two[12].seconds = 0;
  CHECK_THAT(fit_error(two), Catch::Contains("samples[8].k (0)"));
}

TEST_CASE("cost model: export then import is exact, bit for bit", "[cost_model]") {
  const uint64_t seed = test_seed();
  INFO("BASP_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  // Any finite non-negative double: random bits with the sign cleared, exponent not all ones (subnormals too).
  auto any_double = [&]() {
    for (;;) {
      const uint64_t b = rng() & ~(uint64_t{1} << 63);
      double v;
      std::memcpy(&v, &b, sizeof v);
      if (std::isfinite(v)) return v;
    }
  };
  // Or one of a plausible size: 1e-15 .. 1e4, log-uniform.
  auto plausible = [&]() { return std::pow(10.0, -15.0 + 19.0 * static_cast<double>(rng() >> 11) * 0x1p-53); };
  const std::vector<double> special = {0.0,
                                       1e-12,
                                       1e3,
                                       2e-05,
                                       0.1,
                                       1.0 / 3.0,
                                       std::numeric_limits<double>::denorm_min(),
                                       std::numeric_limits<double>::min(),
                                       std::numeric_limits<double>::max(),
                                       std::nextafter(1e-12, 1.0)};
  const std::vector<std::string> texts = {"",
                                          "calibrated",
                                          " leading space",
                                          "trailing space ",
                                          "tab\tinside",
                                          "# not a comment",
                                          "utf-8 \xc3\xa9t\xc3\xa9",
                                          std::string(990, 'x')};
  for (int trial = 0; trial < 2000; ++trial) {
    auto pick = [&](int j) {
      if (trial < static_cast<int>(special.size())) return special[static_cast<size_t>((trial + j) % special.size())];
      return trial % 2 == 0 ? any_double() : plausible();
    };
    CostModel m;
    m.a0 = pick(0);
    m.a1 = pick(1);
    m.beta_node = pick(2);
    m.beta_network = pick(3);
    m.c2 = pick(4);
    m.c1 = pick(5);
    m.per_piece = trial % 3 == 0 ? 0.0 : pick(6);  // 0: the line is left out
    m.source = texts[static_cast<size_t>(trial) % texts.size()];
    m.note = texts[static_cast<size_t>(trial + 3) % texts.size()];
    m.world_size = static_cast<int32_t>(rng() % 2 == 0 ? rng() % 100000 : rng() >> 33);
    m.num_nodes = trial == 0 ? std::numeric_limits<int32_t>::max() : static_cast<int32_t>(rng() % 1000);
    const std::string text = basp::plan::export_cost_model(m);
    INFO(text);
    REQUIRE(text.rfind("basp-cost-model 1\n", 0) == 0);
    require_same(basp::plan::import_cost_model(text), m);
  }
}

TEST_CASE("cost model: the text form", "[cost_model]") {
  // The hand-written file reads as written.
  const CostModel m = basp::plan::import_cost_model(kValid);
  CHECK(m.a0 == 2e-5);
  CHECK(m.a1 == 5e-6);
  CHECK(m.beta_node == 2e-10);
  CHECK(m.beta_network == 8e-11);
  CHECK(m.c2 == 1.5e-12);
  CHECK(m.c1 == 3e-9);
  CHECK(m.source == "calibrated");
  CHECK(m.world_size == 16);
  CHECK(m.num_nodes == 2);
  CHECK(m.note == "2026-01-05 two nodes, 8 ranks each");
  // Export writes the same lines, in the same order.
  CHECK(basp::plan::export_cost_model(m) == kValid);

  // Comments, blank lines, CRLF line ends, no final newline, trailing blanks after a number: all accepted.
  std::string loose = "basp-cost-model 1\r\n# written by hand\r\n\r\n   \n";
  loose += "c1 3e-09\r\nc2 1.5e-12 \t\na0 2e-05\nbeta_network\t8e-11\na1 5e-06\n#a0 1\nbeta_node 2e-10";
  const CostModel l = basp::plan::import_cost_model(loose);
  CHECK(l.a0 == 2e-5);
  CHECK(l.a1 == 5e-6);
  CHECK(l.beta_node == 2e-10);
  CHECK(l.beta_network == 8e-11);
  CHECK(l.c2 == 1.5e-12);
  CHECK(l.c1 == 3e-9);
  // The optional keys: source "imported", no context.
  CHECK(l.source == "imported");
  CHECK(l.world_size == 0);
  CHECK(l.num_nodes == 0);
  CHECK(l.note.empty());
  // A note is the rest of its line, spaces included; "note" alone is an empty note.
  CHECK(basp::plan::import_cost_model(with_line("note", "note   two  spaces ")).note == "  two  spaces ");
  CHECK(basp::plan::import_cost_model(with_line("note", "note")).note.empty());

  // What cannot be written is refused, rather than written as a file that reads back otherwise.
  CostModel bad = m;
  bad.note = "two\nlines";
  REQUIRE_THROWS_WITH(basp::plan::export_cost_model(bad), Catch::Contains("note 'two\\x0alines'"));
  bad = m;
  bad.beta_node = -1e-10;
  REQUIRE_THROWS_WITH(basp::plan::export_cost_model(bad), Catch::Contains("beta_node (-1e-10)"));
  bad = m;
  bad.a0 = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_THROWS_WITH(basp::plan::export_cost_model(bad), Catch::Contains("a0 (nan)"));
  bad = m;
  bad.world_size = -2;
  REQUIRE_THROWS_WITH(basp::plan::export_cost_model(bad), Catch::Contains("world_size (-2)"));
  bad = m;
  bad.source = std::string(1000, 's');
  REQUIRE_THROWS_WITH(basp::plan::export_cost_model(bad), Catch::Contains("source"));
}

TEST_CASE("cost model import: a missing or wrong header", "[cost_model]") {
  CHECK_THAT(import_error(""), Catch::Contains("empty text"));
  CHECK_THAT(import_error("basp-cost-model 2\n" + kValid.substr(18)),
             Catch::Contains("line 1: 'basp-cost-model 2' is not the header"));
  CHECK_THAT(import_error(kValid.substr(18)), Catch::Contains("line 1: 'a0 2e-05' is not the header"));
  CHECK_THAT(import_error("# comment\n" + kValid), Catch::Contains("line 1: '# comment' is not the header"));
  CHECK_THAT(import_error(" " + kValid), Catch::Contains("line 1: ' basp-cost-model 1' is not the header"));
  CHECK_THAT(import_error("\n" + kValid), Catch::Contains("line 1: '' is not the header"));
}

TEST_CASE("cost model import: an unknown key", "[cost_model]") {
  CHECK_THAT(import_error(with_line("c2", "c3 1e-12")), Catch::Contains("line 6: unknown key 'c3'"));
  CHECK_THAT(import_error(kValid + "A0 1\n"), Catch::Contains("line 12: unknown key 'A0'"));
  CHECK_THAT(import_error(kValid + " a0 1\n"), Catch::Contains("line 12: unknown key ''"));
  CHECK_THAT(import_error(kValid + "a0=1\n"), Catch::Contains("line 12: unknown key 'a0=1'"));
}

TEST_CASE("cost model import: a duplicate key", "[cost_model]") {
  CHECK_THAT(import_error(kValid + "a1 5e-06\n"), Catch::Contains("line 12: duplicate key 'a1' (first on line 3)"));
  CHECK_THAT(import_error(kValid + "note again\n"),
             Catch::Contains("line 12: duplicate key 'note' (first on line 11)"));
}

TEST_CASE("cost model import: a value that is not a number", "[cost_model]") {
  CHECK_THAT(import_error(with_line("a1", "a1 5e-06x")), Catch::Contains("line 3: a1 value '5e-06x' is not a number"));
  CHECK_THAT(import_error(with_line("a1", "a1")), Catch::Contains("line 3: a1 value '' is not a number"));
  CHECK_THAT(import_error(with_line("a1", "a1 five")), Catch::Contains("line 3: a1 value 'five' is not a number"));
  CHECK_THAT(import_error(with_line("c1", "c1 0x10")), Catch::Contains("line 7: c1 value '0x10' is not a number"));
  CHECK_THAT(import_error(with_line("c1", "c1 1,5")), Catch::Contains("line 7: c1 value '1,5' is not a number"));
  CHECK_THAT(import_error(with_line("c1", "c1 +1")), Catch::Contains("line 7: c1 value '+1' is not a number"));
  CHECK_THAT(import_error(with_line("c1", "c1  1")), Catch::Contains("line 7: c1 value ' 1' is not a number"));
  CHECK_THAT(import_error(with_line("a0", "a0 nan")), Catch::Contains("line 2: a0 value 'nan' is not finite"));
  CHECK_THAT(import_error(with_line("a0", "a0 inf")), Catch::Contains("line 2: a0 value 'inf' is not finite"));
  CHECK_THAT(import_error(with_line("a0", "a0 1e999")),
             Catch::Contains("line 2: a0 value '1e999' is out of the range of a double"));
  // A long value is quoted in part.
  const std::string digits(300, '7');
  CHECK_THAT(import_error(with_line("a0", "a0 " + digits + "z")),
             Catch::Contains("a0 value '" + digits.substr(0, 40) + "'... (301 characters) is not a number"));
  // The counts are int32 and not negative.
  CHECK_THAT(import_error(with_line("world_size", "world_size 1.5")),
             Catch::Contains("line 9: world_size value '1.5' is not an integer in 0..2147483647"));
  CHECK_THAT(import_error(with_line("world_size", "world_size 2147483648")),
             Catch::Contains("line 9: world_size value '2147483648' is not an integer"));
  CHECK_THAT(import_error(with_line("num_nodes", "num_nodes -1")),
             Catch::Contains("line 10: num_nodes value '-1' is not an integer"));
  CHECK_THAT(import_error(with_line("num_nodes", "num_nodes")),
             Catch::Contains("line 10: num_nodes value '' is not an integer"));
}

TEST_CASE("cost model import: a negative coefficient", "[cost_model]") {
  CHECK_THAT(import_error(with_line("beta_node", "beta_node -2e-10")),
             Catch::Contains("line 4: beta_node value '-2e-10' is negative"));
  CHECK_THAT(import_error(with_line("c2", "c2 -1")), Catch::Contains("line 6: c2 value '-1' is negative"));
  CHECK_THAT(import_error(with_line("a0", "a0 -inf")), Catch::Contains("line 2: a0 value '-inf' is not finite"));
}

TEST_CASE("cost model import: a missing key", "[cost_model]") {
  for (const char* key : {"a0", "a1", "beta_node", "beta_network", "c2", "c1"}) {
    INFO(key);
    CHECK_THAT(import_error(with_line(key, "")), Catch::Contains(std::string("missing key '") + key + "'"));
  }
  CHECK_THAT(import_error("basp-cost-model 1\n"), Catch::Contains("missing key 'a0'"));
  // The others are optional.
  for (const char* key : {"source", "world_size", "num_nodes", "note"}) {
    INFO(key);
    CHECK_NOTHROW(basp::plan::import_cost_model(with_line(key, "")));
  }
}

TEST_CASE("cost model import: a line over 1,000 characters", "[cost_model]") {
  // 1,000 characters is the longest line, 1,001 too long, also in a comment.
  CHECK(basp::plan::import_cost_model(with_line("note", "note " + std::string(995, 'n'))).note.size() == 995);
  CHECK_THAT(import_error(with_line("note", "note " + std::string(996, 'n'))),
             Catch::Contains("line 11: 1001 characters, more than 1000 ('note " + std::string(35, 'n') + "'..."));
  CHECK_THAT(import_error(kValid + "#" + std::string(5000, '#') + "\n"),
             Catch::Contains("line 12: 5001 characters, more than 1000"));
  CHECK_THAT(import_error(with_line("a0", "a0 " + std::string(2000, '1'))), Catch::Contains("line 2: 2003 characters"));
}

TEST_CASE("cost model import: a NUL byte, a stray carriage return", "[cost_model]") {
  std::string nul = kValid;
  nul.insert(nul.find("\nnote ") + 8, 1, '\0');
  CHECK_THAT(import_error(nul), Catch::Contains("line 11: a NUL byte"));
  CHECK_THAT(import_error(std::string("basp-cost-model 1\0\n", 19) + kValid.substr(18)),
             Catch::Contains("line 1: a NUL byte"));
  CHECK_THAT(import_error(with_line("source", "source cal\rbrated")),
             Catch::Contains("line 8: a carriage return inside the line ('source cal\\x0dbrated')"));
}
