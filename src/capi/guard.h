// The one place where C++ meets the C ABI: exception -> status mapping, the thread-local error message,
// versioned struct reading and the registry of live handles.
#pragma once

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "basp/basp.h"
#include "common/error.h"

namespace basp::capi {

void set_last_error(const char* function, const std::string& message);
void clear_last_error();

// Runs body() and maps whatever it throws to a status; never lets an exception escape.
template <typename Body>
basp_status_t guarded(const char* function, Body&& body) noexcept {
  try {
    clear_last_error();
    body();
    return BASP_SUCCESS;
  } catch (const detail::Error& e) {
    set_last_error(function, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error(function, "out of host memory");
    return BASP_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(function, std::string("internal error: ") + e.what());
    return BASP_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(function, "internal error: unknown exception");
    return BASP_ERROR_INTERNAL;
  }
}

// Reads a caller's versioned struct: checks pointer, size, magic and version, then copies min(size, sizeof)
// bytes over `defaults`, so fields a smaller (older) struct lacks keep their defaults. `first_size` is the size of
// the struct's first layout: the smallest a caller can have been built with.
template <typename T>
T read_struct(const T* user, const T& defaults, uint32_t magic, uint32_t max_version, const char* name,
              size_t first_size) {
  BASP_CHECK(user != nullptr, BASP_ERROR_NULL_POINTER, name, " is NULL");
  constexpr size_t kMinSize = offsetof(T, version) + sizeof(uint32_t);
  BASP_CHECK(user->size >= kMinSize && user->size <= (size_t{1} << 20), BASP_ERROR_BAD_STRUCT, name, "->size (",
             user->size, ") is not a valid struct size (expected ", sizeof(T), ")");
  BASP_CHECK(user->magic == magic, BASP_ERROR_BAD_STRUCT, name, "->magic (0x", std::hex, user->magic,
             ") is wrong (expected 0x", magic, "): initialise it with its _INITIALIZER macro");
  BASP_CHECK(user->version >= 1 && user->version <= max_version, BASP_ERROR_BAD_STRUCT, name, "->version (",
             user->version, ") is not supported (1..", max_version, ")");
  BASP_CHECK(user->size >= first_size, BASP_ERROR_BAD_STRUCT, name, "->size (", std::dec, user->size,
             ") is smaller than the struct's first layout (", first_size, " bytes; this build's is ", sizeof(T), ")");
  T out = defaults;
  std::memcpy(&out, user, std::min(user->size, sizeof(T)));
  return out;
}

// Checks an output struct's header the same way. `min_size` is the size of the struct's first release: callers
// built against it pass that size and get exactly those fields.
template <typename T>
void check_out_struct(const T* user, uint32_t magic, size_t min_size, const char* name) {
  BASP_CHECK(user != nullptr, BASP_ERROR_NULL_POINTER, name, " is NULL");
  BASP_CHECK(user->size >= min_size && user->size <= (size_t{1} << 20), BASP_ERROR_BAD_STRUCT, name, "->size (",
             user->size, ") is not a valid struct size (expected ", sizeof(T), ")");
  BASP_CHECK(user->magic == magic, BASP_ERROR_BAD_STRUCT, name, "->magic (0x", std::hex, user->magic,
             ") is wrong (expected 0x", magic, "): initialise it with its _INITIALIZER macro");
}

// Writes `value` over the caller's struct, min(size, sizeof) bytes, keeping the caller's header.
template <typename T>
void write_out_struct(T* user, T value) {
  value.size = user->size;
  value.magic = user->magic;
  value.version = user->version;
  std::memcpy(user, &value, std::min(user->size, sizeof(T)));
}

}  // namespace basp::capi
