// Batch plans under mpirun (docs/batch.md), through the C ABI: groups of any size per step over one comm.
// Every step draws a new membership (a random partition of the world into groups of any sizes, ranks permuted) from
// a seed every rank shares, a layout (BSHD, SBHD, THD), GQA/MQA and uneven head and token counts, makes the batch
// plan on every rank and checks it bit for bit: the scatter output against the formulas of tests/common (not the
// library's), and the gather of the scatter's output, which restores the input where no head is replicated and is
// the holders' sum (count x value, exact in FP32) where one is. Outputs are poisoned first. Then the error cases:
// a mismatched batch description on one rank (MISMATCH on its group, the comm usable afterwards), bad descriptions
// named, the planner's answer identical on every rank and exchanged bit-exactly, and last a rank that skipped a
// batch plan (MISMATCH naming the plan numbers), and BASP_MPI_TRANSPORT values refused at comm creation. Every step
// checks the path its group took against docs/batch.md's rule.
//
// usage: test_batch [steps] [seed] [timeout|calibrate|threads|split]
//   timeout:   only the case of a rank that believes it is alone
//   calibrate: only basp_comm_calibrate, with the export and import of its model
//   threads:   only the serialisation of one comm's batch executes (2 ranks, MPI_THREAD_MULTIPLE)
//   split:     the steps also run split-phase (basp_scatter_start ...): C = 2 and the group's maximum, chunks
//              started in order and waited for last first, equal to the one-call exchange bit for bit; then a
//              layer's pipeline (scatter chunk c + 1 and gather chunk c - 1 in flight together) over two batch
//              plans and over one, checked against the formulas, also on steps whose gather sums held heads; then
//              the rule that remains for batch plans (another plan's gather during an open gather that sums)
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "basp/basp.h"
#include "pattern.h"
#include "split_reference.h"

using basp::test::head_ranges;
using basp::test::HeadRange;
using basp::test::pattern_byte;
using basp::test::split_bounds;

namespace {

int g_rank = 0;
int g_size = 1;
int failures = 0;
bool g_split = false;
std::vector<std::string> g_hosts;  // every rank's host name: scripts/sim-cluster gives each fake node its own

#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      char buf_[600];                                                                  \
      std::snprintf(buf_, sizeof buf_, __VA_ARGS__);                                   \
      std::fprintf(stderr, "rank %d: %s (%s:%d)\n", g_rank, buf_, __FILE__, __LINE__); \
      ++failures;                                                                      \
    }                                                                                  \
  } while (0)

constexpr float kPoisonValue = -7777.0f;
constexpr int64_t kCapacity = 1 << 20;

struct Membership {
  std::vector<int32_t> sizes;  // per group
  std::vector<int32_t> ranks;  // group by group
  std::vector<std::vector<int32_t>> members() const {
    std::vector<std::vector<int32_t>> out;
    size_t at = 0;
    for (int32_t k : sizes) {
      out.emplace_back(ranks.begin() + static_cast<long>(at), ranks.begin() + static_cast<long>(at + k));
      at += static_cast<size_t>(k);
    }
    return out;
  }
};

Membership random_membership(std::mt19937_64& rng, std::vector<int32_t> sizes) {
  Membership m;
  if (sizes.empty()) {
    int32_t left = g_size;
    while (left > 0) {
      const int32_t k = static_cast<int32_t>(std::uniform_int_distribution<int32_t>(1, left)(rng));
      sizes.push_back(k);
      left -= k;
    }
  }
  m.sizes = sizes;
  m.ranks.resize(static_cast<size_t>(g_size));
  std::iota(m.ranks.begin(), m.ranks.end(), 0);
  std::shuffle(m.ranks.begin(), m.ranks.end(), rng);
  return m;
}

// One step's batch: the membership, the tensors, per group its sequences (BSHD/SBHD) or documents (THD).
struct Step {
  Membership m;
  int32_t layout = BASP_LAYOUT_BSHD;
  int64_t seq_len = 1;  // BSHD/SBHD
  int64_t head_dim = 1;
  std::vector<int64_t> heads, split;
  std::vector<int32_t> group_docs;  // sequences or documents per group
  std::vector<int64_t> lengths;     // THD: per document, in group order
  std::vector<int64_t> dims;        // per tensor: its own head size (head_dims[t]), 0: head_dim; empty: none
  bool head_dim_unset = false;      // head_dim left at -1: every tensor sets its own
  bool old_desc = false;            // the descriptor at its size before head_dims, garbage past it

  int64_t dim(size_t t) const { return dims.empty() || dims[t] == 0 ? head_dim : dims[t]; }
};

Step draw(std::mt19937_64& rng, std::vector<int32_t> sizes) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Step st;
  st.m = random_membership(rng, std::move(sizes));
  st.layout = static_cast<int32_t>(pick(0, 2));
  st.head_dim = pick(1, 3) * 2 - 1;
  st.seq_len = pick(1, 2 * g_size + 3);
  const int64_t hq = pick(1, 2 * g_size + 2);
  std::vector<int64_t> kv;
  for (int64_t h = 1; h <= hq; ++h) {
    if (hq % h == 0) kv.push_back(h);
  }
  const int64_t hkv = pick(0, 2) == 0 ? 1 : kv[static_cast<size_t>(pick(0, static_cast<int64_t>(kv.size()) - 1))];
  st.heads = {hq, hkv, hkv};
  st.split = {hq, hq, hq};
  for (size_t g = 0; g < st.m.sizes.size(); ++g) {
    if (st.layout == BASP_LAYOUT_THD) {
      const auto n = static_cast<int32_t>(pick(0, 3));
      st.group_docs.push_back(n);
      for (int32_t i = 0; i < n; ++i) st.lengths.push_back(pick(1, 3 * g_size));
    } else {
      st.group_docs.push_back(static_cast<int32_t>(pick(1, 2)));
    }
  }
  return st;
}

// A step of long rows (head_dim 256, fp32, Hq = 2N, Hkv = N: 1-2 KiB per position and token), for the large copies
// of the one-node paths.
Step draw_wide(std::mt19937_64& rng, std::vector<int32_t> sizes) {
  Step st = draw(rng, std::move(sizes));
  st.head_dim = 256;
  st.heads = {2 * g_size, g_size, g_size};
  st.split = {2 * g_size, 2 * g_size, 2 * g_size};
  return st;
}

// Hq = 6 and the Hkv for which a group of k = 2 or 4 ranks has a key/value head held by two positions whose last
// chunks reading it differ at C = 2 (3 at k = 2, 2 at k = 4): the gather sums it, one contribution waiting a chunk.
int64_t held_kv_heads(int64_t k) { return k >= 4 ? 2 : 3; }

// A step whose gather sums such heads (groups of 2 or 4 ranks): for the split-phase layers.
Step draw_held(std::mt19937_64& rng, std::vector<int32_t> sizes, int64_t hkv) {
  Step st = draw(rng, std::move(sizes));
  st.heads = {6, hkv, hkv};
  st.split = {6, 6, 6};
  return st;
}

// Per-tensor head sizes for some steps, from their own generator (the steps drawn before stay as they were): 1 and
// rows that are not multiples of 16 bytes among them; head_dim sometimes unset when every tensor sets its own.
Step with_dims(Step st, std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  if (pick(0, 1) == 0) {
    st.old_desc = pick(0, 1) == 0;
    return st;
  }
  const int64_t sizes[] = {0, 1, 3, 6, 9, 24};
  bool all = true;
  for (size_t t = 0; t < st.heads.size(); ++t) {
    st.dims.push_back(sizes[pick(0, 5)]);
    all = all && st.dims.back() > 0;
  }
  st.head_dim_unset = all && pick(0, 1) == 0;
  return st;
}

