// The partition of one node's ranks into parts of given sizes (the node's share of each group) that keeps the
// strongest NVLink connections inside the parts. Pure arithmetic.
//
// Score of a partition, compared lexicographically (higher is better), over the pairs inside each part:
//   weakest NVLink bandwidth, total bandwidth, weakest PCI locality, total locality.
// Ties go to the first partition in canonical order: the parts earlier in the list take the lower elements.
//
// Up to kExhaustiveMaxElements elements the search is exhaustive (branch and bound over canonical partitions:
// parts of equal size are unlabelled, so each partition is visited once; at most 15!! = 2,027,025 leaves for 16
// elements in pairs, far fewer in practice because the bound prunes on the weakest link). Beyond that a greedy
// construction (O(m^2 K)) followed by pairwise-swap improvement (O(m^2) candidate swaps per pass, each O(K + G))
// gives a good partition without a guarantee of optimality. Elements that are all alike (no GPUs, or a
// uniform fabric with uniform PCI locality) are answered directly in O(m).
#pragma once

#include <cstdint>
#include <vector>

namespace basp::plan {

constexpr int32_t kExhaustiveMaxElements = 16;

struct PartitionProblem {
  int32_t size = 0;                 // m elements
  std::vector<uint32_t> bandwidth;  // [a * m + b], symmetric
  std::vector<uint8_t> locality;    // [a * m + b], symmetric (PciLocality)
  std::vector<int32_t> part_sizes;  // positive, summing to m
};

struct PartitionScore {
  uint32_t min_bandwidth = UINT32_MAX;  // UINT32_MAX when no part has two elements
  uint64_t sum_bandwidth = 0;
  uint8_t min_locality = UINT8_MAX;
  uint64_t sum_locality = 0;

  bool operator<(const PartitionScore& o) const;
  bool operator==(const PartitionScore& o) const;
};

enum class PartitionMethod { kTrivial, kUniform, kExhaustive, kHeuristic };

// part_of[e] = index into problem.part_sizes of the part holding element e. Among parts of equal size, the lower
// index holds the block whose lowest element is lower. Throws on an inconsistent problem.
std::vector<int32_t> partition_node(const PartitionProblem& problem, PartitionMethod* method = nullptr);

// The heuristic alone (exposed so tests can compare it with the exhaustive search).
std::vector<int32_t> partition_node_heuristic(const PartitionProblem& problem);

PartitionScore score_partition(const PartitionProblem& problem, const std::vector<int32_t>& part_of);

}  // namespace basp::plan
