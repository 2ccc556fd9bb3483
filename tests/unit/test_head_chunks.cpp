// Head chunks (plan/head_chunks.h) against a reference written here from the definition, head by head: every shape of
// K in 1..5, Hq in 1..12, Hkv dividing Hq (Hkv < K replicates key/value heads), K/V planned with query_heads or
// query-like (then below the chunk basis where Hkv < Hq, whether K divides Hkv or not) and C in 1..max; the bytes
// against the whole exchange's (layout::Geometry, CallGeometry); the errors; then the chunk count's choice
// (plan/head_chunk_choice.h) against times worked out by hand; an execute's geometry of a chunk (ExchangePlan::call),
// whose pieces of the workspaces tile the whole exchange's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "plan/head_chunk_choice.h"
#include "plan/head_chunks.h"

using basp::Direction;
using basp::plan::ExchangePlan;
using basp::plan::HeadChunk;
using basp::plan::HeadSpan;

namespace {

// tensor_split written out: the sizes, then their prefix sums (not common/split.h).
std::vector<int64_t> bounds(int64_t items, int64_t parts) {
  std::vector<int64_t> b{0};
  for (int64_t j = 0; j < parts; ++j) b.push_back(b.back() + items / parts + (j < items % parts ? 1 : 0));
  return b;
}

// Q of Hq heads (head size 6), K and V of Hkv heads serving them (head sizes 6 and 4), BF16, BSHD, S = 7 and
// b_loc = 2: uneven tokens and two head sizes. K and V are planned with query_heads = Hq, or query-like when
// `query_like` (as a caller may where K divides Hkv) or Hkv == Hq.
ExchangePlan qkv_plan(int32_t k, int32_t position, int64_t hq, int64_t hkv, bool query_like = false) {
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_BF16;
  d.seq_len = 7;
  d.num_tensors = 3;
  d.num_heads[0] = hq;
  d.num_heads[1] = d.num_heads[2] = hkv;
  d.query_heads[1] = d.query_heads[2] = hkv == hq || query_like ? 0 : hq;
  d.head_dims[0] = d.head_dims[1] = 6;
  d.head_dims[2] = 4;
  return basp::plan::make_exchange_plan(basp::plan::validate_spec(d), k, position, 2);
}

// The reference of one tensor in one shape, from the definition: which chunks of holder j read head h. `at_ends`:
// a query-like tensor with fewer heads than the plan's chunk basis (its largest split heads), whose heads all move
// in scatter chunk 0 and gather chunk C - 1.
struct Reference {
  int64_t k, heads, split, ratio, count;
  bool at_ends;
  std::vector<int64_t> q;  // position j's split heads [q[j], q[j + 1])

  Reference(int64_t k_, int64_t heads_, int64_t split_, int64_t count_, int64_t basis)
      : k(k_),
        heads(heads_),
        split(split_),
        ratio(split_ / heads_),
        count(count_),
        at_ends(split_ == heads_ && split_ < basis),
        q(bounds(split_, k_)) {}