basp_plan_desc_t desc_of(const Step& st) {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = st.layout;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = st.layout == BASP_LAYOUT_THD ? -1 : st.seq_len;
  d.head_dim = st.head_dim_unset ? -1 : st.head_dim;
  d.num_tensors = static_cast<int32_t>(st.heads.size());
  for (size_t t = 0; t < st.heads.size(); ++t) {
    d.num_heads[t] = st.heads[t];
    d.query_heads[t] = st.split[t] == st.heads[t] ? 0 : st.split[t];
    d.head_dims[t] = st.dims.empty() ? 0 : st.dims[t];
  }
  if (st.old_desc) {  // a caller built before head_dims: the library must not read them
    d.size = offsetof(basp_plan_desc_v1, head_dims);
    for (int64_t& v : d.head_dims) v = -7;
  }
  return d;
}

struct BatchArrays {
  std::vector<int32_t> docs;
  basp_batch_t b = BASP_BATCH_INITIALIZER;
};

BatchArrays batch_of(const Step& st) {
  BatchArrays a;
  const int32_t total = std::accumulate(st.group_docs.begin(), st.group_docs.end(), 0);
  a.b.num_groups = static_cast<int32_t>(st.m.sizes.size());
  a.b.num_docs = total;
  a.b.group_sizes = st.m.sizes.data();
  a.b.ranks = st.m.ranks.data();
  a.b.group_docs = st.group_docs.data();
  if (st.layout == BASP_LAYOUT_THD) a.b.lengths = st.lengths.data();
  return a;
}

// The value of tensor t at (group g, sequence b, token s of the sequence or stream, head h, element d).
float value(uint64_t seed, int64_t t, int64_t g, int64_t b, int64_t s, int64_t h, int64_t d) {
  return static_cast<float>(pattern_byte(seed, t, g * 8 + b, s, h, d, 0)) - 100.0f;
}

// The path docs/batch.md promises a group of `k` ranks `members` (world ranks) with these head ranges per tensor:
// local for K = 1; p2p when BASP_MPI_TRANSPORT is p2p or the group spans hosts; on one host staged (auto, staged),
// or cma when forced (cma, direct). (Without staging on a host, auto would take cma for rows of 1 KiB and more: not
// on the machines these tests run on, where staged_np* and shapes_staged take the staged path.)
int32_t expected_path(const std::vector<int32_t>& members) {
  if (members.size() == 1) return BASP_PATH_LOCAL;
  const char* env = std::getenv("BASP_MPI_TRANSPORT");
  const std::string mode = env ? env : "auto";
  bool one_host = true;
  for (int32_t r : members) one_host = one_host && g_hosts[static_cast<size_t>(r)] == g_hosts[members[0]];
  if (mode == "p2p" || !one_host) return BASP_PATH_P2P;
  if (mode == "cma" || mode == "direct") return BASP_PATH_CMA;
  return BASP_PATH_STAGED;
}

// Split-phase: the exchange `scatter` of `in` again as C chunks, for C = 2 and the plan's maximum, into outputs
// poisoned first; each must equal `want`, the one-call exchange's outputs.
void split_pass(basp_plan_t plan, bool scatter, const std::vector<const void*>& in,
                const std::vector<std::vector<float>>& want, int step) {
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  basp_plan_query(plan, &info);
  for (const int32_t count : {std::min(2, info.max_head_chunks), info.max_head_chunks}) {
    std::vector<std::vector<float>> got;
    std::vector<void*> out;
    for (const auto& w : want) {
      got.emplace_back(w.size(), kPoisonValue);
      out.push_back(got.back().empty() ? nullptr : got.back().data());
    }
    bool ok = true;
    for (int32_t c = 0; c < count && ok; ++c) {
      const basp_status_t rc =
          (scatter ? &basp_scatter_start : &basp_gather_start)(plan, c, count, -1, in.data(), out.data(), nullptr);
      EXPECT(rc == BASP_SUCCESS, "step %d: start %d of %d: %s", step, c, count, basp_last_error());
      ok = rc == BASP_SUCCESS;
    }
    for (int32_t c = count - 1; c >= 0 && ok; --c) {
      const basp_status_t rc = (scatter ? &basp_scatter_wait : &basp_gather_wait)(plan, c);
      EXPECT(rc == BASP_SUCCESS, "step %d: wait %d of %d: %s", step, c, count, basp_last_error());
    }
    EXPECT(!ok || got == want, "step %d: %s in %d chunks differs from the one-call exchange", step,
           scatter ? "scatter" : "gather", count);
  }
}

bool contains(const char* text, const char* part) { return std::strstr(text, part) != nullptr; }

