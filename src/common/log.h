// BASP_DEBUG logging, in the spirit of NCCL_DEBUG (docs/debugging.md): WARN, INFO or TRACE lines to stderr, or to
// BASP_DEBUG_FILE, each prefixed "host:pid:rank BASP LEVEL". Off by default; a site then costs one relaxed atomic
// load and a branch, and formats nothing:
//
//   BASP_LOG(INFO, "plan ", id, ": path ", name);
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace basp::log {

enum class Level : int { kOFF = 0, kWARN = 1, kINFO = 2, kTRACE = 3 };

// The level sites compare against; written by configure() only.
extern std::atomic<int> g_level;

inline bool enabled(Level level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

// "OFF" (or empty), "WARN", "INFO", "TRACE" -> the level; *ok false for anything else.
Level parse_level(const std::string& text, bool* ok);
const char* level_name(Level level);

// Reads BASP_DEBUG and BASP_DEBUG_FILE (common/env.h: INVALID_ARGUMENT naming a bad value) and applies them. Comm
// creation calls it; calling it again re-reads both (a file already open for the same path stays open).
void configure();

// The rank in the prefix: the world rank once a comm knows it, -1 ('?') before.
void set_rank(int32_t rank);
// "host:pid:rank" with the rank given (-1: '?').
std::string prefix(int32_t rank);
// BASP_DEBUG_FILE's pattern with %h (host name) and %p (process id) replaced; "%%" is one '%'.
std::string expand_path(const std::string& pattern);

// One line at `level` (the caller checked enabled()): prefix, level, text, newline; written whole.
void write(Level level, const std::string& text);

}  // namespace basp::log

#define BASP_LOG(LEVEL, ...)                                                              \
  do {                                                                                    \
    if (::basp::log::enabled(::basp::log::Level::k##LEVEL)) {                             \
      ::basp::log::write(::basp::log::Level::k##LEVEL, ::basp::detail::str(__VA_ARGS__)); \
    }                                                                                     \
  } while (0)
