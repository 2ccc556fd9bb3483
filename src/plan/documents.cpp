#include "plan/documents.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <tuple>

#include "common/checked.h"
#include "common/error.h"
#include "common/split.h"

namespace basp::plan {

namespace {

// The checks that need no assignment, before any work.
void check_documents(int32_t num_groups, const int64_t* lengths, int32_t num_docs, int64_t capacity) {
  BASP_CHECK_ARG(num_groups > 0, "num_groups (", num_groups, ") must be positive");
  BASP_CHECK_ARG(num_docs >= 0, "num_docs (", num_docs, ") must be 0 or more");
  BASP_CHECK_ARG(capacity >= 0, "capacity (", capacity, ") must be positive (or 0: no capacity)");
  BASP_CHECK(lengths != nullptr || num_docs == 0, BASP_ERROR_NULL_POINTER, "lengths is NULL for num_docs (", num_docs,
             ") documents");
  int64_t total = 0;
  for (int32_t i = 0; i < num_docs; ++i) {
    BASP_CHECK_ARG(lengths[i] > 0, "lengths[", i, "] (", lengths[i], ") must be positive");
    BASP_CHECK_ARG(capacity == 0 || lengths[i] <= capacity, "document ", i, " (", lengths[i],
                   " tokens) is longer than the capacity (", capacity, ")");
    total = detail::checked_add(total, lengths[i], "the total of lengths");
  }
}

// Documents left, longest first (ties: lower index).
std::vector<int32_t> longest_first(const int64_t* lengths, const std::vector<int32_t>& docs) {
  std::vector<int32_t> left = docs;
  std::sort(left.begin(), left.end(),
            [&](int32_t a, int32_t b) { return lengths[a] != lengths[b] ? lengths[a] > lengths[b] : a < b; });
  return left;
}

// The bins' indices, the roomiest first (ties: lower index).
std::vector<int32_t> roomiest_first(const std::vector<int64_t>& room) {
  std::vector<int32_t> bins(room.size());
  std::iota(bins.begin(), bins.end(), 0);
  std::stable_sort(bins.begin(), bins.end(), [&](int32_t a, int32_t b) { return room[a] > room[b]; });
  return bins;
}

// The subset sums as bitsets over 0..r tokens: row i = the sums the first i documents of `left` make.
class SubsetSums {
 public:
  // Only the empty subset yet; `snaps` is the caller's scratch, reused across bins.
  SubsetSums(std::vector<uint64_t>& snaps, int64_t r) : snaps_(snaps), r_(r), words_(static_cast<size_t>(r / 64) + 1) {
    snaps_.assign(words_, 0);
    snaps_[0] = 1;  // the empty subset
  }

  // Whether the first i documents make the sum s.
  bool bit(size_t i, int64_t s) const {
    return (snaps_[i * words_ + static_cast<size_t>(s / 64)] >> static_cast<unsigned>(s % 64)) & 1u;
  }

  // Folds the documents of `left` in, in order, until r is reached or none is left; returns how many it folded.
  size_t fold(const int64_t* lengths, const std::vector<int32_t>& left) {
    size_t used = 0;  // documents folded in
    while (used < left.size() && !bit(used, r_)) {
      fold_one(used, lengths[left[used]]);
      ++used;
    }
    return used;
  }

 private:
  // Row used + 1 = row used, or'ed with itself shifted by a document of l tokens (bits above r dropped).
  void fold_one(size_t used, int64_t l) {
    const uint64_t last_mask = ~uint64_t{0} >> (63 - static_cast<unsigned>(r_ % 64));  // bits 0..r of the last word
    snaps_.resize((used + 2) * words_);
    const uint64_t* cur = snaps_.data() + used * words_;
    uint64_t* next = snaps_.data() + (used + 1) * words_;
    const auto shift_words = static_cast<size_t>(l / 64);
    const auto shift_bits = static_cast<unsigned>(l % 64);
    for (size_t w = 0; w < words_; ++w) {
      uint64_t shifted = 0;
      if (w >= shift_words) {
        const size_t src = w - shift_words;
        shifted = cur[src] << shift_bits;
        if (shift_bits != 0 && src > 0) shifted |= cur[src - 1] >> (64 - shift_bits);
      }
      next[w] = cur[w] | shifted;
    }
    next[words_ - 1] &= last_mask;
  }

