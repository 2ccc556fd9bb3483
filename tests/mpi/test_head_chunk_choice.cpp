// basp_choose_head_chunks under mpirun (2 and 4 ranks): the answer equals plan::choose_head_chunks computed here
// from the same inputs (the exchange plan made again from the descriptor, the comm's cost model, the group's traffic
// of one per-peer byte on one node: K - 1 node bytes, no network bytes), T(1) equals the hand-derived layer without
// chunks, and the choice is 1 without attention, 1 when attention dwarfs the exchange, and more than 1 with a 5% gain
// in between; every rank gets the same bytes; a collective call with different attention per rank gives every rank
// the answer for the maximum (plain and batch plans); each bad argument fails with its status and a message naming
// the value; a model whose per-piece term outweighs the overlap makes it 1 where the plain model chunks. Compiles the
// library's internals in (plan/) to compute the expected answer.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "mpi_world.h"
#include "plan/cost_model.h"
#include "plan/exchange.h"
#include "plan/head_chunk_choice.h"

namespace {

using basp::test::world_rank;
using basp::test::world_size;

constexpr int64_t kSeq = 8192;
constexpr int64_t kHeads = 32;
constexpr int64_t kHeadDim = 128;
constexpr double kPoisonSeconds = -7.0;

basp_plan_desc_t query_desc() {
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_FP16;
  d.seq_len = kSeq;
  d.head_dim = kHeadDim;
  d.num_tensors = 1;
  d.num_heads[0] = kHeads;
  return d;
}

bool one_node() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int size = 0;
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return size == world_size();
}

struct Answer {
  basp_head_chunk_choice_t choice = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  std::vector<double> predicted;
  basp_status_t status = BASP_SUCCESS;
  std::string message;
};

Answer choose(basp_plan_t scatter, basp_plan_t gather, int64_t tokens, double attention, int32_t collective,
              int32_t capacity = 1024) {
  Answer a;
  a.predicted.assign(static_cast<size_t>(capacity), kPoisonSeconds);
  a.status =
      basp_choose_head_chunks(scatter, gather, tokens, attention, collective, &a.choice, a.predicted.data(), capacity);
  a.message = basp_last_error();
  if (a.status == BASP_SUCCESS) a.predicted.resize(static_cast<size_t>(a.choice.max_head_chunks));
  return a;
}

// The expected choice, from the descriptor made into this rank's exchange plan again.
basp::plan::HeadChunkChoice expected(const basp_plan_desc_t& desc, basp_comm_t comm, int32_t k, int32_t position,
                                     int64_t local_sequences, double attention) {
  const basp::plan::ExchangePlan x =
      basp::plan::make_exchange_plan(basp::plan::validate_spec(desc), k, position, local_sequences);
  basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
  REQUIRE(basp_comm_get_cost_model(comm, &m) == BASP_SUCCESS);
  basp::plan::CostModel model;
  model.a0 = m.a0;
  model.a1 = m.a1;
  model.beta_node = m.beta_node;
  model.beta_network = m.beta_network;
  model.per_piece = m.per_piece;
  const basp::plan::GroupTraffic unit{static_cast<double>(k - 1), 0.0};
  return basp::plan::choose_head_chunks(x, x, desc.seq_len, model, unit, attention);
}

// Every rank's answer holds the same bytes as rank 0's.
void require_same_everywhere(const Answer& a) {
  std::vector<double> mine = a.predicted;
  mine.push_back(a.choice.num_chunks);
  mine.push_back(a.choice.max_head_chunks);
  mine.push_back(a.choice.attention_seconds);
  std::vector<double> all(mine.size() * static_cast<size_t>(world_size()));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
                MPI_DOUBLE, MPI_COMM_WORLD);
  for (int r = 1; r < world_size(); ++r) {
    INFO("rank " << r);
    CHECK(std::memcmp(all.data(), all.data() + r * mine.size(), mine.size() * sizeof(double)) == 0);
  }
}