// Split-phase: while a batch plan's gather that sums held heads is part way through its chunks, another batch plan
// of the comm may not gather (their contributions share the pool's gather workspace), and the error names the open
// round; scatters, of any batch plan, may (the pool's scatter workspace is another), and a larger batch plan may be
// made, growing the pool; once the gather's last chunk started, the other plan may gather. The gather, with all that
// between its chunks, equals the one-call gather of the same inputs bit for bit, whose values every step checks
// against the formulas.
void split_batch_gather_case(basp_comm_t comm) {
  Step st;
  st.m.sizes = {g_size};
  st.m.ranks.resize(static_cast<size_t>(g_size));
  std::iota(st.m.ranks.begin(), st.m.ranks.end(), 0);
  st.seq_len = 4;
  st.head_dim = 2;
  const int64_t hkv = held_kv_heads(g_size);  // a contribution waits a chunk at K = 2 and at K = 4
  st.heads = {6, hkv, hkv};
  st.split = {6, 6, 6};
  st.group_docs = {1};
  const basp_plan_desc_t d = desc_of(st);
  BatchArrays a = batch_of(st);
  basp_plan_t gather = nullptr, other = nullptr;
  EXPECT(basp_batch_plan_create(comm, &d, &a.b, &gather) == BASP_SUCCESS, "split rule: %s", basp_last_error());
  EXPECT(basp_batch_plan_create(comm, &d, &a.b, &other) == BASP_SUCCESS, "split rule: %s", basp_last_error());
  if (!gather || !other) return;
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  basp_plan_query(gather, &info);
  EXPECT(info.replicated == 1 && info.max_head_chunks >= 2, "split rule: replicated %d, max chunks %d", info.replicated,
         info.max_head_chunks);
  // Distinct values on both sides: a scatter that wrote over the gather's waiting contributions would show.
  std::vector<std::vector<float>> seq(3), head(3), scattered(3), back(3), whole(3);
  std::vector<const void*> seq_in(3), head_in(3);
  std::vector<void*> scattered_out(3), back_out(3), whole_out(3);
  for (size_t t = 0; t < 3; ++t) {
    seq[t].resize(static_cast<size_t>(info.seq_sharded_elems[t]));
    head[t].resize(static_cast<size_t>(info.head_sharded_elems[t]));
    for (size_t i = 0; i < seq[t].size(); ++i) seq[t][i] = static_cast<float>(1000 + 7 * i + 100 * t);
    for (size_t i = 0; i < head[t].size(); ++i) head[t][i] = static_cast<float>(3 + 5 * i + 50 * t + g_rank);
    scattered[t].assign(head[t].size(), kPoisonValue);
    back[t].assign(seq[t].size(), kPoisonValue);
    whole[t].assign(seq[t].size(), kPoisonValue);
    seq_in[t] = seq[t].data();
    head_in[t] = head[t].data();
    scattered_out[t] = scattered[t].data();
    back_out[t] = back[t].data();
    whole_out[t] = whole[t].data();
  }
  EXPECT(basp_gather_start(gather, 0, 2, -1, head_in.data(), back_out.data(), nullptr) == BASP_SUCCESS,
         "split rule: gather chunk 0: %s", basp_last_error());
  const basp_status_t refused = basp_gather_start(other, 0, 1, -1, head_in.data(), whole_out.data(), nullptr);
  EXPECT(refused == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "with 1 of its 2 chunks started") &&
             contains(basp_last_error(), "may gather before its last chunk"),
         "split rule: another batch plan's gather start during the gather: %d %s", refused, basp_last_error());
  const basp_status_t one_call = basp_gather(other, head_in.data(), whole_out.data(), nullptr);
  EXPECT(one_call == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "with 1 of its 2 chunks started"),
         "split rule: another batch plan's one-call gather during the gather: %d %s", one_call, basp_last_error());
  EXPECT(basp_scatter(other, seq_in.data(), scattered_out.data(), nullptr) == BASP_SUCCESS,
         "split rule: another batch plan's one-call scatter during the gather: %s", basp_last_error());
  EXPECT(basp_scatter_start(other, 0, 1, -1, seq_in.data(), scattered_out.data(), nullptr) == BASP_SUCCESS &&
             basp_scatter_wait(other, 0) == BASP_SUCCESS,
         "split rule: another batch plan's scatter chunk during the gather: %s", basp_last_error());
  EXPECT(basp_scatter_start(gather, 0, 1, -1, seq_in.data(), scattered_out.data(), nullptr) == BASP_SUCCESS &&
             basp_scatter_wait(gather, 0) == BASP_SUCCESS,
         "split rule: the gathering plan's own scatter chunk during its gather: %s", basp_last_error());
  // A larger batch plan made now grows the pool, which keeps the gather's waiting contributions.
  Step large = st;
  large.seq_len = 1024 * g_size;  // 2.5 MiB of workspace per rank: more than any step before needed
  large.head_dim = 64;
  const basp_plan_desc_t ld = desc_of(large);
  basp_plan_t grown = nullptr;
  EXPECT(basp_batch_plan_create(comm, &ld, &a.b, &grown) == BASP_SUCCESS, "split rule: a larger plan: %s",
         basp_last_error());
  EXPECT(basp_gather_start(gather, 1, 2, -1, head_in.data(), back_out.data(), nullptr) == BASP_SUCCESS,
         "split rule: gather chunk 1: %s", basp_last_error());
  EXPECT(basp_gather_wait(gather, 0) == BASP_SUCCESS && basp_gather_wait(gather, 1) == BASP_SUCCESS,
         "split rule: gather waits: %s", basp_last_error());
  EXPECT(basp_gather(other, head_in.data(), whole_out.data(), nullptr) == BASP_SUCCESS,
         "split rule: the other plan's gather after the gather: %s", basp_last_error());
  EXPECT(back == whole, "split rule: the gather with scatters between its chunks differs from the one-call gather");
  basp_plan_destroy(grown);
  basp_plan_destroy(other);
  basp_plan_destroy(gather);
}

// Where this rank is in a step: its group g, position l of k, the group's tokens and token bounds, the head ranges.
struct Place {
  int64_t g = -1, l = -1, k = 0;
  int64_t tokens = 0;  // the group's sequence length (THD: its stream)
  int64_t b_loc = 1;   // the group's sequences (THD: 1)
  bool sbhd = false;
  std::vector<int64_t> tok;
  std::vector<std::vector<HeadRange>> ranges;  // per tensor
  int64_t s_l() const { return tok[l + 1] - tok[l]; }
};

Place place_of(const Step& st) {
  Place p;
  const auto members = st.m.members();
  for (size_t i = 0; i < members.size(); ++i) {
    for (size_t j = 0; j < members[i].size(); ++j) {
      if (members[i][j] == g_rank) p.g = static_cast<int64_t>(i), p.l = static_cast<int64_t>(j);
    }
  }
  p.k = static_cast<int64_t>(members[static_cast<size_t>(p.g)].size());
  const bool thd = st.layout == BASP_LAYOUT_THD;
  p.sbhd = st.layout == BASP_LAYOUT_SBHD;
  int64_t first_doc = 0;
  for (int64_t i = 0; i < p.g; ++i) first_doc += st.group_docs[static_cast<size_t>(i)];
  if (thd) {
    for (int32_t i = 0; i < st.group_docs[static_cast<size_t>(p.g)]; ++i) p.tokens += st.lengths[first_doc + i];
  } else {
    p.tokens = st.seq_len;
  }
  p.b_loc = thd ? 1 : st.group_docs[static_cast<size_t>(p.g)];
  p.tok = split_bounds(p.tokens, p.k);
  for (size_t t = 0; t < st.heads.size(); ++t) p.ranges.push_back(head_ranges(st.heads[t], st.split[t], p.k));
  return p;
}

// The scatter's output `head` against the formulas (tests/common, not the library's); `bad` counts the mismatches.
void check_scatter(const Step& st, const Place& p, uint64_t seed, const std::vector<std::vector<float>>& head,
                   const char* what, int step, int& bad) {
  for (size_t t = 0; t < st.heads.size(); ++t) {
    const int64_t D = st.dim(t);
    const HeadRange mine = p.ranges[t][static_cast<size_t>(p.l)];
    const int64_t hl = mine.end - mine.begin;
    for (int64_t b = 0; b < p.b_loc; ++b)
      for (int64_t s = 0; s < p.tokens; ++s)
        for (int64_t i = 0; i < hl; ++i)
          for (int64_t e = 0; e < D; ++e) {
            const int64_t row = p.sbhd ? s * p.b_loc + b : b * p.tokens + s;
            const float got = head[t][static_cast<size_t>((row * hl + i) * D + e)];
            const float want = value(seed, static_cast<int64_t>(t), p.g, b, s, mine.begin + i, e);
            if (got != want && bad++ < 3) {
              EXPECT(false, "step %d: %s tensor %zu seq %lld token %lld head %lld: %g, expected %g", step, what, t,
                     static_cast<long long>(b), static_cast<long long>(s), static_cast<long long>(mine.begin + i), got,
                     want);
            }
          }
  }
}

// The gather of the scatter's output, `back`, against the formulas: each head once per holder, summed.
void check_gather(const Step& st, const Place& p, uint64_t seed, const std::vector<std::vector<float>>& back,
                  const char* what, int step, int& bad) {
  for (size_t t = 0; t < st.heads.size(); ++t) {
    const int64_t H = st.heads[t];
    const int64_t D = st.dim(t);
    for (int64_t h = 0; h < H; ++h) {
      int64_t holders = 0;
      for (const HeadRange& r : p.ranges[t]) holders += r.holds(h) ? 1 : 0;
      for (int64_t b = 0; b < p.b_loc; ++b)
        for (int64_t s = 0; s < p.s_l(); ++s)
          for (int64_t e = 0; e < D; ++e) {
            const int64_t row = p.sbhd ? s * p.b_loc + b : b * p.s_l() + s;
            const float got = back[t][static_cast<size_t>((row * H + h) * D + e)];
            const float want =
                static_cast<float>(holders) * value(seed, static_cast<int64_t>(t), p.g, b, p.tok[p.l] + s, h, e);
            if (got != want && bad++ < 6) {
              EXPECT(false, "step %d: %s tensor %zu token %lld head %lld (%lld holders): %g, expected %g", step, what,
                     t, static_cast<long long>(p.tok[p.l] + s), static_cast<long long>(h),
                     static_cast<long long>(holders), got, want);
            }
          }
    }
  }
}

