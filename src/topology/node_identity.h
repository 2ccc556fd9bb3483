// Which node this process runs on: ranks with the same key share a node (shared memory, one PCIe tree).
//
// The key is a 64-bit FNV-1a hash of the host name and the kernel boot id (/proc/sys/kernel/random/boot_id),
// so two machines with the same host name, or one machine before and after a reboot, differ. The environment
// variable BASP_NODE_ID, when set and not empty, replaces both: its value is hashed instead and names the node.
// Tests use it to pretend that the ranks of one machine run on several nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/fnv.h"

namespace basp::topology {

constexpr const char* kNodeIdEnv = "BASP_NODE_ID";

struct NodeIdentity {
  uint64_t key = 0;
  std::string name;    // the host name, or BASP_NODE_ID's value
  std::string source;  // "hostname+boot_id" or "BASP_NODE_ID"
};

// Reads the environment and the host every time (cheap), so a test may change BASP_NODE_ID between calls.
NodeIdentity local_node_identity();

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed = detail::Fnv1a::kOffset);
uint64_t fnv1a64(const std::string& s);

// "1a2b3c4d5e6f7081": 16 lowercase hex digits, and back (throws naming `what` on a malformed string).
std::string key_to_hex(uint64_t key);
uint64_t key_from_hex(const std::string& hex, const char* what);

}  // namespace basp::topology