void check_matches(const Answer& a, const basp::plan::HeadChunkChoice& want) {
  INFO(a.message);
  REQUIRE(a.status == BASP_SUCCESS);
  CHECK(a.choice.num_chunks == want.count);
  CHECK(a.choice.max_head_chunks == static_cast<int32_t>(want.predicted.size()));
  CHECK(a.predicted == want.predicted);
  CHECK(a.choice.seconds_one == want.predicted.front());
  CHECK(a.choice.seconds_chosen == want.predicted[static_cast<size_t>(want.count - 1)]);
}

struct PlainComm {
  basp_comm_t comm = nullptr;
  basp_plan_t plan = nullptr;
  explicit PlainComm(const basp_plan_desc_t& desc) {
    basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
    cfg.micro_batch = 1;  // one group of every rank
    REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) == BASP_SUCCESS);
    REQUIRE(basp_plan_create(comm, &desc, &plan) == BASP_SUCCESS);
  }
  ~PlainComm() {
    basp_plan_destroy(plan);
    basp_comm_destroy(comm);
  }
};

}  // namespace

TEST_CASE("the choice is the model's on the plan's inputs, the same on every rank", "[head_chunk_choice]") {
  const basp_plan_desc_t desc = query_desc();
  PlainComm c(desc);
  const int32_t k = world_size();
  basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
  REQUIRE(basp_comm_get_cost_model(c.comm, &m) == BASP_SUCCESS);
  // The whole exchange: each rank sends each peer its S/K tokens of the peer's Hq/K heads.
  const double per_peer = static_cast<double>((kSeq / k) * (kHeads / k) * kHeadDim * 2);
  const double exchange = m.a0 + m.a1 * (k - 1) + m.beta_node * (per_peer * (k - 1));
  const bool local = one_node();
  if (!local) WARN("ranks on several nodes: the comparison with the one-node traffic is left out");
  for (const double attention : {0.0, 2.0 * exchange, 1e6}) {
    INFO("attention_seconds " << attention);
    const Answer a = choose(c.plan, nullptr, -1, attention, 0);
    REQUIRE(a.status == BASP_SUCCESS);
    CHECK(a.choice.max_head_chunks == kHeads / k);
    CHECK(a.choice.attention_seconds == attention);
    require_same_everywhere(a);
    if (!local) continue;
    check_matches(a, expected(desc, c.comm, k, world_rank(), 1, attention));
    CHECK(a.predicted[0] == Approx(2.0 * exchange + attention).epsilon(1e-12));
    if (attention == 2.0 * exchange) {
      CHECK(a.choice.num_chunks > 1);
      CHECK(a.choice.seconds_chosen < 0.95 * a.choice.seconds_one);
    } else {
      CHECK(a.choice.num_chunks == 1);  // no attention to overlap; or an exchange too small to matter
    }
  }
  // The same plan named as the gather, and num_tokens = seq_len, answer alike.
  const Answer whole = choose(c.plan, nullptr, -1, 2.0 * exchange, 0);
  const Answer named = choose(c.plan, c.plan, kSeq, 2.0 * exchange, 0);
  CHECK(named.predicted == whole.predicted);
  // A capacity below the maximum fills that many and leaves the rest of the caller's array alone.
  std::vector<double> three(5, kPoisonSeconds);
  basp_head_chunk_choice_t partial = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  REQUIRE(basp_choose_head_chunks(c.plan, nullptr, -1, 2.0 * exchange, 0, &partial, three.data(), 3) == BASP_SUCCESS);
  CHECK(std::vector<double>(three.begin(), three.begin() + 3) ==
        std::vector<double>(whole.predicted.begin(), whole.predicted.begin() + 3));
  CHECK(three[3] == kPoisonSeconds);
  CHECK(three[4] == kPoisonSeconds);
  CHECK(partial.num_chunks == whole.choice.num_chunks);
  basp_head_chunk_choice_t none = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  CHECK(basp_choose_head_chunks(c.plan, nullptr, -1, 0.0, 0, &none, nullptr, 0) == BASP_SUCCESS);
  CHECK(none.max_head_chunks == kHeads / k);
}

