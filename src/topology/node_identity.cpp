#include "topology/node_identity.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>

#include "common/env.h"
#include "common/error.h"

namespace basp::topology {

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed) {
  detail::Fnv1a h(seed);
  h.add_bytes(data, bytes);
  return h.value();
}

uint64_t fnv1a64(const std::string& s) { return fnv1a64(s.data(), s.size()); }

std::string key_to_hex(uint64_t key) {
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = digits[key & 0xf];
    key >>= 4;
  }
  return out;
}

uint64_t key_from_hex(const std::string& hex, const char* what) {
  BASP_CHECK_ARG(!hex.empty() && hex.size() <= 16, what, " (\"", hex, "\") is not 1 to 16 hex digits");
  uint64_t v = 0;
  for (char c : hex) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    BASP_CHECK_ARG(d >= 0, what, " (\"", hex, "\") is not 1 to 16 hex digits");
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

NodeIdentity local_node_identity() {
  NodeIdentity id;
  const std::string env = env::get_string(kNodeIdEnv);
  if (!env.empty()) {
    id.name = env;
    id.source = kNodeIdEnv;
    id.key = fnv1a64(id.name);
    return id;
  }
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);  // empty where the file does not exist: the host name alone then
  id.name = host[0] != '\0' ? host : "localhost";
  id.source = "hostname+boot_id";
  id.key = fnv1a64(id.name + "\n" + boot_id);
  return id;
}

}  // namespace basp::topology