  // Position j's split heads in chunk c.
  std::pair<int64_t, int64_t> split_heads(int64_t j, int64_t c) const {
    const auto cb = bounds(q[j + 1] - q[j], count);
    return {q[j] + cb[c], q[j] + cb[c + 1]};
  }
  // The chunks of position j whose query heads read head h, in increasing order.
  std::vector<int64_t> readers(int64_t j, int64_t h) const {
    std::vector<int64_t> out;
    for (int64_t c = 0; c < count; ++c) {
      const auto s = split_heads(j, c);
      for (int64_t x = s.first; x < s.second; ++x) {
        if (x / ratio == h) {
          out.push_back(c);
          break;
        }
      }
    }
    return out;
  }
  // The heads chunk c moves to (scatter) or from (gather) position j.
  std::set<int64_t> moved(int64_t j, int64_t c, Direction d) const {
    std::set<int64_t> out;
    if (at_ends) {
      if (c == (d == Direction::kScatter ? 0 : count - 1))
        for (int64_t h = q[j]; h < q[j + 1]; ++h) out.insert(h);
      return out;
    }
    for (int64_t h = 0; h < heads; ++h) {
      const auto r = readers(j, h);
      if (!r.empty() && (d == Direction::kScatter ? r.front() : r.back()) == c) out.insert(h);
    }
    return out;
  }
};

std::set<int64_t> as_set(const HeadSpan& s) {
  std::set<int64_t> out;
  for (int64_t h = s.begin; h < s.end; ++h) out.insert(h);
  return out;
}

const Direction kDirections[] = {Direction::kScatter, Direction::kGather};

// The plan's chunk basis: the largest split heads of its tensors (here Hq, tensor 0's).
int64_t basis_of(const ExchangePlan& p) { return p.tensors[0].heads; }

// Chunk c of position j: its split heads, and the heads it moves each way, as the reference says; every head each
// holder holds moves exactly once per direction; attention on chunk c (its query heads: chunk c of the Hq query
// heads' split, query head x reading head x / (Hq / H)) reads only heads that arrived by scatter chunk c, and gather
// chunk c sends only heads that no later chunk reads.
void check_heads(const ExchangePlan& p, int32_t t, int32_t count) {
  const auto& g = p.tensors[static_cast<size_t>(t)];
  const Reference ref(g.k, g.heads, g.split_heads, count, basis_of(p));
  const Reference queries(g.k, basis_of(p), basis_of(p), count, basis_of(p));
  const int64_t reads = basis_of(p) / g.heads;  // query heads per head of this tensor
  for (int32_t j = 0; j < p.group_size; ++j) {
    // By head, the chunks that move it to j (scatter) and from j (gather), as the code says.
    std::vector<std::vector<int32_t>> arrive(static_cast<size_t>(g.heads)), leave(static_cast<size_t>(g.heads));
    for (int32_t c = 0; c < count; ++c) {
      INFO("tensor " << t << " position " << j << " chunk " << c);
      const HeadSpan s = basp::plan::chunk_split_heads(p, t, j, {c, count});
      const auto want = ref.split_heads(j, c);
      REQUIRE(s.size() == want.second - want.first);
      if (!s.empty()) REQUIRE((s.begin == want.first && s.end == want.second));
      // A position with fewer split heads than C: its last chunks are empty and move nothing.
      if (c >= ref.q[j + 1] - ref.q[j]) REQUIRE(s.empty());
      for (const Direction d : kDirections) {
        const auto got = as_set(basp::plan::chunk_heads(p, t, j, {c, count}, d));
        REQUIRE(got == ref.moved(j, c, d));
        if (s.empty() && !ref.at_ends) REQUIRE(got.empty());
        for (const int64_t h : got) (d == Direction::kScatter ? arrive : leave)[static_cast<size_t>(h)].push_back(c);
      }
    }
    for (int64_t h = 0; h < g.heads; ++h) {
      // Exactly the heads the whole exchange gives j (geometry.h), each once per direction.
      const size_t want = h >= g.head_begin(j) && h < g.head_end(j) ? 1 : 0;
      INFO("tensor " << t << " position " << j << " head " << h);
      REQUIRE(arrive[static_cast<size_t>(h)].size() == want);
      REQUIRE(leave[static_cast<size_t>(h)].size() == want);
    }
    for (int32_t c = 0; c < count; ++c) {
      const auto s = queries.split_heads(j, c);
      for (int64_t x = s.first; x < s.second; ++x) {
        const auto h = static_cast<size_t>(x / reads);
        // A query-like tensor that K does not split as the query heads: j may not hold what its queries read.
        if (static_cast<int64_t>(h) < g.head_begin(j) || static_cast<int64_t>(h) >= g.head_end(j)) {
          REQUIRE(ref.split == ref.heads);
          continue;
        }
        INFO("tensor " << t << " position " << j << " chunk " << c << " query head " << x);
        REQUIRE(arrive[h].size() == 1);
        REQUIRE(arrive[h][0] <= c);
        REQUIRE(leave[h].size() == 1);
        REQUIRE(leave[h][0] >= c);
      }
    }
  }
}

// The bytes of every (tensor, pair, direction) over the chunks add up to the whole exchange's chunk between the
// pair (Geometry::chunk_bytes) and each rank's head-sharded side (CallGeometry); per chunk they are the reference
// heads' rows; chunk_per_peer is the largest pair's sum over the tensors.
void check_bytes(const ExchangePlan& p, int32_t count, int64_t tokens) {
  const int32_t k = p.group_size;
  const auto tok = bounds(tokens, k);
  for (int32_t me = 0; me < k; ++me) {
    const auto mine =
        qkv_plan(k, me, p.tensors[0].split_heads, p.tensors[1].heads, p.tensors[1].split_heads == p.tensors[1].heads);
    const auto call = mine.call(tokens);
    int64_t sent = 0;  // this rank's scatter to its peers at capacity, over the chunks
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const auto& g = call.at(t);
      int64_t in = 0, out = 0;
      for (int32_t c = 0; c < count; ++c) {
        for (int32_t other = 0; other < k; ++other) {
          in += basp::plan::chunk_bytes(p, tokens, t, {c, count}, Direction::kScatter, other, me);
          out += basp::plan::chunk_bytes(p, tokens, t, {c, count}, Direction::kGather, me, other);
          if (other != me)
            sent += basp::plan::chunk_bytes(p, p.capacity(), t, {c, count}, Direction::kScatter, me, other);
        }
      }
      INFO("position " << me << " tensor " << t);
      REQUIRE(in == call.head_bytes[static_cast<size_t>(t)]);
      REQUIRE(out == call.head_bytes[static_cast<size_t>(t)]);
      for (int32_t s = 0; s < k; ++s) {
        int64_t scatter = 0, gather = 0;
        for (int32_t c = 0; c < count; ++c) {
          scatter += basp::plan::chunk_bytes(p, tokens, t, {c, count}, Direction::kScatter, s, me);
          gather += basp::plan::chunk_bytes(p, tokens, t, {c, count}, Direction::kGather, me, s);
        }
        REQUIRE(scatter == g.chunk_bytes(s, me));
        REQUIRE(gather == g.chunk_bytes(s, me));
      }
    }
    REQUIRE(sent == mine.bytes_sent);
  }
  for (int32_t c = 0; c < count; ++c) {
    for (const Direction d : kDirections) {
      int64_t most = 0;
      for (int32_t from = 0; from < k; ++from) {
        for (int32_t to = 0; to < k; ++to) {
          if (from == to) continue;
          const int32_t s = d == Direction::kScatter ? from : to;
          const int32_t h = d == Direction::kScatter ? to : from;
          int64_t sum = 0;
          for (int32_t t = 0; t < p.num_tensors(); ++t) {
            const auto& g = p.tensors[static_cast<size_t>(t)];
            const Reference ref(k, g.heads, g.split_heads, count, basis_of(p));
            const auto n = static_cast<int64_t>(ref.moved(h, c, d).size());
            const int64_t want = 2 * (tok[s + 1] - tok[s]) * n * g.head_dim * 2;
            REQUIRE(basp::plan::chunk_bytes(p, tokens, t, {c, count}, d, from, to) == want);
            sum += want;
          }
          most = std::max(most, sum);
        }
      }
      REQUIRE(basp::plan::chunk_per_peer(p, tokens, {c, count}, d) == most);
    }
  }
}

