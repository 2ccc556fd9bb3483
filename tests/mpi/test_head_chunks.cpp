// Head chunks executed on the MPI backend (src/plan/head_chunks.h, runtime::Plan::execute with a chunk): for
// C in 1, 2, 3 and the plan's maximum, every chunk of a scatter executed in order leaves the head-sharded outputs
// bit for bit as the whole scatter does, and every chunk of a gather the sequence-sharded outputs as the whole
// gather does; every output poisoned first, inputs a function of global coordinates (tests/common/pattern.h). Then
// as a pipelined layer runs them: after scatter chunk c the heads attention on chunk c reads are in place, and a
// gather whose inputs are written head by head, each before the chunk of its last reader, ends as the whole one.
// Shapes: uneven heads and tokens, GQA with and without replicated KV heads (FP32, summed in the gather over
// chunks that differ per holder, MQA with four holders), K/V planned query-like with fewer heads than Q (moved
// whole in the first scatter chunk and the last gather chunk), per-tensor head sizes, several sequences (BSHD, SBHD),
// THD with a per-call T; K = 1 (local) and K = N on p2p, cma, staged and shared. Ranks on different chunks of one
// exchange are a MISMATCH naming both. The chunk entry point is internal, so this
// program compiles the C ABI in and reaches the plan behind its handle (as tests/mpi/test_paths.cpp).
// With --split-phase the same cases run through the C ABI's split-phase calls (basp_scatter_start, _test, _wait)
// instead: the chunks of a round all started, tested and waited for in reverse order, and the pipelined layer
// interleaved as a layer runs it (scatter c + 1 and gather c - 1 in flight beside attention on chunk c; a plan whose
// gather sums held heads gathers through a second plan).
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "capi/handles.h"
#include "catch_mpi_session.h"
#include "common/error.h"
#include "mpi_world.h"
#include "pattern.h"
#include "plan/head_chunks.h"
#include "runtime/plan.h"

namespace {

using basp::Direction;
using basp::plan::HeadChunk;
using basp::test::kPoison;
using basp::test::pattern_byte;
using basp::test::world_size;
using Bytes = std::vector<uint8_t>;

bool g_split = false;  // --split-phase: chunks through basp_scatter_start/_test/_wait

int64_t split_begin(int64_t items, int64_t parts, int64_t j) {
  return j * (items / parts) + std::min<int64_t>(j, items % parts);
}

struct Shape {
  const char* name;
  int32_t layout;
  int32_t dtype;        // BYTE, or FP32 (the summing gather of heads several positions hold)
  int64_t micro_batch;  // sequences over the world (K = N / G as the comm decides)
  int64_t seq_len;      // S; THD: the capacity
  int64_t tokens;       // THD: T of the call; else the plan's S
  std::vector<int64_t> heads, query_heads, head_dims;
  bool replicated;  // some KV head is held by several positions at every K > 1 run here (N = 2 and N = 4)
};

basp_plan_desc_t desc_of(const Shape& s) {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = s.layout;
  d.dtype = s.dtype;
  if (s.layout == BASP_LAYOUT_THD) {
    d.token_capacity = s.seq_len;
    d.seq_len = -1;
  } else {
    d.seq_len = s.seq_len;
  }
  d.num_tensors = static_cast<int32_t>(s.heads.size());
  for (int32_t t = 0; t < d.num_tensors; ++t) {
    d.num_heads[t] = s.heads[static_cast<size_t>(t)];
    d.query_heads[t] = s.query_heads[static_cast<size_t>(t)];
    d.head_dims[t] = s.head_dims[static_cast<size_t>(t)];
  }
  return d;
}

// One rank's tensors of one shape at the call's tokens, its sequence-sharded inputs a function of (tensor, global
// sequence, global token, head, dim).
struct Tensors {
  std::vector<Bytes> seq;
  std::vector<int64_t> head_bytes;