  std::vector<uint64_t>& snaps_;
  int64_t r_;
  size_t words_;
};

// Moves into `bin` the documents of the largest sum up to r that the first `used` documents of `left` make.
void take_largest_sum(const int64_t* lengths, const SubsetSums& sums, size_t used, int64_t r,
                      std::vector<int32_t>& left, std::vector<int32_t>& bin, std::vector<char>& taken) {
  int64_t s = r;
  while (!sums.bit(used, s)) --s;
  // Back from the last document: one that the sum can do without is left out, so the longer ones are kept.
  taken.assign(left.size(), 0);
  for (size_t i = used; i-- > 0 && s > 0;) {
    if (sums.bit(i, s)) continue;
    taken[i] = 1;
    bin.push_back(left[i]);
    s -= lengths[left[i]];
  }
  size_t kept = 0;
  for (size_t i = 0; i < left.size(); ++i) {
    if (!taken[i]) left[kept++] = left[i];
  }
  left.resize(kept);
}

// Fills one bin of r tokens from `left`: the longest document that fits, then the fullest subset of the rest.
// False when the subset sums would cost more than `budget` cells.
bool fill_one_bin(const int64_t* lengths, int64_t r, std::vector<int32_t>& left, std::vector<int32_t>& bin,
                  int64_t& budget, std::vector<uint64_t>& snaps, std::vector<char>& taken) {
  // The longest document that fits anchors the bin.
  const auto anchor = std::find_if(left.begin(), left.end(), [&](int32_t d) { return lengths[d] <= r; });
  if (anchor == left.end()) return true;
  bin.push_back(*anchor);
  r -= lengths[*anchor];
  left.erase(anchor);
  int64_t rest = 0;
  for (const int32_t d : left) rest += lengths[d];  // bounded by the caller's checked total
  if (rest <= r) {                                  // everything left fits
    bin.insert(bin.end(), left.begin(), left.end());
    left.clear();
    return true;
  }
  if (r == 0) return true;
  const int64_t cells =
      r > budget / static_cast<int64_t>(left.size()) ? budget + 1 : r * static_cast<int64_t>(left.size());
  if (cells > budget) return false;
  budget -= cells;
  SubsetSums sums(snaps, r);
  const size_t used = sums.fold(lengths, left);
  take_largest_sum(lengths, sums, used, r, left, bin, taken);
  return true;
}

}  // namespace

std::vector<std::vector<int32_t>> group_documents(int32_t num_groups, const int64_t* lengths, int32_t num_docs,
                                                  int64_t capacity, int64_t* budget) {
  check_documents(num_groups, lengths, num_docs, capacity);
  std::vector<int32_t> order(static_cast<size_t>(num_docs));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return lengths[a] != lengths[b] ? lengths[a] > lengths[b] : a < b; });
  // (tokens, sum of squared lengths, group): the smallest tuple is the group the next document goes to. The group
  // index makes every key unique, so the order of the heap's pops is fully determined.
  using Load = std::tuple<int64_t, int64_t, int32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (int32_t g = 0; g < num_groups; ++g) loads.emplace(0, 0, g);
  std::vector<std::vector<int32_t>> groups(static_cast<size_t>(num_groups));
  for (const int32_t d : order) {
    auto [tokens, squares, g] = loads.top();
    loads.pop();
    tokens += lengths[d];  // cannot overflow: bounded by the checked total
    // The least loaded group is the best placed: when it cannot take the document, no group can, and only an
    // exact packing may still hold the batch.
    if (capacity != 0 && tokens > capacity) {
      std::vector<std::vector<int32_t>> packed;
      int64_t own = kFillBinsBudget;
      if (fill_bins(lengths, order, std::vector<int64_t>(static_cast<size_t>(num_groups), capacity), packed,
                    budget != nullptr ? *budget : own)) {
        return packed;
      }
    }
    BASP_CHECK_ARG(capacity == 0 || tokens <= capacity, "group ", g, " would hold ", tokens,
                   " tokens, more than the capacity (", capacity, "), with document ", d, " (", lengths[d],
                   " tokens), and no exact packing of the documents into ", num_groups, " groups was found");
    squares = detail::checked_add(squares, detail::checked_mul(lengths[d], lengths[d], "a squared document length"),
                                  "a group's sum of squared lengths");
    groups[static_cast<size_t>(g)].push_back(d);
    loads.emplace(tokens, squares, g);
  }
  for (auto& docs : groups) std::sort(docs.begin(), docs.end());
  return groups;
}

