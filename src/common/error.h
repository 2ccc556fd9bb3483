// Internal errors: every failure inside the library is a basp::detail::Error carrying the status the C ABI
// returns and a message that names the argument and its value. The C ABI turns it into a status (capi/).
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "basp/basp.h"

namespace basp::detail {

class Error : public std::runtime_error {
 public:
  Error(basp_status_t status, std::string message) : std::runtime_error(std::move(message)), status_(status) {}
  basp_status_t status() const noexcept { return status_; }

 private:
  basp_status_t status_;
};

template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(basp_status_t status, Args&&... args) {
  throw Error(status, str(std::forward<Args>(args)...));
}

// The status of a captured error: BASP_SUCCESS for none, BASP_ERROR_INTERNAL for anything but an Error.
inline basp_status_t status_of(const std::exception_ptr& error) {
  if (!error) return BASP_SUCCESS;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.status();
  } catch (...) {
    return BASP_ERROR_INTERNAL;
  }
}

}  // namespace basp::detail

// Argument check: on failure throws with the status and a message built from the remaining arguments.
#define BASP_CHECK(cond, status, ...)                         \
  do {                                                        \
    if (!(cond)) ::basp::detail::fail((status), __VA_ARGS__); \
  } while (0)

#define BASP_CHECK_ARG(cond, ...) BASP_CHECK(cond, BASP_ERROR_INVALID_ARGUMENT, __VA_ARGS__)