  Tensors(const Shape& s, const basp::plan::ExchangePlan& x, int64_t first_sequence, uint64_t seed) {
    for (int32_t t = 0; t < x.num_tensors(); ++t) {
      const basp::layout::Geometry g = x.at(t, s.tokens);
      const int64_t tb = g.tok_begin(g.me);
      const int64_t tc = g.tok_count(g.me);
      Bytes in(static_cast<size_t>(g.seq_tensor_bytes(g.me)));
      for (int64_t b = 0; b < g.b_loc; ++b) {
        for (int64_t i = 0; i < tc; ++i) {
          const int64_t row = g.token_major() ? i * g.b_loc + b : b * tc + i;
          for (int64_t h = 0; h < g.heads; ++h) {
            for (int64_t e = 0; e < g.head_dim; ++e) {
              const uint8_t v = pattern_byte(seed, t, first_sequence + b, tb + i, h, e, 0);
              const auto at = static_cast<size_t>(((row * g.heads + h) * g.head_dim + e) * g.elem);
              if (g.elem == 1) {
                in[at] = v;
              } else {  // FP32 fractions: a sum in another order would round differently
                const float f = (static_cast<float>(v) - 128.0f) / 7.0f;
                std::memcpy(&in[at], &f, sizeof f);
              }
            }
          }
        }
      }
      seq.push_back(std::move(in));
      head_bytes.push_back(g.head_tensor_bytes(g.me));
    }
  }
};

// One execute through the runtime; the status it ends with, its message in `message`.
basp_status_t execute(basp::runtime::Plan& plan, Direction direction, int64_t tokens, HeadChunk chunk,
                      const std::vector<const void*>& in, const std::vector<void*>& out, std::string* message) {
  try {
    plan.execute(direction, tokens, chunk, in.data(), out.data(), nullptr);
    return BASP_SUCCESS;
  } catch (const basp::detail::Error& e) {
    if (message) *message = e.what();
    return e.status();
  }
}

std::vector<const void*> reading(const std::vector<Bytes>& v) {
  std::vector<const void*> out;
  for (const Bytes& b : v) out.push_back(b.data());
  return out;
}
std::vector<void*> writing(std::vector<Bytes>& v) {
  std::vector<void*> out;
  for (Bytes& b : v) out.push_back(b.data());
  return out;
}
std::vector<Bytes> poisoned(const std::vector<int64_t>& sizes, uint8_t poison) {
  std::vector<Bytes> out;
  for (const int64_t n : sizes) out.emplace_back(static_cast<size_t>(n), poison);
  return out;
}

// Head-sharded tensors, poisoned: plain memory, or basp_mem_alloc memory (the shared path; freed with the comm).
struct HeadTensors {
  std::vector<Bytes> own;
  std::vector<void*> ptr;
  std::vector<size_t> size;

