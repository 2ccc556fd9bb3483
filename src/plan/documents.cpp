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

}  // namespace

std::vector<std::vector<int32_t>> group_documents(int32_t num_groups, const int64_t* lengths, int32_t num_docs,
                                                  int64_t capacity) {
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
    // The least loaded group is the best placed: when it cannot take the document, no group can.
    BASP_CHECK_ARG(capacity == 0 || tokens <= capacity, "group ", g, " would hold ", tokens,
                   " tokens, more than the capacity (", capacity, "), with document ", d, " (", lengths[d], " tokens)");
    squares = detail::checked_add(squares, detail::checked_mul(lengths[d], lengths[d], "a squared document length"),
                                  "a group's sum of squared lengths");
    groups[static_cast<size_t>(g)].push_back(d);
    loads.emplace(tokens, squares, g);
  }
  for (auto& docs : groups) std::sort(docs.begin(), docs.end());
  return groups;
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
