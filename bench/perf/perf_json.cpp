#include "perf_json.h"

#include <cmath>
#include <cstdio>

namespace basp::bench {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return buf;
}

std::string perf_json(const std::vector<std::pair<std::string, std::string>>& header,
                      const std::vector<JsonRecord>& records, int64_t wrong, bool checked, double avg_busbw) {
  std::string out = "{\n";
  for (const auto& [key, value] : header) out += "  " + json_string(key) + ": " + value + ",\n";
  out += "  \"results\": [";
  for (size_t i = 0; i < records.size(); ++i) {
    const JsonRecord& r = records[i];
    out += i == 0 ? "\n" : ",\n";
    out += "    {\"mode\": " + json_string(r.mode) + ", \"B\": " + std::to_string(r.micro_batch) +
           ", \"G\": " + std::to_string(r.num_groups) + ", \"K\": " + std::to_string(r.group_size) +
           ", \"S\": " + std::to_string(r.seq_len) + ", \"size\": " + std::to_string(r.bytes) +
           ", \"count\": " + std::to_string(r.count) + ", \"time_us\": " + json_number(r.time_us) +
           ", \"algbw_gbs\": " + json_number(r.algbw) + ", \"busbw_gbs\": " + json_number(r.busbw) +
           ", \"wrong\": " + (r.wrong < 0 ? std::string("null") : std::to_string(r.wrong));
    const std::pair<const char*, int64_t> extra[] = {{"rank_bytes_max", r.rank_bytes_max},
                                                     {"rank_bytes_min", r.rank_bytes_min},
                                                     {"sent_bytes_max", r.sent_bytes_max},
                                                     {"sent_bytes_min", r.sent_bytes_min}};
    for (const auto& [key, value] : extra) {
      if (value >= 0) out += std::string(", \"") + key + "\": " + std::to_string(value);
    }
    out += "}";
  }
  out += "\n  ],\n";
  out += "  \"out_of_bounds\": " + (checked ? std::to_string(wrong) : std::string("null")) + ",\n";
  out += "  \"avg_busbw_gbs\": " + json_number(avg_busbw) + "\n}\n";
  return out;
}

}  // namespace basp::bench