  HeadTensors(basp_comm_t comm, const std::vector<int64_t>& sizes, uint8_t poison, bool shared) {
    for (const int64_t n : sizes) {
      own.emplace_back(shared ? 0 : static_cast<size_t>(n), poison);
      void* p = own.back().data();
      if (shared) {
        REQUIRE(basp_mem_alloc(comm, std::max<size_t>(static_cast<size_t>(n), 64), &p) == BASP_SUCCESS);
        std::memset(p, poison, static_cast<size_t>(n));
      }
      ptr.push_back(p);
      size.push_back(static_cast<size_t>(n));
    }
  }
  std::vector<const void*> reading() const { return {ptr.begin(), ptr.end()}; }
  std::vector<Bytes> contents() const {
    std::vector<Bytes> out;
    for (size_t t = 0; t < ptr.size(); ++t) {
      const auto* p = static_cast<const uint8_t*>(ptr[t]);
      out.emplace_back(p, p + size[t]);
    }
    return out;
  }
};

struct Run {
  basp_comm_t comm;
  basp_plan_t handle;         // the plan's handle, for the split-phase calls
  basp_plan_t gather_handle;  // the gathers' plan in a pipelined split-phase layer (a second one when replicated)
  basp::runtime::Plan& plan;
  int64_t tokens;
  bool shared;       // head-sharded tensors in basp_mem_alloc memory
  basp_path_t path;  // the path every execute must take
};

using StartFn = basp_status_t (*)(basp_plan_t, int32_t, int32_t, int64_t, const void* const*, void* const*, void*);
using TestFn = basp_status_t (*)(basp_plan_t, int32_t, int32_t*);
using WaitFn = basp_status_t (*)(basp_plan_t, int32_t);

basp_status_t start(basp_plan_t plan, Direction direction, int64_t tokens, HeadChunk chunk,
                    const std::vector<const void*>& in, const std::vector<void*>& out) {
  const StartFn fn = direction == Direction::kScatter ? &basp_scatter_start : &basp_gather_start;
  const int64_t call = tokens == basp::runtime::Plan::kPlanTokens ? -1 : tokens;
  return fn(plan, chunk.index, chunk.count, call, in.data(), out.data(), nullptr);
}
basp_status_t wait(basp_plan_t plan, Direction direction, int32_t chunk) {
  const WaitFn fn = direction == Direction::kScatter ? &basp_scatter_wait : &basp_gather_wait;
  const basp_status_t st = fn(plan, chunk);
  INFO("wait " << chunk << ": " << basp_last_error());
  return st;
}

// Split-phase: every chunk of C started in order, then each tested until done and waited for, last first; true
// when each succeeded on the expected path.
bool all_started(const Run& r, Direction direction, int32_t count, const std::vector<const void*>& in,
                 const std::vector<void*>& out) {
  for (int32_t c = 0; c < count; ++c) {
    const basp_status_t st = start(r.handle, direction, r.tokens, {c, count}, in, out);
    INFO("start " << c << " of " << count << ": " << basp_last_error());
    REQUIRE(st == BASP_SUCCESS);
  }
  const TestFn test = direction == Direction::kScatter ? &basp_scatter_test : &basp_gather_test;
  bool ok = true;
  for (int32_t c = count - 1; c >= 0; --c) {
    int32_t done = 0;
    while (done == 0) REQUIRE(test(r.handle, c, &done) == BASP_SUCCESS);
    ok = wait(r.handle, direction, c) == BASP_SUCCESS && ok;
    CHECK(r.plan.executor().last_path() == r.path);
  }
  CHECK(ok);
  return ok;
}

// Every chunk of C in order; true when each succeeded on the expected path.
bool all_chunks(const Run& r, Direction direction, int32_t count, const std::vector<const void*>& in,
                const std::vector<void*>& out) {
  if (g_split) return all_started(r, direction, count, in, out);
  for (int32_t c = 0; c < count; ++c) {
    std::string message;
    const basp_status_t st = execute(r.plan, direction, r.tokens, {c, count}, in, out, &message);
    INFO("chunk " << c << " of " << count << ": " << message);
    CHECK(st == BASP_SUCCESS);
    CHECK(r.plan.executor().last_path() == r.path);
    if (st != BASP_SUCCESS) return false;
  }
  return true;
}

// The chunks of this position whose attention reads head h of a tensor of geometry g, as {first, last} ({count, -1}:
// none): attention on chunk c takes this position's query heads in chunk c (of tensor 0's hq heads, the plan's
// chunk basis in every shape here), query head x reading head x / (hq / H).
std::pair<int32_t, int32_t> readers(const basp::layout::Geometry& g, int64_t hq, int32_t count, int64_t h) {
  const int64_t a = split_begin(hq, g.k, g.me);
  const int64_t n = split_begin(hq, g.k, g.me + 1) - a;
  std::pair<int32_t, int32_t> out{count, -1};
  for (int32_t c = 0; c < count; ++c) {
    for (int64_t q = a + split_begin(n, count, c); q < a + split_begin(n, count, c + 1); ++q) {
      if (q / (hq / g.heads) != h) continue;
      out.first = std::min(out.first, c);
      out.second = std::max(out.second, c);
    }
  }
  return out;
}

// Head h's bytes in every row of this position's head-sharded tensor of geometry g: copied from `from` into `to`, or
// (to == nullptr) whether `a` and `from` hold the same.
bool head_columns(const basp::layout::Geometry& g, uint8_t* to, const uint8_t* a, const uint8_t* from, int64_t h) {
  const int64_t row = g.head_row_bytes(g.me);
  const int64_t at = (h - g.head_begin(g.me)) * g.dim_bytes();
  const auto width = static_cast<size_t>(g.dim_bytes());
  for (int64_t i = 0; i < g.b_loc * g.seq_len; ++i) {
    if (to) {
      std::memcpy(to + i * row + at, from + i * row + at, width);
    } else if (std::memcmp(a + i * row + at, from + i * row + at, width) != 0) {
      return false;
    }
  }
  return true;
}

// The chunks as a pipelined layer runs them, attention on chunk c between scatter chunk c and gather chunk c: after
// scatter chunk c every head attention on chunk c reads holds the whole scatter's bytes; the gather's inputs start
// poisoned, a head's set only before the gather chunk of its last reader (or before chunk 0 where no chunk reads
// it), and the gather still ends as the whole gather.
void pipelined(const Run& r, const Shape& s, const basp::plan::ExchangePlan& x, const Tensors& data, int32_t count,
               const std::vector<Bytes>& whole_head, const std::vector<Bytes>* gather_in,
               const std::vector<Bytes>& whole_back) {
  const int64_t hq = s.heads[0];
  const HeadTensors head(r.comm, data.head_bytes, 0x5A, r.shared);
  for (int32_t c = 0; c < count; ++c) {
    INFO("pipelined scatter chunk " << c << " of " << count);
    REQUIRE(execute(r.plan, Direction::kScatter, r.tokens, {c, count}, reading(data.seq), head.ptr, nullptr) ==
            BASP_SUCCESS);
    for (int32_t t = 0; t < x.num_tensors(); ++t) {
      const basp::layout::Geometry g = x.at(t, s.tokens);
      for (int64_t h = g.head_begin(g.me); h < g.head_end(g.me); ++h) {
        INFO("tensor " << t << " head " << h);
        if (readers(g, hq, count, h).first <= c)
          CHECK(head_columns(g, nullptr, static_cast<const uint8_t*>(head.ptr[static_cast<size_t>(t)]),
                             whole_head[static_cast<size_t>(t)].data(), h));
      }
    }
  }
  if (!gather_in) return;
  const HeadTensors in(r.comm, data.head_bytes, kPoison, r.shared);
  auto ready = [&](int32_t c) {  // the inputs of the heads whose last reader is chunk c
    for (int32_t t = 0; t < x.num_tensors(); ++t) {
      const basp::layout::Geometry g = x.at(t, s.tokens);
      for (int64_t h = g.head_begin(g.me); h < g.head_end(g.me); ++h) {
        if (readers(g, hq, count, h).second == c)
          head_columns(g, static_cast<uint8_t*>(in.ptr[static_cast<size_t>(t)]), nullptr,
                       (*gather_in)[static_cast<size_t>(t)].data(), h);
      }
    }
  };
  std::vector<Bytes> back;
  for (const Bytes& b : whole_back) back.emplace_back(b.size(), 0x5A);
  ready(-1);
  for (int32_t c = 0; c < count; ++c) {
    INFO("pipelined gather chunk " << c << " of " << count);
    ready(c);
    REQUIRE(execute(r.plan, Direction::kGather, r.tokens, {c, count}, in.reading(), writing(back), nullptr) ==
            BASP_SUCCESS);
  }
  CHECK(back == whole_back);
}

// The pipelined layer split-phase, as a layer interleaves it: scatter chunk c + 1 and gather chunk c - 1 in flight
// while "attention" on chunk c checks the heads it reads and writes the gather inputs of the heads whose last reader
// it is; every gather chunk ends as the whole gather's.
void pipelined_split(const Run& r, const Shape& s, const basp::plan::ExchangePlan& x, const Tensors& data,
                     int32_t count, const std::vector<Bytes>& whole_head, const std::vector<Bytes>* gather_in,
                     const std::vector<Bytes>& whole_back) {
  const int64_t hq = s.heads[0];
  const HeadTensors head(r.comm, data.head_bytes, 0x5A, r.shared);
  const HeadTensors in(r.comm, data.head_bytes, kPoison, r.shared);
  std::vector<Bytes> back;
  for (const Bytes& b : whole_back) back.emplace_back(b.size(), 0x5A);
  auto each_head = [&](auto&& f) {
    for (int32_t t = 0; t < x.num_tensors(); ++t) {
      const basp::layout::Geometry g = x.at(t, s.tokens);
      for (int64_t h = g.head_begin(g.me); h < g.head_end(g.me); ++h) f(t, g, h);
    }
  };
  auto ready = [&](int32_t c) {  // the gather inputs of the heads whose last reader is chunk c
    if (!gather_in) return;
    each_head([&](int32_t t, const basp::layout::Geometry& g, int64_t h) {
      if (readers(g, hq, count, h).second == c)
        head_columns(g, static_cast<uint8_t*>(in.ptr[static_cast<size_t>(t)]), nullptr,
                     (*gather_in)[static_cast<size_t>(t)].data(), h);
    });
  };
  ready(-1);
  REQUIRE(start(r.handle, Direction::kScatter, r.tokens, {0, count}, reading(data.seq), head.ptr) == BASP_SUCCESS);
  for (int32_t c = 0; c < count; ++c) {
    INFO("pipelined split-phase chunk " << c << " of " << count);
    REQUIRE(wait(r.handle, Direction::kScatter, c) == BASP_SUCCESS);
    if (c + 1 < count) {
      REQUIRE(start(r.handle, Direction::kScatter, r.tokens, {c + 1, count}, reading(data.seq), head.ptr) ==
              BASP_SUCCESS);
    }
    each_head([&](int32_t t, const basp::layout::Geometry& g, int64_t h) {
      INFO("tensor " << t << " head " << h);
      if (readers(g, hq, count, h).first <= c)
        CHECK(head_columns(g, nullptr, static_cast<const uint8_t*>(head.ptr[static_cast<size_t>(t)]),
                           whole_head[static_cast<size_t>(t)].data(), h));
    });
    if (!gather_in) continue;
    ready(c);
    REQUIRE(start(r.gather_handle, Direction::kGather, r.tokens, {c, count}, in.reading(), writing(back)) ==
            BASP_SUCCESS);
    if (c > 0) REQUIRE(wait(r.gather_handle, Direction::kGather, c - 1) == BASP_SUCCESS);
  }
  if (!gather_in) return;
  REQUIRE(wait(r.gather_handle, Direction::kGather, count - 1) == BASP_SUCCESS);
  CHECK(back == whole_back);
}

void run_shape(basp_comm_t comm, const Shape& s, bool shared, basp_path_t path) {
  INFO("shape " << s.name << ", path " << path);
  const basp_plan_desc_t d = desc_of(s);
  basp_plan_t handle = nullptr;
  REQUIRE(basp_plan_create(comm, &d, &handle) == BASP_SUCCESS);
  basp::runtime::Plan& plan = *basp::capi::plan_ref(handle, "plan");
  const basp::plan::ExchangePlan& x = plan.exchange();
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  REQUIRE(basp_comm_query(comm, -1, s.seq_len, &me) == BASP_SUCCESS);
  basp_plan_t gather_handle = handle;
  if (g_split && x.replicated) REQUIRE(basp_plan_create(comm, &d, &gather_handle) == BASP_SUCCESS);
  const Run r{
      comm,   handle, gather_handle, plan, s.layout == BASP_LAYOUT_THD ? s.tokens : basp::runtime::Plan::kPlanTokens,
      shared, path};
  const Tensors data(s, x, s.layout == BASP_LAYOUT_THD ? 0 : me.first_sequence, 91);
  std::vector<int64_t> seq_bytes;
  for (const Bytes& b : data.seq) seq_bytes.push_back(static_cast<int64_t>(b.size()));

  // The whole exchange: the reference.
  const HeadTensors whole_head(comm, data.head_bytes, kPoison, shared);
  REQUIRE(execute(plan, Direction::kScatter, r.tokens, {}, reading(data.seq), whole_head.ptr, nullptr) == BASP_SUCCESS);
  CHECK(plan.executor().last_path() == path);
  for (const Bytes& b : whole_head.contents())  // some bytes written (a position may hold none of a tensor's heads)
    if (!b.empty()) CHECK(std::count(b.begin(), b.end(), kPoison) < static_cast<long>(b.size()));
  // The gather's inputs: the scatter's outputs; FP32 scaled by the rank, so that the holders of a head contribute
  // different values and a sum in another order would round differently.
  const HeadTensors gather_in(comm, data.head_bytes, 0, shared);
  const std::vector<Bytes> scattered = whole_head.contents();
  for (size_t t = 0; t < scattered.size(); ++t) {
    Bytes b = scattered[t];
    for (size_t i = 0; s.dtype == BASP_DTYPE_FP32 && i + 4 <= b.size(); i += 4) {
      float f;
      std::memcpy(&f, &b[i], 4);
      f = f * (1.0f + 0.37f * static_cast<float>(basp::test::world_rank())) + 0.013f;
      std::memcpy(&b[i], &f, 4);
    }
    if (!b.empty()) std::memcpy(gather_in.ptr[t], b.data(), b.size());  // a position may hold none (NULL)
  }
  std::vector<Bytes> whole_back = poisoned(seq_bytes, kPoison);
  if (s.replicated) CHECK(x.replicated == (x.group_size > 1));
  const bool gather = !x.replicated || s.dtype != BASP_DTYPE_BYTE;  // a byte gather cannot sum
  if (gather) {
    REQUIRE(execute(plan, Direction::kGather, r.tokens, {}, gather_in.reading(), writing(whole_back), nullptr) ==
            BASP_SUCCESS);
    // Bytes, nothing replicated: the gather restores the inputs.
    if (s.dtype == BASP_DTYPE_BYTE) CHECK(whole_back == data.seq);
    for (const Bytes& b : whole_back) CHECK(std::count(b.begin(), b.end(), kPoison) < static_cast<long>(b.size()));
  }

  const int32_t most = basp::plan::max_head_chunks(x);
  std::vector<int32_t> counts = {1, 2, 3, most};
  counts.erase(std::remove_if(counts.begin(), counts.end(), [&](int32_t c) { return c > most; }), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  for (const int32_t count : counts) {
    INFO("C = " << count << " (most " << most << ")");
    const HeadTensors head(comm, data.head_bytes, 0x5A, shared);
    if (!all_chunks(r, Direction::kScatter, count, reading(data.seq), head.ptr)) continue;
    CHECK(head.contents() == whole_head.contents());
    std::vector<Bytes> back = poisoned(seq_bytes, 0x5A);
    if (gather) {
      if (!all_chunks(r, Direction::kGather, count, gather_in.reading(), writing(back))) continue;
      CHECK(back == whole_back);
    }
    const std::vector<Bytes> gather_inputs = gather_in.contents();
    if (g_split) {
      pipelined_split(r, s, x, data, count, whole_head.contents(), gather ? &gather_inputs : nullptr, whole_back);
    } else {
      pipelined(r, s, x, data, count, whole_head.contents(), gather ? &gather_inputs : nullptr, whole_back);
    }
  }
  // A chunk outside the plan's bounds: this rank's own checks, no exchange.
  std::string message;
  std::vector<Bytes> head = poisoned(data.head_bytes, 0x5A);
  CHECK(execute(plan, Direction::kScatter, r.tokens, {0, most + 1}, reading(data.seq), writing(head), &message) ==
        BASP_ERROR_INVALID_ARGUMENT);
  CHECK(message.find("head chunk count (" + std::to_string(most + 1) + ")") != std::string::npos);
  if (gather_handle != handle) CHECK(basp_plan_destroy(gather_handle) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(handle) == BASP_SUCCESS);
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      // Uneven heads (5 over 2 or 4 positions) and tokens (6 over 4).
      {"uneven MHA", BASP_LAYOUT_BSHD, BASP_DTYPE_BYTE, 1, 6, 6, {5, 5, 5}, {0, 0, 0}, {8, 8, 8}, false},
      // GQA, r = 2: every KV head on one position, moving with the first chunk reading it and back with the last.
      {"GQA r=2", BASP_LAYOUT_BSHD, BASP_DTYPE_BYTE, 1, 8, 8, {8, 4, 4}, {0, 8, 8}, {4, 4, 4}, false},
      // GQA, r = 2 (Hq = 6, Hkv = 3): KV heads several positions hold (K = 2: head 1; K = 4: head 2); a byte
      // gather cannot sum them (scatter only), an FP32 one sums each over its holders' chunks.
      {"GQA replicated", BASP_LAYOUT_BSHD, BASP_DTYPE_BYTE, 1, 8, 8, {6, 3, 3}, {0, 6, 6}, {4, 4, 4}, true},
      {"GQA replicated FP32", BASP_LAYOUT_SBHD, BASP_DTYPE_FP32, 3, 7, 7, {6, 3, 3}, {0, 6, 6}, {4, 2, 3}, true},
      // MQA: the one KV head held by every position (up to four holders, each sending it in another chunk).
      {"MQA FP32", BASP_LAYOUT_THD, BASP_DTYPE_FP32, 1, 16, 13, {12, 1, 1}, {0, 12, 12}, {2, 3, 2}, true},
      // GQA, r = 3: each KV head on one position at K = 2, held by several at K = 4.
      {"GQA r=3", BASP_LAYOUT_BSHD, BASP_DTYPE_BYTE, 1, 8, 8, {6, 2, 2}, {0, 6, 6}, {4, 4, 4}, false},
      // K/V planned query-like with fewer heads than Q (below the chunk basis): every head of a position moves in
      // scatter chunk 0 and gather chunk C - 1. K divides Hkv = 2 at N = 2 (not at N = 4: positions 2, 3 hold
      // none), and Hkv = 3 at neither (FP32, SBHD, three sequences).
      {"query-like KV 8/2", BASP_LAYOUT_BSHD, BASP_DTYPE_BYTE, 1, 8, 8, {8, 2, 2}, {0, 0, 0}, {4, 4, 4}, false},
      {"query-like KV 6/3 FP32", BASP_LAYOUT_SBHD, BASP_DTYPE_FP32, 3, 5, 5, {6, 3, 3}, {0, 0, 0}, {4, 2, 3}, false},
      // Per-tensor head sizes.
      {"head sizes", BASP_LAYOUT_BSHD, BASP_DTYPE_BYTE, 1, 5, 5, {4, 4, 4}, {0, 0, 0}, {16, 8, 24}, false},
      // Three sequences per group: BSHD (strided blocks) and SBHD.
      {"BSHD b=3", BASP_LAYOUT_BSHD, BASP_DTYPE_BYTE, 3, 6, 6, {7, 7}, {0, 0}, {4, 4}, false},
      {"SBHD b=3", BASP_LAYOUT_SBHD, BASP_DTYPE_BYTE, 3, 6, 6, {7, 7}, {0, 0}, {4, 4}, false},
      // THD: a call of 11 tokens in a plan of 16.
      {"THD T=11", BASP_LAYOUT_THD, BASP_DTYPE_BYTE, 1, 16, 11, {6, 3, 3}, {0, 6, 6}, {4, 4, 4}, false},
  };
  return all;
}

// Every shape on one path: BASP_MPI_TRANSPORT `transport` (nullptr: the default), `micro_batch` sequences per
// sequence of the shape (the world size: K = 1), head-sharded tensors in basp_mem_alloc memory when `shared`.
void run_comm(const char* transport, int64_t micro_batch, bool shared, basp_path_t path) {
  if (transport) {
    setenv("BASP_MPI_TRANSPORT", transport, 1);
  } else {
    unsetenv("BASP_MPI_TRANSPORT");
  }
  for (const Shape& s : shapes()) {
    basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
    cfg.micro_batch = micro_batch * s.micro_batch;
    cfg.placement = BASP_PLACEMENT_CONTIGUOUS;
    basp_comm_t comm = nullptr;
    REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) == BASP_SUCCESS);
    run_shape(comm, s, shared, path);
    CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
  }
  unsetenv("BASP_MPI_TRANSPORT");
}

}  // namespace

