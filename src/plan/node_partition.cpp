#include "plan/node_partition.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

#include "common/error.h"

namespace basp::plan {

bool PartitionScore::operator<(const PartitionScore& o) const {
  return std::tie(min_bandwidth, sum_bandwidth, min_locality, sum_locality) <
         std::tie(o.min_bandwidth, o.sum_bandwidth, o.min_locality, o.sum_locality);
}

bool PartitionScore::operator==(const PartitionScore& o) const {
  return std::tie(min_bandwidth, sum_bandwidth, min_locality, sum_locality) ==
         std::tie(o.min_bandwidth, o.sum_bandwidth, o.min_locality, o.sum_locality);
}

namespace {

using Blocks = std::vector<std::vector<int32_t>>;

void validate(const PartitionProblem& p) {
  BASP_CHECK_ARG(p.size >= 0, "partition size (", p.size, ") must not be negative");
  const auto cells = static_cast<size_t>(p.size) * static_cast<size_t>(p.size);
  BASP_CHECK_ARG(p.bandwidth.size() == cells, "bandwidth matrix has ", p.bandwidth.size(), " entries, expected ",
                 cells);
  BASP_CHECK_ARG(p.locality.size() == cells, "locality matrix has ", p.locality.size(), " entries, expected ", cells);
  int64_t total = 0;
  for (int32_t s : p.part_sizes) {
    BASP_CHECK_ARG(s > 0, "part size (", s, ") must be positive");
    total += s;
  }
  BASP_CHECK_ARG(total == p.size, "part sizes sum to ", total, ", expected ", p.size);
}

uint32_t bw(const PartitionProblem& p, int32_t a, int32_t b) {
  return p.bandwidth[static_cast<size_t>(a) * static_cast<size_t>(p.size) + static_cast<size_t>(b)];
}

uint8_t loc(const PartitionProblem& p, int32_t a, int32_t b) {
  return p.locality[static_cast<size_t>(a) * static_cast<size_t>(p.size) + static_cast<size_t>(b)];
}

// Adds the pairs (e, x) for x in `members` to `s`.
void add_pairs(const PartitionProblem& p, int32_t e, const int32_t* members, size_t count, PartitionScore& s) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t w = bw(p, e, members[i]);
    const uint8_t l = loc(p, e, members[i]);
    s.min_bandwidth = std::min(s.min_bandwidth, w);
    s.sum_bandwidth += w;
    s.min_locality = std::min(s.min_locality, l);
    s.sum_locality += l;
  }
}

PartitionScore score_block(const PartitionProblem& p, const std::vector<int32_t>& block) {
  PartitionScore s;
  for (size_t i = 1; i < block.size(); ++i) add_pairs(p, block[i], block.data(), i, s);
  return s;
}

PartitionScore combine(const PartitionScore& a, const PartitionScore& b) {
  PartitionScore s;
  s.min_bandwidth = std::min(a.min_bandwidth, b.min_bandwidth);
  s.sum_bandwidth = a.sum_bandwidth + b.sum_bandwidth;
  s.min_locality = std::min(a.min_locality, b.min_locality);
  s.sum_locality = a.sum_locality + b.sum_locality;
  return s;
}

// Numbers blocks by the rule of partition_node: equal sizes take part indices in order of their lowest element.
std::vector<int32_t> label_blocks(const PartitionProblem& p, Blocks blocks) {
  for (auto& b : blocks) std::sort(b.begin(), b.end());
  std::sort(blocks.begin(), blocks.end(), [](const auto& x, const auto& y) { return x.front() < y.front(); });
  std::vector<char> used(p.part_sizes.size(), 0);
  std::vector<int32_t> part_of(static_cast<size_t>(p.size), -1);
  for (const auto& b : blocks) {
    size_t idx = 0;
    while (idx < p.part_sizes.size() && (used[idx] || p.part_sizes[idx] != static_cast<int32_t>(b.size()))) ++idx;
    BASP_CHECK(idx < p.part_sizes.size(), BASP_ERROR_INTERNAL, "partition produced a block of size ", b.size(),
               " that matches no part");
    used[idx] = 1;
    for (int32_t e : b) part_of[static_cast<size_t>(e)] = static_cast<int32_t>(idx);
  }
  return part_of;
}

std::vector<int32_t> sizes_descending(const PartitionProblem& p) {
  std::vector<int32_t> sizes = p.part_sizes;
  std::stable_sort(sizes.begin(), sizes.end(), std::greater<>());
  return sizes;
}