bool fill_bins(const int64_t* lengths, const std::vector<int32_t>& docs, const std::vector<int64_t>& room,
               std::vector<std::vector<int32_t>>& out, int64_t& budget) {
  std::vector<int32_t> left = longest_first(lengths, docs);
  const std::vector<int32_t> bins = roomiest_first(room);
  out.assign(room.size(), {});
  std::vector<uint64_t> snaps;  // scratch of fill_one_bin, kept across bins
  std::vector<char> taken;
  for (const int32_t b : bins) {
    if (left.empty()) break;
    if (!fill_one_bin(lengths, room[static_cast<size_t>(b)], left, out[static_cast<size_t>(b)], budget, snaps, taken)) {
      return false;
    }
  }
  if (!left.empty()) return false;
  for (auto& bin : out) std::sort(bin.begin(), bin.end());
  return true;
}

DocumentAssignment assign_documents(const GroupLayout& layout, const int64_t* lengths, int32_t num_docs,
                                    int64_t capacity, int32_t rank) {
  BASP_CHECK_ARG(rank >= 0 && rank < layout.world_size, "rank (", rank, ") is outside 0..", layout.world_size - 1);
  const auto groups = group_documents(layout.num_groups, lengths, num_docs, capacity);

  DocumentAssignment out;
  out.rank = rank;
  out.group_index = layout.group_of[static_cast<size_t>(rank)];
  out.group_position = layout.position_of[static_cast<size_t>(rank)];
  out.group_size = layout.group_size;
  out.docs = groups[static_cast<size_t>(out.group_index)];
  out.cu_seqlens.assign(1, 0);
  for (const int32_t d : out.docs) {
    out.cu_seqlens.push_back(out.cu_seqlens.back() + lengths[d]);
    out.max_seqlen = std::max(out.max_seqlen, lengths[d]);
  }
  out.stream_tokens = out.cu_seqlens.back();
  out.token_begin = detail::split_begin(out.stream_tokens, out.group_size, out.group_position);
  out.token_end = detail::split_begin(out.stream_tokens, out.group_size, out.group_position + 1);
  if (out.token_begin < out.token_end) {
    // The last document starting at or before token_begin holds it (documents are never empty).
    const auto next = std::upper_bound(out.cu_seqlens.begin(), out.cu_seqlens.end(), out.token_begin);
    out.first_doc = static_cast<int32_t>(next - out.cu_seqlens.begin()) - 1;
    out.first_doc_offset = out.token_begin - out.cu_seqlens[static_cast<size_t>(out.first_doc)];
  }
  int64_t total = 0;  // cannot overflow: group_documents checked the total
  for (const auto& docs : groups) {
    int64_t tokens = 0;
    for (const int32_t d : docs) tokens += lengths[d];
    out.max_group_tokens = std::max(out.max_group_tokens, tokens);
    total += tokens;
  }
  if (total > 0) {
    out.imbalance = static_cast<double>(out.max_group_tokens) * layout.num_groups / static_cast<double>(total);
  }
  return out;
}

}  // namespace basp::plan
