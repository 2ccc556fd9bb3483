#include "perf_table.h"

#include <cstdarg>
#include <cstdio>

namespace basp::bench {
namespace {

// Column widths; header and rows are built from the same table so they cannot drift apart.
constexpr int kSize = 12, kCount = 12, kType = 8, kBatch = 6, kSeq = 10;
constexpr int kTime = 9, kBw = 7, kWrong = 6, kRatio = 8;
constexpr int kGroupWidth = 1 + kTime + 1 + kBw + 1 + kBw + 1 + kWrong;  // one mode's columns with separators

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

// The leading columns, with the first one a character narrower in comment lines (they start with '#').
std::string lead(bool comment, const char* size, const char* count, const char* type, const char* batch,
                 const char* seq) {
  return fmt(comment ? "#%*s  %*s  %*s  %*s  %*s" : "%*s  %*s  %*s  %*s  %*s", comment ? kSize - 1 : kSize, size,
             kCount, count, kType, type, kBatch, batch, kSeq, seq);
}

std::string group(const char* time, const char* algbw, const char* busbw, const char* wrong) {
  return fmt(" %*s %*s %*s %*s", kTime, time, kBw, algbw, kBw, busbw, kWrong, wrong);
}

}  // namespace

double algbw_gbs(int64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1.0e9 : 0.0;
}

double busbw_gbs(double algbw, int64_t group_size) {
  return group_size > 0 ? algbw * static_cast<double>(group_size - 1) / static_cast<double>(group_size) : 0.0;
}

std::string format_time_us(double us) {
  if (us >= 10000.0) return fmt("%.0f", us);
  if (us >= 100.0) return fmt("%.1f", us);
  return fmt("%.2f", us);
}

std::string table_header(const std::vector<std::string>& mode_names) {
  const bool ratio = mode_names.size() == 2;
  std::string titles = lead(true, "", "", "", "", "");
  std::string names = lead(true, "size", "count", "type", "B", "S");
  std::string units = lead(true, "(B)", "(elements)", "", "", "(tokens)");
  for (const std::string& m : mode_names) {
    const int pad = kGroupWidth - static_cast<int>(m.size());
    titles += fmt("%*s%s%*s", pad - pad / 2, "", m.c_str(), pad / 2, "");
    names += group("time", "algbw", "busbw", "#wrong");
    units += group("(us)", "(GB/s)", "(GB/s)", "");
  }
  if (ratio) {
    titles += fmt(" %*s", kRatio, "");
    names += fmt(" %*s", kRatio, "ratio");
    units += fmt(" %*s", kRatio, "(U/B)");
  }
  // Trailing blanks carry no information.
  titles.erase(titles.find_last_not_of(' ') + 1);
  units.erase(units.find_last_not_of(' ') + 1);
  return titles + "\n" + names + "\n" + units + "\n";
}

std::string table_row(const TableRow& row) {
  std::string out = lead(false, std::to_string(row.bytes).c_str(), std::to_string(row.count).c_str(), row.type.c_str(),
                         std::to_string(row.micro_batch).c_str(), std::to_string(row.seq_len).c_str());
  for (const ModeResult& m : row.modes) {
    const std::string wrong = m.wrong < 0 ? "N/A" : std::to_string(m.wrong);
    out += group(format_time_us(m.time_us).c_str(), fmt("%.2f", m.algbw).c_str(), fmt("%.2f", m.busbw).c_str(),
                 wrong.c_str());
  }
  if (row.modes.size() == 2) {
    const double basp = row.modes[1].time_us;
    out += basp > 0 ? fmt(" %*.2f", kRatio, row.modes[0].time_us / basp) : fmt(" %*s", kRatio, "N/A");
  }
  return out + "\n";
}

std::string table_footer(int64_t wrong, bool checked, double avg_busbw) {
  std::string out;
  if (checked) {
    out += fmt("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
  } else {
    out += "# Out of bounds values : N/A (not checked: -c 0)\n";
  }
  out += fmt("# Avg bus bandwidth    : %g \n#\n", avg_busbw);
  return out;
}

}  // namespace basp::bench