// Elements in order, parts in list order: what the exhaustive search returns when every pair scores alike.
Blocks contiguous_blocks(const PartitionProblem& p) {
  Blocks blocks;
  int32_t next = 0;
  for (int32_t s : p.part_sizes) {
    blocks.emplace_back(static_cast<size_t>(s));
    std::iota(blocks.back().begin(), blocks.back().end(), next);
    next += s;
  }
  return blocks;
}

bool uniform(const PartitionProblem& p) {
  if (p.size < 2) return true;
  const uint32_t w0 = bw(p, 0, 1);
  const uint8_t l0 = loc(p, 0, 1);
  for (int32_t a = 0; a < p.size; ++a) {
    for (int32_t b = 0; b < p.size; ++b) {
      if (a != b && (bw(p, a, b) != w0 || loc(p, a, b) != l0)) return false;
    }
  }
  return true;
}

// Branch and bound over canonical partitions: elements are placed in order, each joins an open block or opens
// the lowest unused part of some size (sizes tried in order of that part's index), so blocks of equal size are
// numbered by their lowest element and each partition is visited once. On ties the first partition found wins:
// earlier parts of the list take the lower elements.
class ExhaustiveSearch {
 public:
  explicit ExhaustiveSearch(const PartitionProblem& p) : p_(p), used_(p.part_sizes.size(), 0) {
    for (int32_t s : p.part_sizes) total_pairs_ += static_cast<int64_t>(s) * (s - 1) / 2;
    for (int32_t a = 0; a < p.size; ++a) {
      for (int32_t b = 0; b < p.size; ++b) {
        if (a == b) continue;
        max_bw_ = std::max(max_bw_, bw(p, a, b));
        max_loc_ = std::max(max_loc_, loc(p, a, b));
      }
    }
  }

  Blocks run() {
    dfs(0, PartitionScore{}, 0);
    return best_blocks_;
  }

 private:
  void dfs(int32_t e, const PartitionScore& cur, int64_t pairs_done) {
    if (e == p_.size) {
      if (!have_best_ || best_ < cur) {
        have_best_ = true;
        best_ = cur;
        best_blocks_ = blocks_;
      }
      return;
    }
    if (have_best_) {
      // Each component bounded separately bounds the tuple: prune when even the bound is no better.
      const auto rest = static_cast<uint64_t>(total_pairs_ - pairs_done);
      PartitionScore bound = cur;
      bound.sum_bandwidth += rest * max_bw_;
      bound.sum_locality += rest * max_loc_;
      if (!(best_ < bound)) return;
    }
    for (size_t b = 0; b < blocks_.size(); ++b) {
      if (static_cast<int32_t>(blocks_[b].size()) == caps_[b]) continue;
      PartitionScore next = cur;
      add_pairs(p_, e, blocks_[b].data(), blocks_[b].size(), next);
      const auto added = static_cast<int64_t>(blocks_[b].size());
      blocks_[b].push_back(e);
      dfs(e + 1, next, pairs_done + added);
      blocks_[b].pop_back();
    }
    // Open a new block: for each size, only its lowest unused part.
    for (size_t i = 0; i < used_.size(); ++i) {
      if (used_[i]) continue;
      bool first_of_size = true;
      for (size_t j = 0; j < i && first_of_size; ++j) {
        first_of_size = used_[j] || p_.part_sizes[j] != p_.part_sizes[i];
      }
      if (!first_of_size) continue;
      used_[i] = 1;
      blocks_.push_back({e});
      caps_.push_back(p_.part_sizes[i]);
      dfs(e + 1, cur, pairs_done);
      blocks_.pop_back();
      caps_.pop_back();
      used_[i] = 0;
    }
  }

  const PartitionProblem& p_;
  std::vector<char> used_;  // parts opened on the current path
  int64_t total_pairs_ = 0;
  uint32_t max_bw_ = 0;
  uint8_t max_loc_ = 0;
  Blocks blocks_;
  std::vector<int32_t> caps_;
  bool have_best_ = false;
  PartitionScore best_;
  Blocks best_blocks_;
};

// Largest parts first; each part grows from the lowest free element by the element that scores best with it.
Blocks greedy_blocks(const PartitionProblem& p) {
  std::vector<char> taken(static_cast<size_t>(p.size), 0);
  Blocks blocks;
  for (int32_t s : sizes_descending(p)) {
    std::vector<int32_t> block;
    int32_t seed = 0;
    while (taken[static_cast<size_t>(seed)]) ++seed;
    block.push_back(seed);
    taken[static_cast<size_t>(seed)] = 1;
    while (static_cast<int32_t>(block.size()) < s) {
      int32_t pick = -1;
      PartitionScore pick_score;
      for (int32_t e = 0; e < p.size; ++e) {
        if (taken[static_cast<size_t>(e)]) continue;
        PartitionScore with;
        add_pairs(p, e, block.data(), block.size(), with);
        if (pick < 0 || pick_score < with) {
          pick = e;
          pick_score = with;
        }
      }
      block.push_back(pick);
      taken[static_cast<size_t>(pick)] = 1;
    }
    blocks.push_back(std::move(block));
  }
  return blocks;
}

