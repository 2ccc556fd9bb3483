// The text form of the cost model (cost_model.h: export_cost_model, import_cost_model).
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

#include "common/error.h"
#include "plan/cost_model.h"

namespace basp::plan {

namespace {

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

}  // namespace

std::string export_cost_model(const CostModel& model) {
  const std::array<std::pair<const char*, double>, 6> numbers = {{{"a0", model.a0},
                                                                  {"a1", model.a1},
                                                                  {"beta_node", model.beta_node},
                                                                  {"beta_network", model.beta_network},
                                                                  {"c2", model.c2},
                                                                  {"c1", model.c1}}};
  for (const auto& [name, v] : numbers) check_exportable(name, v);
  check_exportable("per_piece", model.per_piece);
  BASP_CHECK_ARG(model.world_size >= 0, "export_cost_model: world_size (", model.world_size, ") must be 0 or more");
  BASP_CHECK_ARG(model.num_nodes >= 0, "export_cost_model: num_nodes (", model.num_nodes, ") must be 0 or more");
  check_exportable("source", model.source);
  check_exportable("note", model.note);

  std::string out = std::string(kHeader) + "\n";
  for (const auto& [name, v] : numbers) out += std::string(name) + " " + format_double(v) + "\n";
  if (model.per_piece != 0.0) out += "per_piece " + format_double(model.per_piece) + "\n";
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
  const std::array<const char*, 11> keys = {"a0",     "a1",         "beta_node", "beta_network", "c2",       "c1",
                                            "source", "world_size", "num_nodes", "note",         "per_piece"};
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
      case 9: m.note = value; break;
      default: m.per_piece = parse_coefficient(key, value, line); break;
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