// Split-phase, a layer as docs/overlap.md runs it over a scatter plan and a gather plan (two batch plans of the
// step, or one for both) in C chunks: scatter chunk c + 1 and gather chunk c - 1 are in flight together (with gather
// chunk c), and a gather that sums held heads has its round open while the scatter's chunks run. Attention is the
// identity: gather chunk c reads the scatter's output in place, the heads scatter chunk c brought. Outputs poisoned
// first, both checked against the formulas.
void split_layer(basp_plan_t scatter, basp_plan_t gather, int32_t count, const Step& st, const Place& p, uint64_t seed,
                 const std::vector<const void*>& seq_in, int step, int& bad) {
  std::vector<std::vector<float>> head(st.heads.size()), back(st.heads.size());
  std::vector<const void*> head_in;
  std::vector<void*> head_out, back_out;
  for (size_t t = 0; t < st.heads.size(); ++t) {
    const HeadRange mine = p.ranges[t][static_cast<size_t>(p.l)];
    head[t].assign(static_cast<size_t>(p.b_loc * p.tokens * (mine.end - mine.begin) * st.dim(t)), kPoisonValue);
    back[t].assign(static_cast<size_t>(p.b_loc * p.s_l() * st.heads[t] * st.dim(t)), kPoisonValue);
    head_out.push_back(head[t].empty() ? nullptr : head[t].data());
    head_in.push_back(head_out.back());
    back_out.push_back(back[t].empty() ? nullptr : back[t].data());
  }
  auto ok = [&](basp_status_t rc, const char* call, int32_t c) {
    EXPECT(rc == BASP_SUCCESS, "step %d: layer of %d chunks: %s %d: %s", step, count, call, c, basp_last_error());
    return rc == BASP_SUCCESS;
  };
  bool fine =
      ok(basp_scatter_start(scatter, 0, count, -1, seq_in.data(), head_out.data(), nullptr), "scatter start", 0);
  for (int32_t c = 0; c < count && fine; ++c) {
    fine = ok(basp_scatter_wait(scatter, c), "scatter wait", c);
    if (fine && c + 1 < count) {
      fine = ok(basp_scatter_start(scatter, c + 1, count, -1, seq_in.data(), head_out.data(), nullptr), "scatter start",
                c + 1);
    }
    if (fine)
      fine = ok(basp_gather_start(gather, c, count, -1, head_in.data(), back_out.data(), nullptr), "gather start", c);
    if (fine && c > 0) fine = ok(basp_gather_wait(gather, c - 1), "gather wait", c - 1);
  }
  if (fine) fine = ok(basp_gather_wait(gather, count - 1), "gather wait", count - 1);
  if (!fine) return;
  const std::string what =
      std::string(scatter == gather ? "one plan's" : "two plans'") + " layer of " + std::to_string(count) + " chunks";
  check_scatter(st, p, seed, head, (what + ", scatter").c_str(), step, bad);
  check_gather(st, p, seed, back, (what + ", gather").c_str(), step, bad);
}

// The layer over a second batch plan of the step for the gather, and over the step's plan alone, for C = 2 and the
// plan's maximum.
void split_layers(basp_comm_t comm, basp_plan_t plan, const Step& st, const Place& p, uint64_t seed,
                  const std::vector<const void*>& seq_in, int step, int& bad) {
  const basp_plan_desc_t d = desc_of(st);
  BatchArrays a = batch_of(st);
  basp_plan_t gather = nullptr;
  EXPECT(basp_batch_plan_create(comm, &d, &a.b, &gather) == BASP_SUCCESS, "step %d: the layer's gather plan: %s", step,
         basp_last_error());
  if (!gather) return;
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  basp_plan_query(plan, &info);
  for (const int32_t count : {std::min(2, info.max_head_chunks), info.max_head_chunks}) {
    split_layer(plan, gather, count, st, p, seed, seq_in, step, bad);
    split_layer(plan, plan, count, st, p, seed, seq_in, step, bad);
  }
  basp_plan_destroy(gather);
}

// One step: create the plan, scatter, check, gather the scatter's output, check.
void run_step(basp_comm_t comm, const Step& st, uint64_t seed, int step) {
  const basp_plan_desc_t d = desc_of(st);
  BatchArrays a = batch_of(st);
  basp_plan_t plan = nullptr;
  const basp_status_t made = basp_batch_plan_create(comm, &d, &a.b, &plan);
  EXPECT(made == BASP_SUCCESS, "step %d: basp_batch_plan_create: %s", step, basp_last_error());
  if (made != BASP_SUCCESS) return;
  const Place p = place_of(st);
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  basp_plan_query(plan, &info);
  EXPECT(info.group_size == p.k && info.local_sequences == p.b_loc,
         "step %d: plan info K %d b_loc %lld, expected %lld %lld", step, info.group_size,
         static_cast<long long>(info.local_sequences), static_cast<long long>(p.k), static_cast<long long>(p.b_loc));
  EXPECT(info.token_begin == p.tok[p.l] && info.token_end == p.tok[p.l + 1],
         "step %d: token range %lld..%lld, expected %lld..%lld", step, static_cast<long long>(info.token_begin),
         static_cast<long long>(info.token_end), static_cast<long long>(p.tok[p.l]),
         static_cast<long long>(p.tok[p.l + 1]));
  const auto n = static_cast<int32_t>(st.heads.size());
  const int32_t path = expected_path(st.m.members()[static_cast<size_t>(p.g)]);
  EXPECT(info.plan_path == path, "step %d: plan path %d with K %lld, expected %d", step, info.plan_path,
         static_cast<long long>(p.k), path);
  std::vector<std::vector<float>> seq(n), head(n), back(n);
  for (int32_t t = 0; t < n; ++t) {
    const int64_t H = st.heads[t];
    const int64_t D = st.dim(static_cast<size_t>(t));
    const HeadRange mine = p.ranges[t][static_cast<size_t>(p.l)];
    seq[t].resize(static_cast<size_t>(p.b_loc * p.s_l() * H * D));
    for (int64_t b = 0; b < p.b_loc; ++b)
      for (int64_t s = 0; s < p.s_l(); ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t e = 0; e < D; ++e) {
            const int64_t row = p.sbhd ? s * p.b_loc + b : b * p.s_l() + s;
            seq[t][static_cast<size_t>((row * H + h) * D + e)] = value(seed, t, p.g, b, p.tok[p.l] + s, h, e);
          }
    head[t].assign(static_cast<size_t>(p.b_loc * p.tokens * (mine.end - mine.begin) * D), kPoisonValue);
    back[t].assign(seq[t].size(), kPoisonValue);
  }
  std::vector<const void*> in(n), seq_in(n);
  std::vector<void*> out(n);
  for (int32_t t = 0; t < n; ++t) {
    in[t] = seq_in[t] = seq[t].empty() ? nullptr : seq[t].data();
    out[t] = head[t].empty() ? nullptr : head[t].data();
  }
  basp_status_t rc = basp_scatter(plan, in.data(), out.data(), nullptr);
  EXPECT(rc == BASP_SUCCESS, "step %d: basp_scatter: %s", step, basp_last_error());
  int bad = 0;
  if (rc == BASP_SUCCESS) check_scatter(st, p, seed, head, "scatter", step, bad);
  if (g_split && rc == BASP_SUCCESS) split_pass(plan, true, in, head, step);
  // Gather the scatter's output back: each head comes back once per holder, summed.
  for (int32_t t = 0; t < n; ++t) {
    in[t] = head[t].empty() ? nullptr : head[t].data();
    out[t] = back[t].empty() ? nullptr : back[t].data();
  }
  rc = basp_gather(plan, in.data(), out.data(), nullptr);
  EXPECT(rc == BASP_SUCCESS, "step %d: basp_gather: %s", step, basp_last_error());
  if (rc == BASP_SUCCESS) check_gather(st, p, seed, back, "gather", step, bad);
  if (g_split && rc == BASP_SUCCESS) split_pass(plan, false, in, back, step);
  // The exchanges took the plan's path (never the shared path: batch plans have no basp_mem_alloc groups).
  basp_plan_query(plan, &info);
  EXPECT(rc != BASP_SUCCESS || info.last_path == path, "step %d: last path %d, expected %d", step, info.last_path,
         path);
  if (g_split && rc == BASP_SUCCESS) split_layers(comm, plan, st, p, seed, seq_in, step, bad);
  basp_plan_destroy(plan);
}