constexpr int32_t kSwapSearchMaxElements = 512;
constexpr int kSwapSearchMaxPasses = 64;

// First-improvement pairwise swaps between blocks until no swap improves the score (or the pass limit).
void improve_by_swaps(const PartitionProblem& p, Blocks& blocks) {
  if (p.size > kSwapSearchMaxElements || blocks.size() < 2) return;
  std::vector<PartitionScore> block_score;
  for (const auto& b : blocks) block_score.push_back(score_block(p, b));
  auto total = [&] {
    PartitionScore s;
    for (const auto& b : block_score) s = combine(s, b);
    return s;
  };
  PartitionScore current = total();
  for (int pass = 0; pass < kSwapSearchMaxPasses; ++pass) {
    bool improved = false;
    for (size_t x = 0; x < blocks.size(); ++x) {
      for (size_t y = x + 1; y < blocks.size(); ++y) {
        for (size_t i = 0; i < blocks[x].size(); ++i) {
          for (size_t j = 0; j < blocks[y].size(); ++j) {
            std::swap(blocks[x][i], blocks[y][j]);
            const PartitionScore sx = block_score[x];
            const PartitionScore sy = block_score[y];
            block_score[x] = score_block(p, blocks[x]);
            block_score[y] = score_block(p, blocks[y]);
            const PartitionScore candidate = total();
            if (current < candidate) {
              current = candidate;
              improved = true;
            } else {
              std::swap(blocks[x][i], blocks[y][j]);
              block_score[x] = sx;
              block_score[y] = sy;
            }
          }
        }
      }
    }
    if (!improved) break;
  }
}

}  // namespace

std::vector<int32_t> partition_node_heuristic(const PartitionProblem& problem) {
  validate(problem);
  Blocks blocks = greedy_blocks(problem);
  improve_by_swaps(problem, blocks);
  return label_blocks(problem, std::move(blocks));
}

std::vector<int32_t> partition_node(const PartitionProblem& problem, PartitionMethod* method) {
  validate(problem);
  auto set = [&](PartitionMethod m) {
    if (method) *method = m;
  };
  const bool all_singletons =
      std::all_of(problem.part_sizes.begin(), problem.part_sizes.end(), [](int32_t s) { return s == 1; });
  if (problem.size == 0 || problem.part_sizes.size() == 1 || all_singletons) {
    set(PartitionMethod::kTrivial);
    return label_blocks(problem, contiguous_blocks(problem));
  }
  if (uniform(problem)) {
    set(PartitionMethod::kUniform);
    return label_blocks(problem, contiguous_blocks(problem));
  }
  if (problem.size <= kExhaustiveMaxElements) {
    set(PartitionMethod::kExhaustive);
    return label_blocks(problem, ExhaustiveSearch(problem).run());
  }
  set(PartitionMethod::kHeuristic);
  return partition_node_heuristic(problem);
}

PartitionScore score_partition(const PartitionProblem& problem, const std::vector<int32_t>& part_of) {
  validate(problem);
  BASP_CHECK_ARG(part_of.size() == static_cast<size_t>(problem.size), "part_of has ", part_of.size(),
                 " entries, expected ", problem.size);
  Blocks blocks(problem.part_sizes.size());
  for (int32_t e = 0; e < problem.size; ++e) {
    const int32_t part = part_of[static_cast<size_t>(e)];
    BASP_CHECK_ARG(part >= 0 && part < static_cast<int32_t>(blocks.size()), "element ", e, " is in part ", part,
                   ", outside 0..", blocks.size() - 1);
    blocks[static_cast<size_t>(part)].push_back(e);
  }
  PartitionScore s;
  for (size_t b = 0; b < blocks.size(); ++b) {
    BASP_CHECK_ARG(static_cast<int32_t>(blocks[b].size()) == problem.part_sizes[b], "part ", b, " has ",
                   blocks[b].size(), " elements, expected ", problem.part_sizes[b]);
    s = combine(s, score_block(problem, blocks[b]));
  }
  return s;
}

}  // namespace basp::plan
