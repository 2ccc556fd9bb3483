#include "common/env.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/error.h"

namespace basp::env {
namespace {

const char* type_name(Type type) {
  switch (type) {
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kEnum: return "enum";
    case Type::kString: return "string";
  }
  return "?";
}

std::vector<Knob> make_table() {
  std::vector<Knob> t;
  t.push_back({"BASP_MPI_TRANSPORT",
               Type::kEnum,
               {"auto", "p2p", "cma", "staged", "direct"},
               0,
               0,
               "auto",
               nullptr,
               "the MPI backend's path; direct is cma's name before 0.2 (read at plan creation, agreed by the group)"});
  t.push_back({"BASP_CHECK_POINTERS",
               Type::kBool,
               {"0", "1"},
               0,
               0,
               "1",
               nullptr,
               "0 turns off the per-execute check that pointers are memory the backend can reach (read at plan "
               "creation)"});
  t.push_back({"BASP_TIMEOUT_MS",
               Type::kInt,
               {},
               0,
               int64_t{30} * 24 * 3600 * 1000,
               "300000",
               nullptr,
               "milliseconds a blocking step waits for the other ranks before BASP_ERROR_TIMEOUT; 0 waits forever "
               "(basp_comm_config_t.timeout_ms overrides it)"});
  t.push_back({"BASP_NODE_ID",
               Type::kString,
               {},
               0,
               0,
               "",
               nullptr,
               "replaces the node identity (host name + boot id) that topology placement groups ranks by"});
  t.push_back({"BASP_CHECK_EXCHANGES",
               Type::kBool,
               {"0", "1"},
               0,
               0,
               "0",
               nullptr,
               "1: every NCCL execute first agrees with its group on plan, operation and token count (read at plan "
               "creation)"});
  t.push_back({"BASP_CHECK_TOKENS",
               Type::kBool,
               {"0", "1"},
               0,
               0,
               "0",
               "BASP_CHECK_EXCHANGES",
               "the old name of BASP_CHECK_EXCHANGES: 1 turns the check on as well"});
  t.push_back({"BASP_DEBUG",
               Type::kEnum,
               {"OFF", "WARN", "INFO", "TRACE"},
               0,
               0,
               "OFF",
               nullptr,
               "log to stderr, each line prefixed host:pid:rank: WARN problems, INFO what comm and plan creation "
               "decided, TRACE one line per execute (read at comm creation)"});
  t.push_back({"BASP_DEBUG_FILE",
               Type::kString,
               {},
               0,
               0,
               "",
               nullptr,
               "the BASP_DEBUG log goes to this file instead of stderr; %h is replaced by the host name, %p by the "
               "process id"});
  return t;
}

std::string join(const std::vector<std::string>& values, const char* sep) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? sep : "") + values[i];
  return out;
}

// Digits only: "5s", "-1" or "1e3" are mistakes worth naming, not values to guess at.
bool parse_int(const std::string& text, int64_t max, int64_t* value) {
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || v > max) return false;
    v = v * 10 + (c - '0');
  }
  *value = v;
  return !text.empty() && v <= max;
}

const Knob& checked(const char* name, Type type, std::string* value) {
  const Knob& k = knob(name);
  BASP_CHECK(k.type == type, BASP_ERROR_INTERNAL, name, " is a ", type_name(k.type), " knob, read as ",
             type_name(type));
  *value = raw(name);
  BASP_CHECK_ARG(allowed(k, *value), invalid_message(k, *value));
  return k;
}

}  // namespace

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = make_table();
  return table;
}

const Knob& knob(const char* name) {
  for (const Knob& k : knobs()) {
    if (std::strcmp(k.name, name) == 0) return k;
  }
  detail::fail(BASP_ERROR_INTERNAL, "environment variable ", name, " is not in the table of src/common/env.cpp");
}

std::string raw(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

bool allowed(const Knob& knob, const std::string& value) {
  if (value.empty()) return true;
  switch (knob.type) {
    case Type::kBool:
    case Type::kEnum:
      for (const std::string& a : knob.allowed) {
        if (a == value) return true;
      }
      return false;
    case Type::kInt: {
      int64_t v = 0;
      return parse_int(value, knob.max, &v) && v >= knob.min;
    }
    case Type::kString: return true;
  }
  return false;
}

std::string invalid_message(const Knob& knob, const std::string& value) {
  std::ostringstream out;
  out << knob.name << " (" << value << ") must be ";
  switch (knob.type) {
    case Type::kBool: out << "0 or 1"; break;
    case Type::kEnum:
      for (size_t i = 0; i < knob.allowed.size(); ++i) {
        out << (i == 0 ? "" : i + 1 == knob.allowed.size() ? " or " : ", ") << knob.allowed[i];
      }
      break;
    case Type::kInt: out << "a number in " << knob.min << ".." << knob.max; break;
    case Type::kString: out << "any text"; break;
  }
  out << " (default " << (*knob.default_value ? knob.default_value : "unset") << ")";
  return out.str();
}

bool get_bool(const char* name) {
  std::string value;
  const Knob& k = checked(name, Type::kBool, &value);
  return (value.empty() ? std::string(k.default_value) : value) == "1";
}

int64_t get_int(const char* name) {
  std::string value;
  const Knob& k = checked(name, Type::kInt, &value);
  int64_t v = 0;
  parse_int(value.empty() ? k.default_value : value, k.max, &v);
  return v;
}

std::string get_enum(const char* name) {
  std::string value;
  const Knob& k = checked(name, Type::kEnum, &value);
  return value.empty() ? k.default_value : value;
}

std::string get_string(const char* name) {
  std::string value;
  const Knob& k = checked(name, Type::kString, &value);
  return value.empty() ? k.default_value : value;
}

std::string describe_table() {
  std::ostringstream out;
  for (const Knob& k : knobs()) {
    out << k.name << '\t' << type_name(k.type) << '\t';
    if (k.type == Type::kInt) {
      out << k.min << ".." << k.max;
    } else {
      out << join(k.allowed, "|");
    }
    out << '\t' << k.default_value << '\t' << (k.alias_of ? k.alias_of : "") << '\t' << k.doc << '\n';
  }
  return out.str();
}

}  // namespace basp::env