// Every shape of K in 1..5, Hq in 1..12, Hkv dividing Hq, K/V with query_heads or (Hkv < Hq) query-like:
// f(k, hq, hkv, query_like).
template <typename F>
void each_shape(F&& f) {
  for (int32_t k = 1; k <= 5; ++k) {
    for (int64_t hq = 1; hq <= 12; ++hq) {
      for (int64_t hkv = 1; hkv <= hq; ++hkv) {
        if (hq % hkv != 0) continue;
        for (const bool query_like : {false, true}) {
          if (query_like && hkv == hq) continue;  // the same plan
          INFO("K " << k << " Hq " << hq << " Hkv " << hkv << (query_like ? " query-like" : ""));
          f(k, hq, hkv, query_like);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("head chunks partition every exchange head by head", "[plan][chunks]") {
  each_shape([](int32_t k, int64_t hq, int64_t hkv, bool query_like) {
    const auto p = qkv_plan(k, 0, hq, hkv, query_like);
    const int64_t busiest = bounds(hq, k)[1];
    REQUIRE(basp::plan::max_head_chunks(p) == busiest);
    for (int32_t count = 1; count <= busiest; ++count) {
      INFO("C " << count);
      for (int32_t t = 0; t < 3; ++t) check_heads(p, t, count);
    }
  });
}

TEST_CASE("head chunks' bytes add up to the whole exchange", "[plan][chunks]") {
  each_shape([](int32_t k, int64_t hq, int64_t hkv, bool query_like) {
    const auto p = qkv_plan(k, 0, hq, hkv, query_like);
    for (int32_t count = 1; count <= basp::plan::max_head_chunks(p); ++count) {
      for (const int64_t tokens : {int64_t{5}, p.capacity()}) {
        INFO("C " << count << " tokens " << tokens);
        check_bytes(p, count, tokens);
      }
    }
  });
}

namespace {

// The call throws INVALID_ARGUMENT with a message containing `text`.
template <typename F>
void require_invalid(F&& call, const std::string& text) {
  try {
    call();
  } catch (const basp::detail::Error& e) {
    INFO("message: " << e.what());
    REQUIRE(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    REQUIRE(std::string(e.what()).find(text) != std::string::npos);
    return;
  }
  FAIL("no error; expected one containing \"" << text << "\"");
}

}  // namespace

TEST_CASE("head chunk arguments out of range name the value", "[plan][chunks]") {
  const auto p = qkv_plan(3, 1, 8, 2);  // busiest position: 3 query heads
  REQUIRE(basp::plan::max_head_chunks(p) == 3);
  using basp::plan::check_head_chunk;
  require_invalid([&] { check_head_chunk(p, {0, 0}); }, "head chunk count (0) must be at least 1");
  require_invalid([&] { check_head_chunk(p, {0, -2}); }, "head chunk count (-2) must be at least 1");
  require_invalid(
      [&] {
        check_head_chunk(p, {0, 4});
      },
      "head chunk count (4) is above the plan's maximum (3: the query heads of its busiest position)");
  require_invalid([&] { check_head_chunk(p, {-1, 2}); }, "head chunk index (-1) is outside 0..1");
  require_invalid([&] { check_head_chunk(p, {2, 2}); }, "head chunk index (2) is outside 0..1");
  check_head_chunk(p, {2, 3});
  // Every entry point checks the chunk, the tensor and the positions before it answers.
  require_invalid([&] { basp::plan::chunk_split_heads(p, 0, 0, {3, 3}); }, "head chunk index (3) is outside 0..2");
  require_invalid(
      [&] {
        basp::plan::chunk_heads(p, 1, 0, {0, 9}, Direction::kScatter);
      },
      "head chunk count (9) is above the plan's maximum (3");
  require_invalid([&] { basp::plan::chunk_heads(p, 3, 0, {0, 1}, Direction::kGather); }, "tensor (3) is outside 0..2");
  require_invalid([&] { basp::plan::chunk_split_heads(p, 0, 3, {0, 1}); }, "position (3) is outside 0..2");
  require_invalid(
      [&] {
        basp::plan::chunk_bytes(p, 7, 0, {0, 1}, Direction::kScatter, -1, 0);
      },
      "from (-1) is outside 0..2");
  require_invalid(
      [&] {
        basp::plan::chunk_bytes(p, 7, 0, {0, 1}, Direction::kScatter, 0, 5);
      },
      "to (5) is outside 0..2");
  require_invalid(
      [&] {
        basp::plan::chunk_bytes(p, -1, 0, {0, 1}, Direction::kScatter, 0, 1);
      },
      "tokens (-1) must be >= 0");
  require_invalid(
      [&] {
        basp::plan::chunk_per_peer(p, 7, {0, 0}, Direction::kGather);
      },
      "head chunk count (0) must be at least 1");
}

TEST_CASE("a key/value head moves with its first reader and returns with its last", "[plan][chunks]") {
  // K = 2, Q of 4 heads (head size 2), K (head size 2) and V (head size 1) of one head serving all 4: both positions
  // hold it. FP32, 4 tokens: 2 rows per position. C = 2: chunk 0 of each position reads the key/value head first,
  // chunk 1 last.
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_SBHD;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = 4;
  d.num_tensors = 3;
  d.num_heads[0] = 4;
  d.num_heads[1] = d.num_heads[2] = 1;
  d.query_heads[1] = d.query_heads[2] = 4;
  d.head_dims[0] = d.head_dims[1] = 2;
  d.head_dims[2] = 1;
  const auto p = basp::plan::make_exchange_plan(basp::plan::validate_spec(d), 2, 1, 1);
  // Per peer: a Q head 2 * 2 * 4 = 16 bytes, the K head 16, the V head 8.
  CHECK(basp::plan::chunk_per_peer(p, 4, {0, 1}, Direction::kScatter) == 2 * 16 + 16 + 8);
  CHECK(basp::plan::chunk_per_peer(p, 4, {0, 1}, Direction::kGather) == 2 * 16 + 16 + 8);
  CHECK(basp::plan::chunk_per_peer(p, 4, {0, 2}, Direction::kScatter) == 16 + 16 + 8);
  CHECK(basp::plan::chunk_per_peer(p, 4, {1, 2}, Direction::kScatter) == 16);
  CHECK(basp::plan::chunk_per_peer(p, 4, {0, 2}, Direction::kGather) == 16);
  CHECK(basp::plan::chunk_per_peer(p, 4, {1, 2}, Direction::kGather) == 16 + 16 + 8);
  for (int32_t j = 0; j < 2; ++j) {
    CHECK(basp::plan::chunk_heads(p, 1, j, {0, 2}, Direction::kScatter) == HeadSpan{0, 1});
    CHECK(basp::plan::chunk_heads(p, 1, j, {1, 2}, Direction::kScatter).empty());
    CHECK(basp::plan::chunk_heads(p, 2, j, {0, 2}, Direction::kGather).empty());
    CHECK(basp::plan::chunk_heads(p, 2, j, {1, 2}, Direction::kGather) == HeadSpan{0, 1});
    CHECK(basp::plan::chunk_split_heads(p, 1, j, {1, 2}) == HeadSpan{2 * j + 1, 2 * j + 2});
  }
}

TEST_CASE("a query-like tensor below the chunk basis moves all its heads at the ends", "[plan][chunks]") {
  // K = 2, Q of 8 heads, K and V of 4 heads (r = 2), C = 4: position j's query heads 4j..4j+3 read its key/value
  // heads 2j (chunks 0, 1) and 2j + 1 (chunks 2, 3). With query_heads = 8 each moves with its first reader and
  // returns with its last; planned query-like, the library cannot know the readers: both move in scatter chunk 0
  // and gather chunk 3 (chunked on their own heads, head 2j would leave in gather chunk 0, before chunk 1 reads it).
  const auto routed = qkv_plan(2, 0, 8, 4);
  const auto query_like = qkv_plan(2, 0, 8, 4, true);
  REQUIRE(basp::plan::max_head_chunks(query_like) == 4);
  for (int32_t j = 0; j < 2; ++j) {
    for (int32_t c = 0; c < 4; ++c) {
      INFO("position " << j << " chunk " << c);
      const HeadSpan q{4 * j + c, 4 * j + c + 1};
      const HeadSpan kv{2 * j + c / 2, 2 * j + c / 2 + 1};
      for (const auto* p : {&routed, &query_like}) {
        CHECK(basp::plan::chunk_split_heads(*p, 0, j, {c, 4}) == q);
        CHECK(basp::plan::chunk_heads(*p, 0, j, {c, 4}, Direction::kScatter) == q);
        CHECK(basp::plan::chunk_heads(*p, 0, j, {c, 4}, Direction::kGather) == q);
      }
      for (int32_t t = 1; t < 3; ++t) {
        CHECK(basp::plan::chunk_heads(routed, t, j, {c, 4}, Direction::kScatter) == (c % 2 == 0 ? kv : HeadSpan{}));
        CHECK(basp::plan::chunk_heads(routed, t, j, {c, 4}, Direction::kGather) == (c % 2 == 1 ? kv : HeadSpan{}));
        const HeadSpan all{2 * j, 2 * j + 2};
        CHECK(basp::plan::chunk_heads(query_like, t, j, {c, 4}, Direction::kScatter) == (c == 0 ? all : HeadSpan{}));
        CHECK(basp::plan::chunk_heads(query_like, t, j, {c, 4}, Direction::kGather) == (c == 3 ? all : HeadSpan{}));
      }
    }
  }
  // The smallest case: K = 1, Q of 2 heads, one query-like key/value head, C = 2: it returns in gather chunk 1.
  const auto one = qkv_plan(1, 0, 2, 1, true);
  CHECK(basp::plan::chunk_heads(one, 1, 0, {0, 2}, Direction::kGather).empty());
  CHECK(basp::plan::chunk_heads(one, 1, 0, {1, 2}, Direction::kGather) == HeadSpan{0, 1});
  CHECK(basp::plan::chunk_heads(one, 2, 0, {0, 2}, Direction::kScatter) == HeadSpan{0, 1});
  CHECK(basp::plan::chunk_heads(one, 2, 0, {1, 2}, Direction::kScatter).empty());
  // The whole exchange moves every head, whatever the rule.
  CHECK(query_like.call(7).at(1).moved(1) == HeadSpan{2, 4});
}

namespace {

// One tensor of 8 query-like heads (K = 2: 4 per position), head size 1, FP32, one sequence of 4 tokens (2 per
// position): a head of one position's tokens is 2 * 4 = 8 bytes.
ExchangePlan small_plan() {
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = 4;
  d.head_dim = 1;
  d.num_tensors = 1;
  d.num_heads[0] = 8;
  return basp::plan::make_exchange_plan(basp::plan::validate_spec(d), 2, 0, 1);
}

// alpha = 1 s, 0.5 s per per-peer byte inside the node, nothing across nodes.
basp::plan::CostModel small_model() {
  basp::plan::CostModel m;
  m.a0 = 1.0;
  m.beta_node = 0.5;
  return m;
}

const basp::plan::GroupTraffic kUnit{1.0, 0.0};

}  // namespace

TEST_CASE("the pipelined layer time adds the exchanges beside each attention step", "[plan][chunks]") {
  // S0 + max(A0, S1) + max(A1, S2 + G0) + max(A2, G1) + G2 = 1 + 4 + 5 + 4 + 1.
  CHECK(basp::plan::pipelined_seconds({1, 2, 3}, {4, 1, 4}, {2, 2, 1}) == 15.0);
  CHECK(basp::plan::pipelined_seconds({3}, {4}, {5}) == 12.0);  // one chunk: no overlap
  require_invalid([] { basp::plan::pipelined_seconds({1, 2}, {1}, {1, 2}); }, "attention (1)");
  require_invalid([] { basp::plan::pipelined_seconds({}, {}, {}); }, "one common size >= 1");
}

TEST_CASE("four head chunks win when attention hides the exchanges", "[plan][chunks]") {
  const auto p = small_plan();
  REQUIRE(basp::plan::max_head_chunks(p) == 4);
  // A chunk of n heads per position: per peer 8n bytes, so S = G = 1 + 0.5 * 8n = 1 + 4n; attention 40 s over 4
  // heads: A = 10n.
  //   C = 1 (4):        17 + 40 + 17                                          = 74
  //   C = 2 (2, 2):     9 + max(20, 9) + max(20, 9) + 9                       = 58
  //   C = 3 (2, 1, 1):  9 + max(20, 5) + max(10, 5 + 9) + max(10, 5) + 5      = 58
  //   C = 4 (1 each):   5 + max(10, 5) + 2 * max(10, 5 + 5) + max(10, 5) + 5  = 50
  const auto choice = basp::plan::choose_head_chunks(p, p, 4, small_model(), kUnit, 40.0);
  CHECK(choice.predicted == std::vector<double>{74, 58, 58, 50});
  CHECK(choice.count == 4);
  // Deterministic: the same inputs give the same bits.
  const auto again = basp::plan::choose_head_chunks(p, p, 4, small_model(), kUnit, 40.0);
  CHECK(again.predicted == choice.predicted);
  CHECK(again.count == choice.count);
}

TEST_CASE("one head chunk unless more gain at least 5 percent", "[plan][chunks]") {
  const auto p = small_plan();
  // Attention 1000 s: C = 4 is the fastest but gains 24 / 1034 (2.3 %).
  //   C = 1: 17 + 1000 + 17 = 1034;  C = 2: 9 + 500 + 500 + 9 = 1018;
  //   C = 3: 9 + 500 + 250 + 250 + 5 = 1014;  C = 4: 5 + 4 * 250 + 5 = 1010.
  const auto slow = basp::plan::choose_head_chunks(p, p, 4, small_model(), kUnit, 1000.0);
  CHECK(slow.predicted == std::vector<double>{1034, 1018, 1014, 1010});
  CHECK(slow.count == 1);
  // Attention 400 s: C = 4 takes 5 + 400 + 5 = 410 against 17 + 400 + 17 = 434, a gain of 5.5 %: chosen.
  const auto enough = basp::plan::choose_head_chunks(p, p, 4, small_model(), kUnit, 400.0);
  CHECK(enough.predicted.front() == 434.0);
  CHECK(enough.predicted.back() == 410.0);
  CHECK(enough.count == 4);
  // No attention: every chunk only adds alpha; 74 - 40 = 34, 36, 38, 40.
  const auto none = basp::plan::choose_head_chunks(p, p, 4, small_model(), kUnit, 0.0);
  CHECK(none.predicted == std::vector<double>{34, 36, 38, 40});
  CHECK(none.count == 1);
  // K = 1 exchanges nothing: T(C) = the attention, whatever C.
  const auto solo = basp::plan::make_exchange_plan(p.spec, 1, 0, 1);
  const auto alone = basp::plan::choose_head_chunks(solo, solo, 4, small_model(), kUnit, 8.0);
  CHECK(alone.predicted == std::vector<double>(8, 8.0));
  CHECK(alone.count == 1);
}

TEST_CASE("the chunk count's choice checks its inputs", "[plan][chunks]") {
  const auto p = small_plan();
  const auto three = basp::plan::make_exchange_plan(p.spec, 3, 0, 1);
  using basp::plan::choose_head_chunks;
  require_invalid([&] { choose_head_chunks(p, three, 4, small_model(), kUnit, 1.0); },
                  "the scatter plan's group size (2) differs from the gather plan's (3)");
  auto other = p.spec;
  other.num_heads = other.split_heads = {6};  // 3 per position, against 4
  const auto fewer = basp::plan::make_exchange_plan(other, 2, 0, 1);
  require_invalid([&] { choose_head_chunks(p, fewer, 4, small_model(), kUnit, 1.0); },
                  "the scatter plan's maximum head chunks (4) differs from the gather plan's (3)");
  require_invalid([&] { choose_head_chunks(p, p, -3, small_model(), kUnit, 1.0); }, "tokens (-3) must be >= 0");
  require_invalid([&] { choose_head_chunks(p, p, 4, small_model(), kUnit, -1.0); },
                  "attention_seconds (-1) must be finite and >= 0");
  require_invalid([&] { choose_head_chunks(p, p, 4, small_model(), kUnit, std::nan("")); }, "attention_seconds (");
  require_invalid(
      [&] {
        choose_head_chunks(p, p, 4, small_model(), {-2.0, 0.0}, 1.0);
      },
      "unit.node_bytes (-2) must be finite and >= 0");
  require_invalid(
      [&] {
        choose_head_chunks(p, p, 4, small_model(), {0.0, std::numeric_limits<double>::infinity()}, 1.0);
      },
      "unit.network_bytes (inf) must be finite and >= 0");
  auto bad = small_model();
  bad.a1 = -1.0;
  require_invalid([&] { choose_head_chunks(p, p, 4, bad, kUnit, 1.0); }, "model.a1 (-1) must be finite and >= 0");
}

TEST_CASE("a backward layer: the scatter and the gather plans differ", "[plan][chunks]") {
  // K = 2, 6 query heads (3 per position), head size 1, FP32, 4 tokens: a head of one position's tokens is 8 bytes.
  // Scatter dO (6 heads); gather dQ (6 heads) and dK, dV (one head serving all 6: its gradient leaves with the last
  // chunk). Alpha 1 s, 0.5 s per per-peer byte; attention 12 s over 3 heads.
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = 4;
  d.head_dim = 1;
  d.num_tensors = 1;
  d.num_heads[0] = 6;
  const auto scatter = basp::plan::make_exchange_plan(basp::plan::validate_spec(d), 2, 0, 1);
  d.num_tensors = 3;
  d.num_heads[1] = d.num_heads[2] = 1;
  d.query_heads[1] = d.query_heads[2] = 6;
  const auto gather = basp::plan::make_exchange_plan(basp::plan::validate_spec(d), 2, 1, 1);
  //   C = 1: S = 1 + 0.5 * 24 = 13, G = 1 + 0.5 * (24 + 16) = 21, A = 12:               13 + 12 + 21 = 46
  //   C = 2 (2, 1): S = (9, 5), G = (1 + 0.5 * 16, 1 + 0.5 * (8 + 16)) = (9, 13), A = (8, 4):
  //                                                        9 + max(8, 5) + max(4, 9) + 13 = 39
  //   C = 3 (1 each): S = (5, 5, 5), G = (5, 5, 13), A = (4, 4, 4):
  //                                       5 + max(4, 5) + max(4, 5 + 5) + max(4, 5) + 13 = 38
  const auto choice = basp::plan::choose_head_chunks(scatter, gather, 4, small_model(), kUnit, 12.0);
  CHECK(choice.predicted == std::vector<double>{46, 39, 38});
  CHECK(choice.count == 3);
}

namespace {

// Marks bytes [offset, offset + n) of `used` with `mark`; fails on a byte some piece of the same direction marked.
void mark(std::vector<int>& used, int64_t offset, int64_t n, int mark_value) {
  REQUIRE(offset >= 0);
  REQUIRE(offset + n <= static_cast<int64_t>(used.size()));
  for (int64_t i = offset; i < offset + n; ++i) {
    REQUIRE(used[static_cast<size_t>(i)] == 0);
    used[static_cast<size_t>(i)] = mark_value;
  }
}

// The execute geometry of every chunk of `count` in `direction`: its tensors move chunk_heads, and the chunks'
// pieces of the workspace and the staging region tile the whole exchange's pieces, none overlapping another.
void check_call(const ExchangePlan& p, int32_t count, Direction direction, int64_t tokens) {
  const int32_t owner = p.position;
  const bool scatter = direction == Direction::kScatter;
  std::vector<int> work(static_cast<size_t>(p.workspace_bytes(owner)), 0);
  std::vector<int> region(static_cast<size_t>(p.region_bytes(owner)), 0);
  for (int32_t c = 0; c < count; ++c) {
    const basp::plan::CallGeometry call = p.call(tokens, {c, count}, direction);
    REQUIRE(call.chunk == HeadChunk{c, count});
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const basp::layout::Geometry& g = call.at(t);
      for (int32_t j = 0; j < p.group_size; ++j) {
        REQUIRE(g.moved(j) == basp::plan::chunk_heads(p, t, j, {c, count}, direction));
        if (j != owner) mark(work, p.workspace_offset(owner, t, j, g), g.seq_rows(owner) * g.moved_row_bytes(j), 1);
        const int64_t n =
            scatter ? g.seq_rows(owner) * g.moved_row_bytes(j) : g.b_loc * g.tok_count(j) * g.moved_row_bytes(owner);
        mark(region, p.region_offset(owner, t, j, g, direction), n, 1);
      }
    }
  }
  // Together the chunks cover exactly the whole exchange's pieces.
  const basp::plan::CallGeometry whole = p.call(tokens);
  std::vector<int> work_whole(work.size(), 0);
  std::vector<int> region_whole(region.size(), 0);
  for (int32_t t = 0; t < p.num_tensors(); ++t) {
    const basp::layout::Geometry& g = whole.at(t);
    for (int32_t j = 0; j < p.group_size; ++j) {
      REQUIRE(g.moved(j) == HeadSpan{g.head_begin(j), g.head_end(j)});
      if (j != owner) mark(work_whole, p.workspace_offset(owner, t, j, g), g.seq_rows(owner) * g.head_row_bytes(j), 1);
      const int64_t n =
          scatter ? g.seq_rows(owner) * g.head_row_bytes(j) : g.b_loc * g.tok_count(j) * g.head_row_bytes(owner);
      mark(region_whole, p.region_offset(owner, t, j, g, direction), n, 1);
    }
  }
  REQUIRE(work == work_whole);
  REQUIRE(region == region_whole);
}

}  // namespace

TEST_CASE("an execute of a head chunk moves its heads in its own pieces of the workspaces", "[plan][chunks]") {
  each_shape([](int32_t k, int64_t hq, int64_t hkv, bool query_like) {
    for (int32_t position = 0; position < k; ++position) {
      const auto p = qkv_plan(k, position, hq, hkv, query_like);
      for (int32_t count = 1; count <= basp::plan::max_head_chunks(p); ++count) {
        for (const Direction d : {Direction::kScatter, Direction::kGather}) {
          for (const int64_t tokens : {int64_t{5}, p.capacity()}) {
            INFO("position " << position << " C " << count << " tokens " << tokens
                             << (d == Direction::kScatter ? " scatter" : " gather"));
            check_call(p, count, d, tokens);
          }
        }
      }
    }
  });
  const auto p = qkv_plan(3, 1, 8, 2);
  require_invalid([&] { p.call(7, {0, 4}, Direction::kScatter); }, "head chunk count (4) is above the plan's maximum");
  require_invalid([&] { p.call(7, {3, 3}, Direction::kGather); }, "head chunk index (3) is outside 0..2");
}