// The comm's model with a per-piece term (cost_model.h) large enough that no C beats C = 1 where the plain model
// picks C > 1: each of C chunks pays per_piece * P * (C - 1) / C more, P = the (S/K) * (K - 1) rows a rank copies
// to its peers. With per_piece = 2 E / P (E the whole exchange) every chunk exchange costs at least E; T(C) holds
// all 2C of them, so T(C) >= 2 C E >= 4 E = T(1) for attention 2 E. C = 2 by hand: S = G = alpha + beta * bytes / 2
// + E, above the attention per chunk (E): T(2) = 4 S.
TEST_CASE("a per-piece term makes C = 1 the choice where the plain model chunks", "[head_chunk_choice]") {
  const basp_plan_desc_t desc = query_desc();
  PlainComm c(desc);
  const int32_t k = world_size();
  basp_cost_model_t m = BASP_COST_MODEL_INITIALIZER;
  REQUIRE(basp_comm_get_cost_model(c.comm, &m) == BASP_SUCCESS);
  REQUIRE(m.per_piece == 0.0);
  const double bytes = static_cast<double>((kSeq / k) * (kHeads / k) * kHeadDim * 2) * (k - 1);
  const double alpha = m.a0 + m.a1 * (k - 1);
  const double exchange = alpha + m.beta_node * bytes;
  const double pieces = static_cast<double>(kSeq / k) * (k - 1);
  const Answer plain = choose(c.plan, nullptr, -1, 2.0 * exchange, 0);
  REQUIRE(plain.status == BASP_SUCCESS);
  if (!one_node()) {
    WARN("ranks on several nodes: the one-node arithmetic is left out");
    return;
  }
  REQUIRE(plain.choice.num_chunks > 1);
  m.per_piece = 2.0 * exchange / pieces;
  REQUIRE(basp_comm_set_cost_model(c.comm, &m) == BASP_SUCCESS);
  const Answer a = choose(c.plan, nullptr, -1, 2.0 * exchange, 0);
  INFO(a.message);
  REQUIRE(a.status == BASP_SUCCESS);
  CHECK(a.choice.num_chunks == 1);
  CHECK(a.predicted[0] == plain.predicted[0]);  // C = 1 pays nothing more, bit for bit
  CHECK(a.predicted[0] == Approx(4.0 * exchange).epsilon(1e-12));
  const double chunk = alpha + m.beta_node * bytes / 2 + m.per_piece * pieces / 2;
  CHECK(chunk == Approx(alpha + m.beta_node * bytes / 2 + exchange).epsilon(1e-12));
  CHECK(a.predicted[1] == Approx(4.0 * chunk).epsilon(1e-12));
  for (size_t i = 1; i < a.predicted.size(); ++i) {
    INFO("C = " << i + 1);
    CHECK(a.predicted[i] >= 2.0 * static_cast<double>(i + 1) * exchange * (1 - 1e-12));
  }
  check_matches(a, expected(desc, c.comm, k, world_rank(), 1, 2.0 * exchange));
  require_same_everywhere(a);
}

TEST_CASE("collective: every rank gets the answer for the largest attention", "[head_chunk_choice]") {
  PlainComm c(query_desc());
  const double most = 0.004 * world_size();
  const double mine = 0.004 * (world_rank() + 1);  // rank N - 1 holds the largest
  const Answer a = choose(c.plan, nullptr, -1, mine, 1);
  INFO(a.message);
  REQUIRE(a.status == BASP_SUCCESS);
  CHECK(a.choice.attention_seconds == most);
  require_same_everywhere(a);
  const Answer local = choose(c.plan, nullptr, -1, most, 0);
  CHECK(a.predicted == local.predicted);
  CHECK(a.choice.num_chunks == local.choice.num_chunks);
  // Different for the rank's own attention (except on the rank that holds the maximum): the max was taken.
  if (world_rank() == 0) CHECK(choose(c.plan, nullptr, -1, mine, 0).predicted != a.predicted);
}

