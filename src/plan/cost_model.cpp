#include "plan/cost_model.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <system_error>
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

// Text form -------------------------------------------------------------------------------------------------------

constexpr const char* kHeader = "basp-cost-model 1";
constexpr size_t kMaxLine = 1000;

// A value as error messages quote it: at most 40 characters, bytes outside printable ASCII as \xNN.
std::string quoted(const std::string& value) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  for (size_t i = 0; i < value.size() && i < kMax; ++i) {
    const unsigned char ch = static_cast<unsigned char>(value[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  out += "'";
  if (value.size() > kMax) out += detail::str("... (", value.size(), " characters)");
  return out;
}

std::string format_double(double v) {
  char buf[64];
  // Shortest text that reads back to the same double (like %.17g, exact, but without the noise digits), in the
  // "C" locale whatever the process's locale is.
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  if (r.ec != std::errc()) detail::fail(BASP_ERROR_INTERNAL, "cannot format ", v);
  return std::string(buf, r.ptr);
}

// Trailing spaces and tabs off a numeric value (a hand-edited file often has them); nothing else is forgiven.
std::string trim_right(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && (s[end - 1] == ' ' || s[end - 1] == '\t')) --end;
  return s.substr(0, end);
}

double parse_coefficient(const std::string& key, const std::string& raw, size_t line) {
  const std::string value = trim_right(raw);
  double v = 0.0;
  const char* begin = value.data();
  const char* end = value.data() + value.size();
  const auto r = std::from_chars(begin, end, v);  // no leading space, no locale; "inf" and "nan" parse: see below
  BASP_CHECK_ARG(!value.empty() && r.ec != std::errc::invalid_argument && r.ptr == end, "cost model line ", line, ": ",
                 key, " value ", quoted(raw), " is not a number");
  BASP_CHECK_ARG(r.ec == std::errc(), "cost model line ", line, ": ", key, " value ", quoted(raw),
                 " is out of the range of a double");
  BASP_CHECK_ARG(std::isfinite(v), "cost model line ", line, ": ", key, " value ", quoted(raw), " is not finite");
  BASP_CHECK_ARG(v >= 0.0, "cost model line ", line, ": ", key, " value ", quoted(raw), " is negative");
  return v;
}

int32_t parse_count(const std::string& key, const std::string& raw, size_t line) {
  const std::string value = trim_right(raw);
  int32_t v = 0;
  const char* end = value.data() + value.size();
  const auto r = std::from_chars(value.data(), end, v);
  BASP_CHECK_ARG(!value.empty() && r.ec == std::errc() && r.ptr == end && v >= 0, "cost model line ", line, ": ", key,
                 " value ", quoted(raw), " is not an integer in 0..", std::numeric_limits<int32_t>::max());
  return v;
}

void check_exportable(const char* name, double v) {
  BASP_CHECK_ARG(std::isfinite(v) && v >= 0.0, "export_cost_model: ", name, " (", v, ") must be finite and 0 or more");
}

void check_exportable(const char* name, const std::string& text) {
  for (const char ch : text) {
    BASP_CHECK_ARG(ch != '\n' && ch != '\r' && ch != '\0', "export_cost_model: ", name, " ", quoted(text),
                   " must be one line (no newline, carriage return or NUL)");
  }
  BASP_CHECK_ARG(text.size() + std::char_traits<char>::length(name) + 1 <= kMaxLine, "export_cost_model: ", name, " (",
                 text.size(), " characters) does not fit a line of ", kMaxLine, " characters");
}

using Coefficients = std::array<double, kNumExchange>;  // a0, a1, beta_node, beta_network

// Checks the samples and base's coefficients; returns base's coefficients.
Coefficients checked_base(const std::vector<CostSample>& samples, const CostModel& base) {
  BASP_CHECK_ARG(!samples.empty(), "fit_exchange: no samples (need at least one measured exchange)");
  for (size_t i = 0; i < samples.size(); ++i) check_sample(samples[i], i);
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
  const std::array<std::pair<const char*, double>, 6> coefficients = {{{"a0", model.a0},
                                                                       {"a1", model.a1},
                                                                       {"beta_node", model.beta_node},
                                                                       {"beta_network", model.beta_network},
                                                                       {"c2", model.c2},
                                                                       {"c1", model.c1}}};
  for (const auto& [name, v] : coefficients) {
    BASP_CHECK_ARG(std::isfinite(v) && v >= 0.0, prefix, name, " (", v, ") must be finite and >= 0");
  }
}

// The fit minimizes the relative residuals, sum_i ((predicted_i - seconds_i) / seconds_i)^2: timings spread over
// orders of magnitude with a roughly constant relative noise, and an unweighted fit would let the largest
// exchanges' noise swamp a0 and a1. Noise-free samples give the same answer either way.
CostModel fit_exchange(const std::vector<CostSample>& samples, const CostModel& base) {
  const Coefficients base_values = checked_base(samples, base);
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
  out.source = "calibrated";
  return out;
}

std::string export_cost_model(const CostModel& model) {
  const std::array<std::pair<const char*, double>, 6> numbers = {{{"a0", model.a0},
                                                                  {"a1", model.a1},
                                                                  {"beta_node", model.beta_node},
                                                                  {"beta_network", model.beta_network},
                                                                  {"c2", model.c2},
                                                                  {"c1", model.c1}}};
  for (const auto& [name, v] : numbers) check_exportable(name, v);
  BASP_CHECK_ARG(model.world_size >= 0, "export_cost_model: world_size (", model.world_size, ") must be 0 or more");
  BASP_CHECK_ARG(model.num_nodes >= 0, "export_cost_model: num_nodes (", model.num_nodes, ") must be 0 or more");
  check_exportable("source", model.source);
  check_exportable("note", model.note);

  std::string out = std::string(kHeader) + "\n";
  for (const auto& [name, v] : numbers) out += std::string(name) + " " + format_double(v) + "\n";
  auto text_line = [&](const char* name, const std::string& text) {
    out += name;
    if (!text.empty()) out += " " + text;
    out += "\n";
  };
  text_line("source", model.source);
  out += "world_size " + std::to_string(model.world_size) + "\n";
  out += "num_nodes " + std::to_string(model.num_nodes) + "\n";
  text_line("note", model.note);
  return out;
}

CostModel import_cost_model(const std::string& text) {
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + nul, '\n'));
    detail::fail(BASP_ERROR_INVALID_ARGUMENT, "cost model line ", line, ": a NUL byte (the text is not a cost model)");
  }
  const std::array<const char*, 10> keys = {"a0", "a1",     "beta_node",  "beta_network", "c2",
                                            "c1", "source", "world_size", "num_nodes",    "note"};
  std::array<size_t, keys.size()> seen_on{};  // the line of each key, 0: not seen
  CostModel m;
  m.source = "imported";  // when the file does not say
  size_t pos = 0;
  size_t line = 0;
  while (pos < text.size()) {
    ++line;
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string s = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!s.empty() && s.back() == '\r') s.pop_back();  // CRLF files
    BASP_CHECK_ARG(s.size() <= kMaxLine, "cost model line ", line, ": ", s.size(), " characters, more than ", kMaxLine,
                   " (", quoted(s), ")");
    BASP_CHECK_ARG(s.find('\r') == std::string::npos, "cost model line ", line, ": a carriage return inside the line (",
                   quoted(s), ")");
    if (line == 1) {
      BASP_CHECK_ARG(s == kHeader, "cost model line 1: ", quoted(s), " is not the header '", kHeader,
                     "' (not a cost model, or another version)");
      continue;
    }
    if (s.empty() || s[0] == '#' || s.find_first_not_of(" \t") == std::string::npos) continue;
    const size_t sep = s.find_first_of(" \t");
    const std::string key = s.substr(0, sep);
    const std::string value = sep == std::string::npos ? std::string() : s.substr(sep + 1);
    size_t index = keys.size();
    for (size_t k = 0; k < keys.size(); ++k) {
      if (key == keys[k]) index = k;
    }
    BASP_CHECK_ARG(index < keys.size(), "cost model line ", line, ": unknown key ", quoted(key));
    BASP_CHECK_ARG(seen_on[index] == 0, "cost model line ", line, ": duplicate key ", quoted(key), " (first on line ",
                   seen_on[index], ")");
    seen_on[index] = line;
    switch (index) {
      case 0: m.a0 = parse_coefficient(key, value, line); break;
      case 1: m.a1 = parse_coefficient(key, value, line); break;
      case 2: m.beta_node = parse_coefficient(key, value, line); break;
      case 3: m.beta_network = parse_coefficient(key, value, line); break;
      case 4: m.c2 = parse_coefficient(key, value, line); break;
      case 5: m.c1 = parse_coefficient(key, value, line); break;
      case 6: m.source = value; break;
      case 7: m.world_size = parse_count(key, value, line); break;
      case 8: m.num_nodes = parse_count(key, value, line); break;
      default: m.note = value; break;
    }
  }
  BASP_CHECK_ARG(line >= 1, "cost model: empty text (no header '", kHeader, "')");
  for (size_t k = 0; k < 6; ++k) {
    BASP_CHECK_ARG(seen_on[k] != 0, "cost model: missing key '", keys[k], "' (", line, " lines, none is '", keys[k],
                   " <value>')");
  }
  return m;
}

}  // namespace basp::plan