basp_comm_t make_comm(int64_t timeout_ms) {
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 0;  // batch plans only
  cfg.batch_capacity = kCapacity;
  cfg.timeout_ms = timeout_ms;
  basp_comm_t comm = nullptr;
  if (basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) != BASP_SUCCESS) {
    std::fprintf(stderr, "rank %d: comm: %s\n", g_rank, basp_last_error());
    std::exit(1);
  }
  return comm;
}

// BASP_MPI_TRANSPORT at the creation of a comm for batch plans: a value that is not one of the five, or not the
// same on every rank, is BASP_ERROR_INVALID_ARGUMENT naming it on every rank, and the next creation works.
void transport_env_case() {
  const char* before = std::getenv("BASP_MPI_TRANSPORT");
  const std::string saved = before ? before : "";
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 0;
  cfg.batch_capacity = kCapacity;
  cfg.timeout_ms = 20000;
  struct Case {
    const char* mine;
    const char* want;
  };
  std::vector<Case> cases = {{"bogus", "BASP_MPI_TRANSPORT (bogus) must be auto, p2p, cma"}};
  if (g_size > 1) cases.push_back({g_rank == 0 ? "p2p" : "cma", "BASP_MPI_TRANSPORT is not the same on every rank"});
  for (const Case& c : cases) {
    setenv("BASP_MPI_TRANSPORT", c.mine, 1);
    basp_comm_t comm = nullptr;
    const basp_status_t rc = basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm);
    EXPECT(rc == BASP_ERROR_INVALID_ARGUMENT && comm == nullptr && contains(basp_last_error(), c.want),
           "BASP_MPI_TRANSPORT=%s: comm creation returned %s (%s), expected BASP_ERROR_INVALID_ARGUMENT naming '%s'",
           c.mine, basp_status_string(rc), basp_last_error(), c.want);
    if (comm != nullptr) basp_comm_destroy(comm);
  }
  if (before) {
    setenv("BASP_MPI_TRANSPORT", saved.c_str(), 1);
  } else {
    unsetenv("BASP_MPI_TRANSPORT");
  }
  basp_comm_t comm = make_comm(20000);  // exits on failure
  basp_comm_destroy(comm);
}

// One group of the whole world; rank `odd` describes document 0 one token longer.
void mismatch_case(basp_comm_t comm) {
  if (g_size < 2) return;
  std::vector<int32_t> sizes{g_size}, ranks(static_cast<size_t>(g_size)), docs{2};
  std::iota(ranks.begin(), ranks.end(), 0);
  const int odd = g_size - 1;
  std::vector<int64_t> lengths{static_cast<int64_t>(5 + (g_rank == odd ? 1 : 0)), 7};
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  b.num_groups = 1;
  b.num_docs = 2;
  b.group_sizes = sizes.data();
  b.ranks = ranks.data();
  b.group_docs = docs.data();
  b.lengths = lengths.data();
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_THD;
  d.dtype = BASP_DTYPE_FP32;
  d.head_dim = 2;
  d.num_tensors = 1;
  d.num_heads[0] = g_size;
  basp_plan_t plan = nullptr;
  EXPECT(basp_batch_plan_create(comm, &d, &b, &plan) == BASP_SUCCESS, "mismatch case: create: %s", basp_last_error());
  const int64_t t_total = lengths[0] + lengths[1];
  const std::vector<int64_t> tok = split_bounds(t_total, g_size);
  std::vector<float> in(static_cast<size_t>((tok[g_rank + 1] - tok[g_rank]) * g_size * 2) + 1, 1.0f);
  std::vector<float> out(static_cast<size_t>(t_total * 2) + 1, kPoisonValue);
  const void* ins[1] = {in.data()};
  void* outs[1] = {out.data()};
  const basp_status_t rc = basp_scatter(plan, ins, outs, nullptr);
  EXPECT(rc == BASP_ERROR_MISMATCH, "mismatch case: scatter returned %s, expected BASP_ERROR_MISMATCH (%s)",
         basp_status_string(rc), basp_last_error());
  EXPECT(rc != BASP_ERROR_MISMATCH || contains(basp_last_error(), "batch described as"),
         "mismatch case: the message does not name the descriptions: %s", basp_last_error());
  basp_plan_destroy(plan);
}