TEST_CASE("collective: a rank whose checks fail fails alone with its error, the others naming it",
          "[head_chunk_choice]") {
  PlainComm c(query_desc());
  const bool bad = world_rank() == 0;
  const Answer a = choose(c.plan, nullptr, -1, bad ? -1.0 : 0.001, 1);
  INFO(a.message);
  CHECK(a.status == BASP_ERROR_INVALID_ARGUMENT);
  if (bad) {
    CHECK(a.message.find("attention_seconds (-1)") != std::string::npos);
  } else {
    CHECK(a.message.find("world rank(s) 0 ") != std::string::npos);
  }
  // A NULL choice on one rank: its own NULL_POINTER, the others name it.
  std::vector<double> out(64);
  basp_head_chunk_choice_t choice = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  const basp_status_t st =
      basp_choose_head_chunks(c.plan, nullptr, -1, 0.001, 1, bad ? nullptr : &choice, out.data(), 64);
  INFO(basp_last_error());
  CHECK(st == (bad ? BASP_ERROR_NULL_POINTER : BASP_ERROR_INVALID_ARGUMENT));
  // The comm is usable after both: a collective call succeeds.
  CHECK(choose(c.plan, nullptr, -1, 0.001, 1).status == BASP_SUCCESS);
}

TEST_CASE("THD: num_tokens is the stream's T; ranks passing different T are a MISMATCH", "[head_chunk_choice]") {
  basp_plan_desc_t desc = query_desc();
  desc.layout = BASP_LAYOUT_THD;
  desc.seq_len = -1;
  desc.token_capacity = kSeq;
  PlainComm c(desc);
  Answer a = choose(c.plan, nullptr, -1, 0.001, 0);
  CHECK(a.status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(a.message.find("num_tokens (-1) is outside 0..token_capacity (8192)") != std::string::npos);
  a = choose(c.plan, nullptr, kSeq + 1, 0.001, 0);
  CHECK(a.status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(a.message.find("num_tokens (8193)") != std::string::npos);
  const Answer half = choose(c.plan, nullptr, kSeq / 2, 0.001, 0);
  const Answer full = choose(c.plan, nullptr, kSeq, 0.001, 0);
  REQUIRE(half.status == BASP_SUCCESS);
  REQUIRE(full.status == BASP_SUCCESS);
  CHECK(half.choice.seconds_one < full.choice.seconds_one);  // half the tokens, less to exchange
  const Answer differ = choose(c.plan, nullptr, world_rank() == 0 ? 1000 : 2000, 0.001, 1);
  INFO(differ.message);
  CHECK(differ.status == BASP_ERROR_MISMATCH);
  CHECK(differ.message.find("different token counts") != std::string::npos);
}

TEST_CASE("bad arguments: the status and a message naming the value", "[head_chunk_choice]") {
  PlainComm c(query_desc());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    double attention;
    int64_t tokens;
    int32_t collective;
    const char* part;
  };
  for (const Case& k : {Case{-0.5, -1, 0, "attention_seconds (-0.5)"}, Case{nan, -1, 0, "attention_seconds (nan)"},
                        Case{inf, -1, 0, "attention_seconds (inf)"}, Case{0.0, 5, 0, "num_tokens (5)"},
                        Case{0.0, -1, 2, "collective (2)"}}) {
    const Answer a = choose(c.plan, nullptr, k.tokens, k.attention, k.collective);
    INFO(a.message);
    CHECK(a.status == BASP_ERROR_INVALID_ARGUMENT);
    CHECK(a.message.find(k.part) != std::string::npos);
    CHECK(a.predicted[0] == kPoisonSeconds);
  }
  std::vector<double> out(4, kPoisonSeconds);
  basp_head_chunk_choice_t choice = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  CHECK(basp_choose_head_chunks(c.plan, nullptr, -1, 0.0, 0, nullptr, out.data(), 4) == BASP_ERROR_NULL_POINTER);
  CHECK(std::string(basp_last_error()).find("choice is NULL") != std::string::npos);
  CHECK(basp_choose_head_chunks(c.plan, nullptr, -1, 0.0, 0, &choice, nullptr, 4) == BASP_ERROR_NULL_POINTER);
  CHECK(std::string(basp_last_error()).find("predicted_seconds is NULL but capacity is 4") != std::string::npos);
  CHECK(basp_choose_head_chunks(c.plan, nullptr, -1, 0.0, 0, &choice, out.data(), -1) == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(basp_last_error()).find("capacity (-1)") != std::string::npos);
  basp_head_chunk_choice_t wrong = choice;
  wrong.magic = 0x1234;
  CHECK(basp_choose_head_chunks(c.plan, nullptr, -1, 0.0, 0, &wrong, out.data(), 4) == BASP_ERROR_BAD_STRUCT);
  CHECK(std::string(basp_last_error()).find("choice->magic") != std::string::npos);
  wrong = choice;
  wrong.size = 8;
  CHECK(basp_choose_head_chunks(c.plan, nullptr, -1, 0.0, 0, &wrong, out.data(), 4) == BASP_ERROR_BAD_STRUCT);
  CHECK(std::string(basp_last_error()).find("choice->size (8)") != std::string::npos);
  CHECK(out[0] == kPoisonSeconds);
  CHECK(basp_choose_head_chunks(nullptr, nullptr, -1, 0.0, 0, &choice, out.data(), 4) == BASP_ERROR_INVALID_HANDLE);
  // A plan of another comm.
  PlainComm other(query_desc());
  const Answer a = choose(c.plan, other.plan, -1, 0.0, 0);
  CHECK(a.status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(a.message.find("different comms") != std::string::npos);
  // A gather plan of another group size: a plan over groups of one rank on the same comm is not possible, so a
  // plan of fewer heads (another maximum) stands for plans that cannot pipeline together.
  basp_plan_desc_t fewer = query_desc();
  fewer.num_heads[0] = kHeads / 2;
  basp_plan_t half = nullptr;
  REQUIRE(basp_plan_create(c.comm, &fewer, &half) == BASP_SUCCESS);
  const Answer mixed = choose(c.plan, half, -1, 0.0, 0);
  CHECK(mixed.status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(mixed.message.find("maximum head chunks (" + std::to_string(kHeads / world_size()) + ")") != std::string::npos);
  basp_plan_destroy(half);
}

TEST_CASE("batch plans: the estimate of the group's traffic; collective over the world", "[head_chunk_choice]") {
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 1;  // plain plans: one group of every rank
  cfg.batch_capacity = kSeq;
  basp_comm_t comm = nullptr;
  REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) == BASP_SUCCESS);
  const basp_plan_desc_t desc = query_desc();
  // Groups of two ranks, one sequence each.
  const int32_t n = world_size();
  std::vector<int32_t> sizes(static_cast<size_t>(n / 2), 2), ranks(static_cast<size_t>(n)), docs(sizes.size(), 1);
  for (int32_t r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  basp_batch_t b = BASP_BATCH_INITIALIZER;
  b.num_groups = static_cast<int32_t>(sizes.size());
  b.num_docs = b.num_groups;
  b.group_sizes = sizes.data();
  b.ranks = ranks.data();
  b.group_docs = docs.data();
  basp_plan_t plan = nullptr;
  REQUIRE(basp_batch_plan_create(comm, &desc, &b, &plan) == BASP_SUCCESS);
  const double mine = 0.002 * (world_rank() + 1);
  const Answer a = choose(plan, nullptr, -1, mine, 1);
  INFO(a.message);
  REQUIRE(a.status == BASP_SUCCESS);
  CHECK(a.choice.attention_seconds == 0.002 * n);  // the world's maximum
  require_same_everywhere(a);
  if (one_node()) check_matches(a, expected(desc, comm, 2, world_rank() % 2, 1, 0.002 * n));
  // A plain plan of the comm (one group of every rank) with the batch plan: not one group.
  basp_plan_t plain = nullptr;
  REQUIRE(basp_plan_create(comm, &desc, &plain) == BASP_SUCCESS);
  const Answer mixed = choose(plan, plain, -1, 0.0, 0);
  CHECK(mixed.status == BASP_ERROR_INVALID_ARGUMENT);
  CHECK(mixed.message.find("the scatter plan is a batch plan and the gather plan a plain one") != std::string::npos);
  basp_plan_destroy(plain);
  basp_plan_destroy(plan);
  basp_comm_destroy(comm);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
