#include "common/log.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <mutex>

#include "common/env.h"

namespace basp::log {

std::atomic<int> g_level{0};

namespace {

std::atomic<int32_t> g_rank{-1};

struct Sink {
  std::mutex mutex;
  std::FILE* file = nullptr;  // nullptr: stderr
  std::string path;           // the expanded BASP_DEBUG_FILE of `file`
};

Sink& sink() {
  static Sink* s = new Sink;  // never destroyed: sites may log from static destructors
  return *s;
}

const std::string& host_name() {
  static const std::string name = [] {
    char host[HOST_NAME_MAX + 1] = {};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return std::string("localhost");
    return std::string(host);
  }();
  return name;
}

}  // namespace

Level parse_level(const std::string& text, bool* ok) {
  *ok = true;
  if (text.empty() || text == "OFF") return Level::kOFF;
  if (text == "WARN") return Level::kWARN;
  if (text == "INFO") return Level::kINFO;
  if (text == "TRACE") return Level::kTRACE;
  *ok = false;
  return Level::kOFF;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kOFF: return "OFF";
    case Level::kWARN: return "WARN";
    case Level::kINFO: return "INFO";
    case Level::kTRACE: return "TRACE";
  }
  return "?";
}

void configure() {
  bool ok = false;
  const Level level = parse_level(env::get_enum("BASP_DEBUG"), &ok);
  const std::string pattern = env::get_string("BASP_DEBUG_FILE");
  std::string failed;
  {
    Sink& s = sink();
    std::lock_guard<std::mutex> lock(s.mutex);
    const std::string path = pattern.empty() || level == Level::kOFF ? "" : expand_path(pattern);
    if (path != s.path) {
      if (s.file != nullptr) std::fclose(s.file);
      s.file = path.empty() ? nullptr : std::fopen(path.c_str(), "a");
      if (!path.empty() && s.file == nullptr) failed = path;
      s.path = s.file != nullptr ? path : "";
    }
  }
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  if (!failed.empty()) BASP_LOG(WARN, "BASP_DEBUG_FILE (", failed, ") cannot be opened for writing: logging to stderr");
}

void set_rank(int32_t rank) { g_rank.store(rank, std::memory_order_relaxed); }

std::string prefix(int32_t rank) {
  return host_name() + ":" + std::to_string(getpid()) + ":" + (rank >= 0 ? std::to_string(rank) : std::string("?"));
}

std::string expand_path(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'h') {
      out += host_name();
    } else if (c == 'p') {
      out += std::to_string(getpid());
    } else if (c == '%') {
      out += '%';
    } else {
      out += '%';
      out += c;
    }
  }
  return out;
}

void write(Level level, const std::string& text) {
  const std::string line =
      prefix(g_rank.load(std::memory_order_relaxed)) + " BASP " + level_name(level) + " " + text + "\n";
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::FILE* out = s.file != nullptr ? s.file : stderr;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace basp::log