// Bad descriptions, each named; nothing is made and the rank's batch count does not move.
void error_cases(basp_comm_t comm) {
  std::vector<int32_t> sizes{g_size}, ranks(static_cast<size_t>(g_size)), docs{1};
  std::iota(ranks.begin(), ranks.end(), 0);
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = 4;
  d.head_dim = 2;
  d.num_tensors = 1;
  d.num_heads[0] = 4;
  auto expect_error = [&](basp_batch_t b, basp_status_t status, const char* part, const char* what) {
    basp_plan_t plan = reinterpret_cast<basp_plan_t>(&d);
    const basp_status_t rc = basp_batch_plan_create(comm, &d, &b, &plan);
    EXPECT(rc == status && plan == nullptr && contains(basp_last_error(), part),
           "%s: got %s (%s), expected %s naming \"%s\"", what, basp_status_string(rc), basp_last_error(),
           basp_status_string(status), part);
  };
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  b.num_groups = 1;
  b.num_docs = 1;
  b.group_sizes = sizes.data();
  b.ranks = ranks.data();
  b.group_docs = docs.data();
  if (g_size >= 2) {
    std::vector<int32_t> dup = ranks;
    dup[1] = dup[0];
    basp_batch_t x = b;
    x.ranks = dup.data();
    expect_error(x, BASP_ERROR_INVALID_ARGUMENT, "partition", "a rank listed twice");
    std::vector<int32_t> short_sizes{g_size - 1};
    x = b;
    x.group_sizes = short_sizes.data();
    expect_error(x, BASP_ERROR_INVALID_ARGUMENT, "sum to", "sizes that do not cover the world");
  }
  std::vector<int32_t> none{0};
  basp_batch_t x = b;
  x.group_docs = none.data();
  x.num_docs = 0;
  expect_error(x, BASP_ERROR_INVALID_ARGUMENT, "group_docs[0] (0)", "a BSHD group without sequences");
  x = b;
  x.ranks = nullptr;
  expect_error(x, BASP_ERROR_NULL_POINTER, "batch->ranks", "NULL ranks");
  // Over capacity: one rank alone with a document longer than the comm's batch_capacity.
  std::vector<int32_t> ones(static_cast<size_t>(g_size), 1), one_doc(static_cast<size_t>(g_size), 0);
  one_doc[0] = 1;
  std::vector<int64_t> long_doc{kCapacity + 1};
  basp_plan_desc_t thd = d;
  thd.layout = BASP_LAYOUT_THD;
  thd.seq_len = -1;
  basp_batch_t over = BASP_BATCH_INITIALIZER;
  over.num_groups = g_size;
  over.num_docs = 1;
  over.group_sizes = ones.data();
  over.ranks = ranks.data();
  over.group_docs = one_doc.data();
  over.lengths = long_doc.data();
  basp_plan_t plan = nullptr;
  const basp_status_t rc = basp_batch_plan_create(comm, &thd, &over, &plan);
  EXPECT(rc == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "batch_capacity"),
         "a batch over capacity: got %s (%s)", basp_status_string(rc), basp_last_error());
  // The C ABI's guards: handles, struct headers, output pointers, model values.
  {
    basp_plan_t none = nullptr;
    EXPECT(basp_batch_plan_create(nullptr, &d, &b, &none) == BASP_ERROR_INVALID_HANDLE, "NULL comm: %s",
           basp_last_error());
    basp_batch_t bad = b;
    bad.magic = 0;
    EXPECT(basp_batch_plan_create(comm, &d, &bad, &none) == BASP_ERROR_BAD_STRUCT &&
               contains(basp_last_error(), "batch->magic"),
           "a batch without its magic: %s", basp_last_error());
    EXPECT(basp_batch_plan_create(comm, &d, &b, nullptr) == BASP_ERROR_NULL_POINTER, "NULL plan: %s",
           basp_last_error());
    EXPECT(basp_comm_calibrate(nullptr, 0, 0) == BASP_ERROR_INVALID_HANDLE, "calibrate(NULL): %s", basp_last_error());
    EXPECT(basp_comm_calibrate(comm, 17, 0) == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "max_bytes"),
           "calibrate with 17 bytes: %s", basp_last_error());
    EXPECT(basp_comm_import_cost_model(comm, nullptr) == BASP_ERROR_NULL_POINTER, "import(NULL): %s",
           basp_last_error());
    EXPECT(basp_comm_export_cost_model(comm, nullptr, 8, nullptr) == BASP_ERROR_NULL_POINTER, "export(NULL, 8): %s",
           basp_last_error());
    basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
    EXPECT(basp_comm_get_cost_model(comm, &m) == BASP_SUCCESS, "get_cost_model: %s", basp_last_error());
    const double before = m.a0;
    m.a0 = -1.0;
    EXPECT(basp_comm_set_cost_model(comm, &m) == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "a0"),
           "a negative a0: %s", basp_last_error());
    basp_comm_get_cost_model(comm, &m);
    EXPECT(m.a0 == before, "a refused model changed a0");
    basp_batch_problem_t p = BASP_BATCH_PROBLEM_INITIALIZER;
    std::vector<int32_t> out(static_cast<size_t>(g_size));
    basp_batch_t answer = BASP_BATCH_INITIALIZER;
    EXPECT(basp_comm_plan_batch(comm, &p, out.data(), out.data(), out.data(), out.data(), &answer, nullptr) ==
                   BASP_ERROR_INVALID_ARGUMENT &&
               contains(basp_last_error(), "num_docs"),
           "a problem without documents: %s", basp_last_error());
  }
  // A comm made without batch_capacity refuses batch plans by name; a negative capacity is refused at creation.
  {
    basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
    cfg.micro_batch = g_size;
    basp_comm_t plain = nullptr;
    EXPECT(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &plain) == BASP_SUCCESS, "plain comm: %s",
           basp_last_error());
    basp_plan_t none = nullptr;
    EXPECT(basp_batch_plan_create(plain, &d, &b, &none) == BASP_ERROR_INVALID_ARGUMENT &&
               contains(basp_last_error(), "batch_capacity"),
           "a batch plan on a comm without batch_capacity: %s", basp_last_error());
    basp_comm_destroy(plain);
    cfg.batch_capacity = -5;
    basp_comm_t bad = nullptr;
    EXPECT(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &bad) == BASP_ERROR_INVALID_ARGUMENT &&
               contains(basp_last_error(), "batch_capacity (-5)") && bad == nullptr,
           "a negative batch_capacity: %s", basp_last_error());
    cfg.batch_capacity = 0;
    cfg.micro_batch = 0;
    EXPECT(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &bad) == BASP_ERROR_INVALID_ARGUMENT &&
               contains(basp_last_error(), "micro_batch (0)"),
           "micro_batch 0 without batch_capacity: %s", basp_last_error());
  }
  // basp_plan_create on a comm of batch plans only.
  basp_plan_t p = nullptr;
  const basp_status_t pc = basp_plan_create(comm, &d, &p);
  EXPECT(pc == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "batch plans only"),
         "basp_plan_create on a batch-only comm: got %s (%s)", basp_status_string(pc), basp_last_error());
}

// The planner: the same answer on every rank, and its batch exchanged bit-exactly.
void planner_case(basp_comm_t comm, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::lognormal_distribution<double> len(std::log(24.0), 1.0);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 3 * g_size; ++i) lengths.push_back(std::clamp<int64_t>(static_cast<int64_t>(len(rng)), 1, 400));
  basp_batch_problem_t problem = BASP_BATCH_PROBLEM_INITIALIZER;
  problem.num_docs = static_cast<int32_t>(lengths.size());
  problem.lengths = lengths.data();
  problem.dtype = BASP_DTYPE_FP32;
  problem.query_heads = 8;
  problem.kv_heads = 2;
  problem.head_dim = 4;
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  problem.capacity = std::max<int64_t>(128, (3 * total / 2 + g_size - 1) / g_size);
  // Attention costs something (the default model's coefficients are 0): the planner weighs it against exchange.
  basp_cost_model_t model = BASP_COST_MODEL_INITIALIZER;
  EXPECT(basp_comm_get_cost_model(comm, &model) == BASP_SUCCESS, "get_cost_model: %s", basp_last_error());
  model.c2 = 1e-9;
  model.c1 = 1e-7;
  EXPECT(basp_comm_set_cost_model(comm, &model) == BASP_SUCCESS, "set_cost_model: %s", basp_last_error());
  std::vector<int32_t> sizes(static_cast<size_t>(g_size)), ranks(static_cast<size_t>(g_size)),
      group_docs(static_cast<size_t>(g_size)), docs(lengths.size());
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  double predicted = -1;
  const basp_status_t rc =
      basp_comm_plan_batch(comm, &problem, sizes.data(), ranks.data(), group_docs.data(), docs.data(), &b, &predicted);
  EXPECT(rc == BASP_SUCCESS, "basp_comm_plan_batch: %s", basp_last_error());
  if (rc != BASP_SUCCESS) return;
  EXPECT(predicted > 0, "predicted seconds %g", predicted);
  // Identical on every rank: compare with rank 0's.
  std::vector<int32_t> mine;
  mine.push_back(b.num_groups);
  for (int32_t i = 0; i < b.num_groups; ++i) mine.push_back(sizes[static_cast<size_t>(i)]);
  mine.insert(mine.end(), ranks.begin(), ranks.end());
  mine.insert(mine.end(), group_docs.begin(), group_docs.begin() + b.num_groups);
  mine.insert(mine.end(), docs.begin(), docs.end());
  std::vector<int32_t> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_INT32_T, 0, MPI_COMM_WORLD);
  EXPECT(root == mine, "the planner's answer differs from rank 0's");
  // Exchange it: the plan of a THD step whose documents are the planner's.
  Step st;
  st.layout = BASP_LAYOUT_THD;
  st.head_dim = 4;
  st.heads = {8, 2, 2};
  st.split = {8, 8, 8};
  st.m.sizes.assign(sizes.begin(), sizes.begin() + b.num_groups);
  st.m.ranks = ranks;
  st.group_docs.assign(group_docs.begin(), group_docs.begin() + b.num_groups);
  for (int32_t doc : docs) st.lengths.push_back(lengths[static_cast<size_t>(doc)]);
  run_step(comm, st, seed + 1, -1);
}