TEST_CASE("K = 1: the local path executes every chunk", "[head_chunks]") {
  run_comm(nullptr, world_size(), false, BASP_PATH_LOCAL);
}

TEST_CASE("every path: the chunks in order equal the whole exchange", "[head_chunks]") {
  if (world_size() < 2) return;
  run_comm("p2p", 1, false, BASP_PATH_P2P);
  run_comm("cma", 1, false, BASP_PATH_CMA);
  run_comm("staged", 1, false, BASP_PATH_STAGED);
  run_comm("staged", 1, true, BASP_PATH_SHARED);
}

TEST_CASE("ranks on different chunks: MISMATCH naming both; the next exchange works", "[head_chunks]") {
  if (world_size() < 2) return;
  setenv("BASP_MPI_TRANSPORT", "p2p", 1);
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 1;
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) == BASP_SUCCESS);
  const Shape& s = shapes()[0];
  const basp_plan_desc_t d = desc_of(s);
  basp_plan_t handle = nullptr;
  REQUIRE(basp_plan_create(comm, &d, &handle) == BASP_SUCCESS);
  basp::runtime::Plan& plan = *basp::capi::plan_ref(handle, "plan");
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  REQUIRE(basp_comm_query(comm, -1, s.seq_len, &me) == BASP_SUCCESS);
  const Tensors data(s, plan.exchange(), me.first_sequence, 5);
  std::vector<Bytes> head = poisoned(data.head_bytes, kPoison);
  const int32_t rank = basp::test::world_rank();
  // Rank 0 on chunk 1 of 2 and the others on chunk 0 of 2; then rank 0 on the whole exchange (chunk 0 of 1).
  struct Round {
    HeadChunk rank0, others;
    const char* rank0_call;
    const char* others_call;
  };
  for (const Round r : {Round{{1, 2}, {0, 2}, "head chunk 1 of 2", "head chunk 0 of 2"},
                        Round{{0, 1}, {0, 2}, "of every head", "head chunk 0 of 2"}}) {
    std::string message;
    CHECK(execute(plan, Direction::kScatter, basp::runtime::Plan::kPlanTokens, rank == 0 ? r.rank0 : r.others,
                  reading(data.seq), writing(head), &message) == BASP_ERROR_MISMATCH);
    INFO(message);
    CHECK(message.find(r.rank0_call) != std::string::npos);
    CHECK(message.find(r.others_call) != std::string::npos);
  }
  // Rank 0 asks for a chunk outside the plan's bounds: its own checks fail (INVALID_ARGUMENT), and its peers, on
  // chunk 0 of 2, fail at once naming the chunk it asked for.
  {
    const int32_t most = basp::plan::max_head_chunks(plan.exchange());
    const HeadChunk bad{0, most + 1};
    const std::string bad_call = "head chunk 0 of " + std::to_string(most + 1);
    std::string message;
    const basp_status_t st = execute(plan, Direction::kScatter, basp::runtime::Plan::kPlanTokens,
                                     rank == 0 ? bad : HeadChunk{0, 2}, reading(data.seq), writing(head), &message);
    INFO(message);
    if (rank == 0) {
      CHECK(st == BASP_ERROR_INVALID_ARGUMENT);
    } else {
      CHECK(st == BASP_ERROR_MISMATCH);
      CHECK(message.find(bad_call + " whose argument checks failed with BASP_ERROR_INVALID_ARGUMENT") !=
            std::string::npos);
    }
  }
  // A mismatch took nothing: the whole exchange works after it.
  CHECK(execute(plan, Direction::kScatter, basp::runtime::Plan::kPlanTokens, {}, reading(data.seq), writing(head),
                nullptr) == BASP_SUCCESS);
  CHECK(basp_plan_destroy(handle) == BASP_SUCCESS);
  CHECK(basp_comm_destroy(comm) == BASP_SUCCESS);
  unsetenv("BASP_MPI_TRANSPORT");
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  std::vector<char*> args(argv, argv + argc);
  const auto split =
      std::find_if(args.begin(), args.end(), [](const char* a) { return std::strcmp(a, "--split-phase") == 0; });
  g_split = split != args.end();
  if (g_split) args.erase(split);
  return basp::test::run_catch_session_on_all_ranks(static_cast<int>(args.size()), args.data());
}
