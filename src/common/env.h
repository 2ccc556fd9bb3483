// The library's environment variables, read through one table (docs/debugging.md, README "Environment
// variables"): each knob's name, type, allowed values, default and one-line doc. A value outside the documented
// set is BASP_ERROR_INVALID_ARGUMENT naming the variable and the value, thrown by the call that reads it. Unset
// and empty are the same: the default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace basp::env {

enum class Type { kBool, kInt, kEnum, kString };

struct Knob {
  const char* name;
  Type type;
  // kBool: "0" or "1"; kEnum: the values, '|'-separated; kInt: the range "lo..hi"; kString: any non-empty text.
  std::vector<std::string> allowed;
  int64_t min = 0, max = 0;   // kInt only
  const char* default_value;  // what unset means, as text ("" for a string knob without one)
  const char* alias_of;       // a deprecated old name: the knob it stands for, else nullptr
  const char* doc;
};

// Every knob, in the README's order (aliases after the knob they stand for).
const std::vector<Knob>& knobs();
// The knob called `name`; BASP_ERROR_INTERNAL for a name not in the table (a programming error).
const Knob& knob(const char* name);

// The variable's text; empty when unset or empty.
std::string raw(const char* name);
// Whether `value` is one of the knob's allowed values (the empty text always is: the default).
bool allowed(const Knob& knob, const std::string& value);
// "BASP_X (value) must be ...": the message of a value outside the set.
std::string invalid_message(const Knob& knob, const std::string& value);

// The checked values (the default when unset or empty); each throws INVALID_ARGUMENT for a value outside the set.
bool get_bool(const char* name);
int64_t get_int(const char* name);
std::string get_enum(const char* name);
std::string get_string(const char* name);

// One line per knob: "name<TAB>type<TAB>allowed<TAB>default<TAB>alias_of<TAB>doc" (tests and docs).
std::string describe_table();

}  // namespace basp::env