// A rank that made one batch plan more than the others: its next exchange is refused on its group.
void skipped_plan_case(basp_comm_t comm) {
  if (g_size < 2) return;
  Step st;
  st.m.sizes = {g_size};
  st.m.ranks.resize(static_cast<size_t>(g_size));
  std::iota(st.m.ranks.begin(), st.m.ranks.end(), 0);
  st.layout = BASP_LAYOUT_BSHD;
  st.seq_len = g_size;
  st.head_dim = 1;
  st.heads = {static_cast<int64_t>(g_size)};
  st.split = st.heads;
  st.group_docs = {1};
  const basp_plan_desc_t d = desc_of(st);
  BatchArrays a = batch_of(st);
  basp_plan_t extra = nullptr;
  if (g_rank == 0) basp_batch_plan_create(comm, &d, &a.b, &extra);
  basp_plan_t plan = nullptr;
  basp_batch_plan_create(comm, &d, &a.b, &plan);
  // One token of N heads in, N tokens of one head out (the staged path reads the whole input before round 1).
  std::vector<float> in(static_cast<size_t>(g_size), 1.0f), out(static_cast<size_t>(g_size), kPoisonValue);
  const void* ins[1] = {in.data()};
  void* outs[1] = {out.data()};
  const basp_status_t rc = basp_scatter(plan, ins, outs, nullptr);
  EXPECT(rc == BASP_ERROR_MISMATCH && contains(basp_last_error(), "batch plan #"),
         "skipped plan: got %s (%s), expected BASP_ERROR_MISMATCH naming the batch plans", basp_status_string(rc),
         basp_last_error());
  basp_plan_destroy(plan);
  basp_plan_destroy(extra);
}

// Rank 0 believes it is alone; the others put it in a group with rank 1: rank 1's exchange times out naming rank 0.
void timeout_case() {
  basp_comm_t comm = make_comm(1500);
  std::vector<int32_t> sizes, ranks(static_cast<size_t>(g_size)), docs;
  std::iota(ranks.begin(), ranks.end(), 0);
  if (g_rank == 0) {
    sizes = {1, g_size - 1};
  } else {
    sizes = {2};
    if (g_size > 2) sizes.push_back(g_size - 2);
  }
  docs.assign(sizes.size(), 1);
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  b.num_groups = static_cast<int32_t>(sizes.size());
  b.num_docs = b.num_groups;
  b.group_sizes = sizes.data();
  b.ranks = ranks.data();
  b.group_docs = docs.data();
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_FP32;
  d.seq_len = 2;
  d.head_dim = 1;
  d.num_tensors = 1;
  d.num_heads[0] = 2;
  basp_plan_t plan = nullptr;
  EXPECT(basp_batch_plan_create(comm, &d, &b, &plan) == BASP_SUCCESS, "timeout case: create: %s", basp_last_error());
  std::vector<float> in(4, 1.0f), out(4, kPoisonValue);
  const void* ins[1] = {in.data()};
  void* outs[1] = {out.data()};
  const basp_status_t rc = basp_scatter(plan, ins, outs, nullptr);
  if (g_rank == 1) {
    EXPECT(rc == BASP_ERROR_TIMEOUT && contains(basp_last_error(), "0"),
           "timeout case: rank 1 got %s (%s), expected BASP_ERROR_TIMEOUT naming rank 0", basp_status_string(rc),
           basp_last_error());
    if (rc == BASP_ERROR_TIMEOUT) std::printf("rank 1: %s\n", basp_last_error());
  } else if (g_rank == 0) {
    EXPECT(rc == BASP_SUCCESS, "timeout case: rank 0 (alone) got %s", basp_status_string(rc));
  }
  basp_plan_destroy(plan);
  basp_comm_destroy(comm);
}

// basp_comm_calibrate on the live comm: a calibrated model, identical on every rank, whose text export imports back
// to the same model, and a malformed text refused naming the line.
void calibrate_case() {
  basp_comm_t comm = make_comm(60000);
  basp_cost_model_t before = BASP_COST_MODEL_INITIALIZER;
  basp_comm_get_cost_model(comm, &before);
  EXPECT(before.calibrated == 0, "a new comm's model says calibrated");
  const basp_status_t rc = basp_comm_calibrate(comm, 1 << 18, 3);
  if (g_size < 2) {
    EXPECT(rc == BASP_ERROR_UNSUPPORTED, "calibrate on one rank: %s", basp_status_string(rc));
    basp_comm_destroy(comm);
    return;
  }
  EXPECT(rc == BASP_SUCCESS, "basp_comm_calibrate: %s", basp_last_error());
  basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
  basp_comm_get_cost_model(comm, &m);
  EXPECT(m.calibrated == 1, "the model is not marked calibrated");
  const double coefficients[] = {m.a0, m.a1, m.beta_node, m.beta_network, m.per_piece};
  for (double c : coefficients) EXPECT(std::isfinite(c) && c >= 0, "a fitted coefficient is %g", c);
  // Some bandwidth was measured: on one node beta_node (the only link class), across nodes at least one of the two
  // (the fit may clamp the other to 0 when its bytes are small next to alpha); nothing slower than 1 MB/s.
  EXPECT((m.beta_node > 0 || m.beta_network > 0) && m.beta_node < 1e-6 && m.beta_network < 1e-6,
         "beta_node %g and beta_network %g s/byte are not plausible figures", m.beta_node, m.beta_network);
  // Identical on every rank (the fit runs on gathered timings).
  double mine[5] = {m.a0, m.a1, m.beta_node, m.beta_network, m.per_piece};
  double root[5];
  std::memcpy(root, mine, sizeof mine);
  MPI_Bcast(root, 5, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT(std::memcmp(root, mine, sizeof mine) == 0, "the calibrated model differs from rank 0's");
  if (g_rank == 0) {
    std::printf(
        "calibrated: a0 %.3g s, a1 %.3g s, beta_node %.3g s/B (%.2f GB/s), beta_network %.3g s/B, "
        "per_piece %.3g s\n",
        m.a0, m.a1, m.beta_node, 1e-9 / m.beta_node, m.beta_network, m.per_piece);
  }
  // Export, import into a fresh comm, same fields.
  size_t needed = 0;
  EXPECT(basp_comm_export_cost_model(comm, nullptr, 0, &needed) == BASP_SUCCESS && needed > 20, "export size: %s",
         basp_last_error());
  std::vector<char> text(needed);
  EXPECT(basp_comm_export_cost_model(comm, text.data(), text.size() - 1, nullptr) == BASP_ERROR_INVALID_ARGUMENT,
         "an export into a buffer one byte short was accepted");
  EXPECT(basp_comm_export_cost_model(comm, text.data(), text.size(), nullptr) == BASP_SUCCESS, "export: %s",
         basp_last_error());
  basp_comm_t other = make_comm(60000);
  EXPECT(basp_comm_import_cost_model(other, text.data()) == BASP_SUCCESS, "import: %s", basp_last_error());
  basp_cost_model_t back = BASP_COST_MODEL_INITIALIZER;
  basp_comm_get_cost_model(other, &back);
  EXPECT(back.a0 == m.a0 && back.a1 == m.a1 && back.beta_node == m.beta_node && back.beta_network == m.beta_network &&
             back.per_piece == m.per_piece && back.calibrated == 1,
         "the imported model differs from the exported one");
  std::string bad(text.data());
  bad.replace(bad.find("a1 "), 3, "a1 x");
  const basp_status_t ib = basp_comm_import_cost_model(other, bad.c_str());
  EXPECT(ib == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "line"),
         "a malformed model: got %s (%s), expected INVALID_ARGUMENT naming the line", basp_status_string(ib),
         basp_last_error());
  basp_comm_get_cost_model(other, &back);
  EXPECT(back.a1 == m.a1, "a refused import changed the model");
  basp_comm_destroy(other);
  basp_comm_destroy(comm);
}

