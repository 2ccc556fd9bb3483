#include "plan/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "common/error.h"

namespace basp::plan {

namespace {

constexpr int kNumExchange = 4;  // a0, a1, beta_node, beta_network: the columns of the fit
constexpr std::array<const char*, kNumExchange> kExchangeNames = {"a0", "a1", "beta_node", "beta_network"};
// A column whose part outside the span of the columns before it is smaller than this (the columns are scaled to
// unit norm, so it is the sine of its angle to that span) is taken as determined by them: rounding in the QR
// factorization is ~1e-15, anything real is far above.
constexpr double kRankTolerance = 1e-9;

// sqrt(sum(v^2)) without overflow or underflow for any finite v: scaled by the largest magnitude first.
double norm_of(const std::vector<double>& v) {
  double largest = 0.0;
  for (const double x : v) largest = std::max(largest, std::fabs(x));
  if (largest == 0.0) return 0.0;
  double sum = 0.0;
  for (const double x : v) sum += (x / largest) * (x / largest);
  return largest * std::sqrt(sum);
}

void check_sample(const CostSample& s, size_t i) {
  BASP_CHECK_ARG(s.k >= 2, "samples[", i, "].k (", s.k, ") must be 2 or more: a group of one rank exchanges nothing");
  BASP_CHECK_ARG(std::isfinite(s.node_bytes) && s.node_bytes >= 0.0, "samples[", i, "].node_bytes (", s.node_bytes,
                 ") must be finite and 0 or more");
  BASP_CHECK_ARG(std::isfinite(s.network_bytes) && s.network_bytes >= 0.0, "samples[", i, "].network_bytes (",
                 s.network_bytes, ") must be finite and 0 or more");
  BASP_CHECK_ARG(std::isfinite(s.seconds) && s.seconds > 0.0, "samples[", i, "].seconds (", s.seconds,
                 ") must be finite and positive");
  BASP_CHECK_ARG(s.chunks >= 1, "samples[", i, "].chunks (", s.chunks, ") must be 1 or more");
  BASP_CHECK_ARG(std::isfinite(s.pieces) && s.pieces >= 0.0, "samples[", i, "].pieces (", s.pieces,
                 ") must be finite and 0 or more");
}

// Weighted least squares min sum_i w_i^2 (sum_c A_ic z_c - y_i)^2 over the columns `cols` by Householder QR of the
// weighted matrix. Returns false, with `dependent` set to the first column the others determine, when the matrix
// is rank deficient; otherwise z (one value per column of `cols`).
bool solve_least_squares(const std::vector<std::vector<double>>& columns, const std::vector<int>& cols,
                         const std::vector<double>& y, std::vector<double>& z, int& dependent) {
  const size_t n = y.size();
  const size_t m = cols.size();
  std::vector<std::vector<double>> a(m);
  for (size_t c = 0; c < m; ++c) a[c] = columns[static_cast<size_t>(cols[c])];
  std::vector<double> b = y;
  for (size_t c = 0; c < m; ++c) {
    std::vector<double> below(a[c].begin() + static_cast<std::ptrdiff_t>(std::min(c, n)), a[c].end());
    const double norm = norm_of(below);
    if (c >= n || norm <= kRankTolerance) {
      dependent = cols[c];
      return false;
    }
    // Householder reflection H = I - 2 v v^T / (v^T v) taking a[c][c..n) to (-sign * norm, 0, ...).
    const double alpha = a[c][c] > 0.0 ? -norm : norm;
    std::vector<double> v(below);
    v[0] -= alpha;
    const double vv = norm_of(v);
    for (double& x : v) x /= vv;  // vv >= norm > 0: unit v, H = I - 2 v v^T
    auto reflect = [&](std::vector<double>& col) {
      double dot = 0.0;
      for (size_t i = c; i < n; ++i) dot += v[i - c] * col[i];
      for (size_t i = c; i < n; ++i) col[i] -= 2.0 * dot * v[i - c];
    };
    for (size_t d = c + 1; d < m; ++d) reflect(a[d]);
    reflect(b);
    a[c][c] = alpha;
  }
  z.assign(m, 0.0);
  for (size_t c = m; c-- > 0;) {
    double sum = b[c];
    for (size_t d = c + 1; d < m; ++d) sum -= a[d][c] * z[d];
    z[c] = sum / a[c][c];
  }
  return true;
}

using Coefficients = std::array<double, kNumExchange>;  // a0, a1, beta_node, beta_network

// Checks the samples and base's coefficients; returns base's coefficients.
Coefficients checked_base(const std::vector<CostSample>& samples, const CostModel& base) {
  BASP_CHECK_ARG(!samples.empty(), "fit_exchange: no samples (need at least one measured exchange)");
  for (size_t i = 0; i < samples.size(); ++i) check_sample(samples[i], i);
  BASP_CHECK_ARG(std::isfinite(base.per_piece) && base.per_piece >= 0.0, "fit_exchange: base.per_piece (",
                 base.per_piece, ") must be finite and 0 or more");
  const Coefficients base_values = {base.a0, base.a1, base.beta_node, base.beta_network};
  for (int j = 0; j < kNumExchange; ++j) {
    BASP_CHECK_ARG(std::isfinite(base_values[j]) && base_values[j] >= 0.0, "fit_exchange: base.", kExchangeNames[j],
                   " (", base_values[j], ") must be finite and 0 or more");
  }
  return base_values;
}

// The weighted design matrix, one column per coefficient: row i divided by seconds_i.
std::vector<std::vector<double>> weighted_design(const std::vector<CostSample>& samples) {
  const size_t n = samples.size();
  std::vector<std::vector<double>> raw(kNumExchange, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i) {
    const double w = 1.0 / samples[i].seconds;
    raw[0][i] = w;
    raw[1][i] = (samples[i].k - 1) * w;
    raw[2][i] = samples[i].node_bytes * w;
    raw[3][i] = samples[i].network_bytes * w;
    // Only absurd samples get here (seconds below 1e-308, or bytes over 1e308 times seconds): refused rather than
    // silently leaving a coefficient at base's value.
    BASP_CHECK_ARG(std::isfinite(raw[0][i]) && std::isfinite(raw[2][i]) && std::isfinite(raw[3][i]), "samples[", i,
                   "].seconds (", samples[i].seconds, ") is too small for its bytes (node ", samples[i].node_bytes,
                   ", network ", samples[i].network_bytes, "): bytes per second overflow a double");
  }
  return raw;
}

// `raw` scaled to unit norm (unscaled when its norm is 0 or not finite); `scale` = its norm.
std::vector<double> scaled_column(const std::vector<double>& raw, double& scale) {
  scale = norm_of(raw);
  std::vector<double> column = raw;
  if (scale > 0.0 && std::isfinite(scale)) {
    for (double& x : column) x /= scale;
  }
  return column;
}

// The coefficients the samples can fit: those with bytes, and a1 only when the samples have more than one K.
std::array<bool, kNumExchange> free_columns(const std::vector<CostSample>& samples, const Coefficients& scale) {
  std::array<bool, kNumExchange> free{};
  for (int j = 0; j < kNumExchange; ++j) free[j] = scale[j] > 0.0 && std::isfinite(scale[j]);  // no bytes: base's
  bool one_k = true;
  for (const auto& s : samples) one_k = one_k && s.k == samples[0].k;
  if (one_k) free[1] = false;  // a1 is not separable from a0 with a single K: keep base's a1, fit a0
  return free;
}

// Weighted target 1 (seconds_i / seconds_i) less the fixed coefficients' part.
std::vector<double> fixed_target(const std::vector<std::vector<double>>& raw,
                                 const std::array<bool, kNumExchange>& free, const Coefficients& value) {
  const size_t n = raw[0].size();
  std::vector<double> y(n, 1.0);
  for (int j = 0; j < kNumExchange; ++j) {
    if (free[j] || value[j] == 0.0) continue;
    for (size_t i = 0; i < n; ++i) y[i] -= value[j] * raw[j][i];
  }
  return y;
}

// The index in z of its most negative value, or -1 when none is negative (ties: the first).
int most_negative_of(const std::vector<double>& z) {
  int most_negative = -1;
  for (size_t c = 0; c < z.size(); ++c) {
    if (z[c] < 0.0 && (most_negative < 0 || z[c] < z[static_cast<size_t>(most_negative)])) {
      most_negative = static_cast<int>(c);
    }
  }
  return most_negative;
}

// Fits the free columns with the others fixed; a dependent column keeps base's value, a negative one is fixed at 0
// and the rest fitted again (an active set that only grows: at most four rounds).
void fit_active_set(const std::vector<std::vector<double>>& raw, const std::vector<std::vector<double>>& columns,
                    const Coefficients& scale, const Coefficients& base_values, std::array<bool, kNumExchange>& free,
                    Coefficients& value) {
  for (int round = 0; round <= kNumExchange; ++round) {
    std::vector<int> cols;
    for (int j = 0; j < kNumExchange; ++j) {
      if (free[j]) cols.push_back(j);
    }
    if (cols.empty()) break;
    const std::vector<double> y = fixed_target(raw, free, value);
    std::vector<double> z;
    int dependent = -1;
    if (!solve_least_squares(columns, cols, y, z, dependent)) {
      free[dependent] = false;
      value[dependent] = base_values[dependent];
      continue;
    }
    const int most_negative = most_negative_of(z);
    if (most_negative >= 0) {
      const int j = cols[static_cast<size_t>(most_negative)];
      free[j] = false;
      value[j] = 0.0;
      continue;
    }
    for (size_t c = 0; c < cols.size(); ++c) value[cols[c]] = z[c] / scale[cols[c]];
    break;
  }
}

// per_piece from the chunked samples, `model`'s other coefficients fitted: the one-column least squares of their
// seconds above model's prediction for the chunks' alphas and bytes, on the extra pieces, pieces * (chunks - 1),
// relative residuals as the first fit's: x = sum(e_i r_i / s_i^2) / sum(e_i^2 / s_i^2). Clamped at 0; model's
// per_piece (base's) where no chunked sample has pieces.
double fit_per_piece(const std::vector<CostSample>& samples, const CostModel& model) {
  double num = 0.0;
  double den = 0.0;
  for (const CostSample& s : samples) {
    if (s.chunks == 1) continue;
    const double extra = s.pieces * (s.chunks - 1) / s.seconds;
    const double chunks_alone =
        s.chunks * model.alpha(s.k) + model.beta_node * s.node_bytes + model.beta_network * s.network_bytes;
    num += extra * (s.seconds - chunks_alone) / s.seconds;
    den += extra * extra;
  }
  if (den == 0.0) return model.per_piece;
  const double x = num / den;
  BASP_CHECK_ARG(std::isfinite(x), "fit_exchange: the chunked samples give per_piece = ", x,
                 " (pieces or seconds too far apart for a double)");
  return std::max(x, 0.0);
}

}  // namespace

// Rough figures, orders of magnitude rather than measurements, for a planner that runs before any calibration:
//   a0 = 20 us: a host-memory exchange within one node pays a few synchronizations of its group (a shared
//        memory or MPI control round each, a few microseconds apiece) before any byte moves;
//   a1 = 5 us per extra peer: one more message pair to post, match and complete, about one intra-node MPI
//        latency;
//   beta_node = 1 / (5 GB/s): one copy through shared memory or cross-memory attach by one core, memory bound
//        (a single core streams ~5-10 GB/s on current servers);
//   beta_network = 1 / (12.5 GB/s): the line rate of a 100 Gbit/s link, the common NIC of a training cluster;
//   c2 = c1 = 0: attention depends on the model and the GPU; the caller sets them.
CostModel default_cost_model() {
  CostModel m;
  m.a0 = 20e-6;
  m.a1 = 5e-6;
  m.beta_node = 1.0 / 5e9;
  m.beta_network = 1.0 / 12.5e9;
  m.c2 = 0.0;
  m.c1 = 0.0;
  m.source = "default";
  return m;
}

void check_cost_model(const CostModel& model, const char* prefix) {
  const std::array<std::pair<const char*, double>, 7> coefficients = {{{"a0", model.a0},
                                                                       {"a1", model.a1},
                                                                       {"beta_node", model.beta_node},
                                                                       {"beta_network", model.beta_network},
                                                                       {"c2", model.c2},
                                                                       {"c1", model.c1},
                                                                       {"per_piece", model.per_piece}}};
  for (const auto& [name, v] : coefficients) {
    BASP_CHECK_ARG(std::isfinite(v) && v >= 0.0, prefix, name, " (", v, ") must be finite and >= 0");
  }
}

// The fit minimizes the relative residuals, sum_i ((predicted_i - seconds_i) / seconds_i)^2: timings spread over
// orders of magnitude with a roughly constant relative noise, and an unweighted fit would let the largest
// exchanges' noise swamp a0 and a1. Noise-free samples give the same answer either way.
CostModel fit_exchange(const std::vector<CostSample>& all, const CostModel& base) {
  const Coefficients base_values = checked_base(all, base);
  std::vector<CostSample> samples;  // the whole exchanges
  for (const CostSample& s : all) {
    if (s.chunks == 1) samples.push_back(s);
  }
  BASP_CHECK_ARG(!samples.empty(), "fit_exchange: all ", all.size(),
                 " samples are chunked (need at least one whole exchange, chunks 1)");
  const std::vector<std::vector<double>> raw = weighted_design(samples);
  // Columns scaled to unit norm, so that the rank test and the pivots compare like with like.
  Coefficients scale{};
  std::vector<std::vector<double>> columns(kNumExchange);
  for (int j = 0; j < kNumExchange; ++j) columns[j] = scaled_column(raw[j], scale[j]);

  Coefficients value = base_values;
  std::array<bool, kNumExchange> free = free_columns(samples, scale);
  fit_active_set(raw, columns, scale, base_values, free, value);
  for (int j = 0; j < kNumExchange; ++j) {
    BASP_CHECK_ARG(std::isfinite(value[j]), "fit_exchange: the samples give ", kExchangeNames[j], " = ", value[j],
                   " (bytes or seconds too far apart for a double)");
  }

  CostModel out = base;
  out.a0 = value[0];
  out.a1 = value[1];
  out.beta_node = value[2];
  out.beta_network = value[3];
  out.per_piece = fit_per_piece(all, out);
  out.source = "calibrated";
  return out;
}

}  // namespace basp::plan