// Executes of one comm's batch plans are serialised: while rank 0's thread waits in a scatter of plan P for rank 1
// (which arrives 500 ms late), a scatter of another batch plan of the same comm on rank 0's main thread fails at
// once with INVALID_ARGUMENT; P then completes bit-exactly. Needs MPI_THREAD_MULTIPLE.
void threads_case() {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE || g_size != 2) {
    if (g_rank == 0) std::printf("threads case: needs 2 ranks and MPI_THREAD_MULTIPLE (skipped)\n");
    std::exit(77);
  }
  basp_comm_t comm = make_comm(60000);
  Step pair;
  pair.m.sizes = {2};
  pair.m.ranks = {0, 1};
  pair.layout = BASP_LAYOUT_BSHD;
  pair.seq_len = 4;
  pair.head_dim = 1;
  pair.heads = {2};
  pair.split = {2};
  pair.group_docs = {1};
  Step alone = pair;
  alone.m.sizes = {1, 1};
  alone.group_docs = {1, 1};
  const basp_plan_desc_t d = desc_of(pair);
  BatchArrays a = batch_of(pair);
  BatchArrays b = batch_of(alone);
  basp_plan_t p = nullptr;
  basp_plan_t q = nullptr;
  EXPECT(basp_batch_plan_create(comm, &d, &a.b, &p) == BASP_SUCCESS, "threads: create P: %s", basp_last_error());
  EXPECT(basp_batch_plan_create(comm, &d, &b.b, &q) == BASP_SUCCESS, "threads: create Q: %s", basp_last_error());
  std::vector<float> in(4, static_cast<float>(g_rank + 1)), out(4, kPoisonValue), qin(8, 3.0f), qout(8, kPoisonValue);
  const void* ins[1] = {in.data()};
  void* outs[1] = {out.data()};
  if (g_rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT(basp_scatter(p, ins, outs, nullptr) == BASP_SUCCESS, "threads: rank 1 scatter: %s", basp_last_error());
  } else {
    basp_status_t in_thread = BASP_ERROR_INTERNAL;
    std::thread t([&] { in_thread = basp_scatter(p, ins, outs, nullptr); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const void* qi[1] = {qin.data()};
    void* qo[1] = {qout.data()};
    const basp_status_t second = basp_scatter(q, qi, qo, nullptr);
    EXPECT(second == BASP_ERROR_INVALID_ARGUMENT && contains(basp_last_error(), "one at a time"),
           "threads: a concurrent batch execute got %s (%s), expected INVALID_ARGUMENT", basp_status_string(second),
           basp_last_error());
    t.join();
    EXPECT(in_thread == BASP_SUCCESS, "threads: the first execute got %s", basp_status_string(in_thread));
    // Rank 0 holds head 0 of all 4 tokens: its own 2 tokens (value 1) and rank 1's (value 2).
    EXPECT(out[0] == 1.0f && out[1] == 1.0f && out[2] == 2.0f && out[3] == 2.0f, "threads: scatter gave %g %g %g %g",
           out[0], out[1], out[2], out[3]);
    EXPECT(basp_scatter(q, qi, qo, nullptr) == BASP_SUCCESS, "threads: Q afterwards: %s", basp_last_error());
  }
  basp_plan_destroy(q);
  basp_plan_destroy(p);
  basp_comm_destroy(comm);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20261202;
  const bool timeout_only = argc > 3 && std::strcmp(argv[3], "timeout") == 0;
  const bool calibrate_only = argc > 3 && std::strcmp(argv[3], "calibrate") == 0;
  const bool threads_only = argc > 3 && std::strcmp(argv[3], "threads") == 0;
  g_split = argc > 3 && std::strcmp(argv[3], "split") == 0;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(static_cast<size_t>(256 * g_size));
  MPI_Allgather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < g_size; ++r) g_hosts.emplace_back(&hosts[static_cast<size_t>(256 * r)]);
  if (threads_only) {
    threads_case();
  } else if (timeout_only) {
    if (g_size >= 2) timeout_case();
  } else if (calibrate_only) {
    calibrate_case();
  } else {
    if (g_rank == 0)
      std::printf("test_batch: %d ranks, %d steps, seed %llu\n", g_size, steps, static_cast<unsigned long long>(seed));
    basp_comm_t comm = make_comm(60000);
    std::mt19937_64 rng(seed);
    std::mt19937_64 dims_rng(seed + 1);  // per-tensor head sizes, drawn apart so that the steps stay as they were
    // Every group size 1..N-1 appears: {k, N-k} for each k, then the named mixes, then random partitions.
    std::vector<std::vector<int32_t>> fixed;
    for (int32_t k = 1; k < g_size; ++k) fixed.push_back({k, g_size - k});
    if (g_size == 8) fixed.push_back({1, 2, 5});
    fixed.push_back({g_size});
    int step = 0;
    for (const auto& sizes : fixed) {
      run_step(comm, with_dims(draw(rng, sizes), dims_rng), seed + static_cast<uint64_t>(step), step), ++step;
    }
    for (int i = 0; i < steps; ++i, ++step) {
      run_step(comm, with_dims(draw(rng, {}), dims_rng), seed + static_cast<uint64_t>(step), step);
    }
    // Long rows: the whole world, a single rank and the rest, random groups.
    std::vector<std::vector<int32_t>> wide = {{g_size}, {}, {}};
    if (g_size > 2) wide.push_back({1, g_size - 1});
    for (const auto& sizes : wide)
      run_step(comm, draw_wide(rng, sizes), seed + static_cast<uint64_t>(step), step), ++step;
    if (g_split) {
      // Layers over held key/value heads: the whole world, and from 4 ranks two groups, one of 2.
      std::mt19937_64 held_rng(seed + 2);
      run_step(comm, draw_held(held_rng, {g_size}, held_kv_heads(g_size)), seed + static_cast<uint64_t>(step), step);
      ++step;
      if (g_size >= 4) {
        run_step(comm, draw_held(held_rng, {2, g_size - 2}, 3), seed + static_cast<uint64_t>(step), step);
        ++step;
      }
      split_batch_gather_case(comm);
    }
    mismatch_case(comm);
    run_step(comm, draw(rng, {}), seed + 999, 999);  // the comm works after the mismatch
    error_cases(comm);
    planner_case(comm, seed);
    skipped_plan_case(comm);
    basp_comm_destroy(comm);
    transport_env_case();
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("test_batch: %s (%d failures)\n", total == 0 ? "passed" : "FAILED", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
