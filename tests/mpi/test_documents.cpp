// basp_comm_assign_documents through the C ABI, under mpirun: every rank computes the assignment of every rank
// and all ranks agree (gathered and compared), the groups' answers fit together (each document once, the token
// ranges tile each stream by tensor_split's rule), and every error leaves the outputs exactly as they were.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "catch_mpi_session.h"
#include "mpi_world.h"

namespace {

using basp::test::world_rank;
using basp::test::world_size;

std::string last() { return basp_last_error(); }

struct Comm {
  basp_comm_t comm = nullptr;
  explicit Comm(int64_t micro_batch) {
    basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
    c.micro_batch = micro_batch;
    REQUIRE(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) == BASP_SUCCESS);
  }
  ~Comm() { basp_comm_destroy(comm); }
  basp_rank_info_t info(int32_t rank) const {
    basp_rank_info_t out = BASP_RANK_INFO_INITIALIZER;
    REQUIRE(basp_comm_query(comm, rank, 0, &out) == BASP_SUCCESS);
    return out;
  }
};

// The same batch on every rank: a function of the document index only, 1 .. 3000 tokens.
std::vector<int64_t> batch(int32_t num_docs) {
  std::vector<int64_t> out(static_cast<size_t>(num_docs));
  for (int32_t i = 0; i < num_docs; ++i) out[i] = 1 + (static_cast<int64_t>(i) * 7919 + 13) % 3000;
  return out;
}

// tensor_split's rule, spelled out: position j starts after j * (T / K) tokens and one more for each of the first
// T mod K positions before it.
int64_t split_begin(int64_t items, int64_t parts, int64_t j) {
  return j * (items / parts) + std::min(j, items % parts);
}

struct Answer {
  basp_doc_assignment_t a = BASP_DOC_ASSIGNMENT_INITIALIZER;
  std::vector<int32_t> docs;
  std::vector<int64_t> cu;
};

Answer assign(basp_comm_t comm, const std::vector<int64_t>& lengths, int32_t rank) {
  Answer out;
  const auto d = static_cast<int32_t>(lengths.size());
  out.docs.assign(static_cast<size_t>(d), -7);
  out.cu.assign(static_cast<size_t>(d) + 1, -7);
  REQUIRE(basp_comm_assign_documents(comm, lengths.data(), d, 0, rank, &out.a, out.docs.data(), out.cu.data(), d) ==
          BASP_SUCCESS);
  out.docs.resize(static_cast<size_t>(out.a.num_docs));
  out.cu.resize(static_cast<size_t>(out.a.num_docs) + 1);
  return out;
}

// One rank's answer as a fixed-size record of int64 (the struct's fields, the docs and cu_seqlens, -1 padded).
std::vector<int64_t> record(const Answer& x, int32_t num_docs) {
  const basp_doc_assignment_t& a = x.a;
  int64_t imbalance_bits = 0;
  std::memcpy(&imbalance_bits, &a.imbalance, sizeof(double));
  std::vector<int64_t> out = {a.rank,          a.group_index,      a.group_position, a.group_size, a.num_docs,
                              a.stream_tokens, a.token_begin,      a.token_end,      a.first_doc,  a.first_doc_offset,
                              a.max_seqlen,    a.max_group_tokens, imbalance_bits};
  out.insert(out.end(), x.docs.begin(), x.docs.end());
  out.insert(out.end(), x.cu.begin(), x.cu.end());
  out.resize(13 + 2 * static_cast<size_t>(num_docs) + 1, -1);
  return out;
}

}  // namespace

TEST_CASE("documents: every rank computes every rank's answer, and all agree", "[documents]") {
  const int32_t n = world_size();
  for (const int64_t micro_batch : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{n}, int64_t{2} * n}) {
    Comm c(micro_batch);
    const basp_rank_info_t me = c.info(-1);
    const int32_t g = me.num_groups;
    const int32_t k = me.group_size;
    for (const int32_t num_docs : {0, 1, 5, 37}) {
      INFO("B " << micro_batch << " G " << g << " K " << k << " documents " << num_docs);
      const std::vector<int64_t> lengths = batch(num_docs);
      std::vector<int64_t> mine;
      std::vector<int> seen(static_cast<size_t>(num_docs), 0);
      for (int32_t r = 0; r < n; ++r) {
        const Answer x = assign(c.comm, lengths, r);
        const basp_rank_info_t info = c.info(r);
        CHECK(x.a.rank == r);
        CHECK(x.a.group_index == info.group_index);
        CHECK(x.a.group_position == info.group_position);
        CHECK(x.a.group_size == k);
        CHECK(x.a.size == sizeof(basp_doc_assignment_t));
        CHECK(x.a.magic == BASP_DOC_ASSIGNMENT_MAGIC);
        CHECK(x.a.stream_tokens == x.cu.back());
        CHECK(x.a.token_begin == split_begin(x.a.stream_tokens, k, x.a.group_position));
        CHECK(x.a.token_end == split_begin(x.a.stream_tokens, k, x.a.group_position + 1));
        for (size_t j = 0; j < x.docs.size(); ++j) CHECK(x.cu[j + 1] - x.cu[j] == lengths[x.docs[j]]);
        if (x.a.group_position == 0) {
          for (const int32_t d : x.docs) seen[d]++;
        }
        std::vector<int64_t> rec = record(x, num_docs);
        mine.insert(mine.end(), rec.begin(), rec.end());
        if (r == world_rank()) {
          // -1 names the calling rank.
          CHECK(record(assign(c.comm, lengths, -1), num_docs) == rec);
        }
      }
      for (const int count : seen) CHECK(count == 1);  // each document in exactly one group
      std::vector<int64_t> all(mine.size() * static_cast<size_t>(n));
      MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
                    MPI_INT64_T, MPI_COMM_WORLD);
      for (int32_t other = 0; other < n; ++other) {
        const std::vector<int64_t> theirs(all.begin() + static_cast<std::ptrdiff_t>(mine.size()) * other,
                                          all.begin() + static_cast<std::ptrdiff_t>(mine.size()) * (other + 1));
        CHECK(theirs == mine);
      }
    }
  }
}

TEST_CASE("documents: a hand-worked batch through the C ABI", "[documents]") {
  const int32_t n = world_size();
  // {5, 3, 3, 2} over two groups: group 0 = {0, 3} (7 tokens), group 1 = {1, 2} (6); imbalance 7 / 6.5.
  if (n % 2 != 0) {
    SUCCEED("needs an even world for two groups");
    return;
  }
  Comm c(2);
  const std::vector<int64_t> lengths = {5, 3, 3, 2};
  for (int32_t r = 0; r < n; ++r) {
    const Answer x = assign(c.comm, lengths, r);
    REQUIRE(x.a.num_docs == 2);
    if (x.a.group_index == 0) {
      CHECK(x.docs == std::vector<int32_t>{0, 3});
      CHECK(x.cu == std::vector<int64_t>{0, 5, 7});
      CHECK(x.a.max_seqlen == 5);
    } else {
      CHECK(x.docs == std::vector<int32_t>{1, 2});
      CHECK(x.cu == std::vector<int64_t>{0, 3, 6});
      CHECK(x.a.max_seqlen == 3);
    }
    CHECK(x.a.max_group_tokens == 7);
    CHECK(x.a.imbalance == Approx(7.0 / 6.5));
  }
}

namespace {

// Outputs filled with a poison before each failing call, compared after it.
struct Poisoned {
  basp_doc_assignment_t a = BASP_DOC_ASSIGNMENT_INITIALIZER;
  std::vector<int32_t> docs = std::vector<int32_t>(8, -777);
  std::vector<int64_t> cu = std::vector<int64_t>(9, -888);
  Poisoned() {
    // Everything after the header: the library must not write a byte of it on error.
    auto* bytes = reinterpret_cast<unsigned char*>(&a);
    std::memset(bytes + offsetof(basp_doc_assignment_t, rank), 0xab, sizeof(a) - offsetof(basp_doc_assignment_t, rank));
  }
  bool untouched() const {
    const Poisoned fresh;
    return std::memcmp(&a, &fresh.a, sizeof(a)) == 0 && docs == fresh.docs && cu == fresh.cu;
  }
};

}  // namespace

TEST_CASE("documents: the C ABI's errors are named and write nothing", "[documents]") {
  const int32_t n = world_size();
  Comm c(1);  // one group of N: all documents in group 0
  const std::vector<int64_t> lengths = {4, 9, 2};
  const auto call = [&](Poisoned& p, basp_comm_t comm, const int64_t* len, int32_t num_docs, int64_t capacity,
                        int32_t rank, int32_t max_docs) {
    return basp_comm_assign_documents(comm, len, num_docs, capacity, rank, &p.a, p.docs.data(), p.cu.data(), max_docs);
  };
  {
    Poisoned p;
    CHECK(call(p, nullptr, lengths.data(), 3, 0, -1, 8) == BASP_ERROR_INVALID_HANDLE);
    CHECK_THAT(last(), Catch::Contains("basp_comm_assign_documents: comm is NULL"));
    CHECK(p.untouched());
  }
  {
    CHECK(basp_comm_assign_documents(c.comm, lengths.data(), 3, 0, -1, nullptr, nullptr, nullptr, 0) ==
          BASP_ERROR_NULL_POINTER);
    CHECK_THAT(last(), Catch::Contains("assignment is NULL"));
  }
  {
    Poisoned p;
    CHECK(call(p, c.comm, nullptr, 3, 0, -1, 8) == BASP_ERROR_NULL_POINTER);
    CHECK_THAT(last(), Catch::Contains("lengths is NULL but num_docs is 3"));
    CHECK(p.untouched());
  }
  {
    // Too small by one: the message names the count needed.
    Poisoned p;
    CHECK(call(p, c.comm, lengths.data(), 3, 0, -1, 2) == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last(), Catch::Contains("max_docs (2) is smaller than the 3 documents of group 0") &&
                           Catch::Contains("docs needs 3 entries and cu_seqlens 4"));
    CHECK(p.untouched());
    // Only cu_seqlens asked for: the same check.
    CHECK(basp_comm_assign_documents(c.comm, lengths.data(), 3, 0, -1, &p.a, nullptr, p.cu.data(), 0) ==
          BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last(), Catch::Contains("max_docs (0) is smaller than the 3 documents"));
    CHECK(p.untouched());
  }
  {
    Poisoned p;
    p.a.magic = 0xdeadbeef;
    const Poisoned before = p;
    CHECK(call(p, c.comm, lengths.data(), 3, 0, -1, 8) == BASP_ERROR_BAD_STRUCT);
    CHECK_THAT(last(), Catch::Contains("assignment->magic"));
    CHECK(std::memcmp(&p.a, &before.a, sizeof(p.a)) == 0);
    CHECK((p.docs == before.docs && p.cu == before.cu));
    p.a.magic = BASP_DOC_ASSIGNMENT_MAGIC;
    p.a.size = 3;
    CHECK(call(p, c.comm, lengths.data(), 3, 0, -1, 8) == BASP_ERROR_BAD_STRUCT);
    CHECK_THAT(last(), Catch::Contains("assignment->size (3)"));
    CHECK((p.docs == before.docs && p.cu == before.cu));
  }
  const struct {
    std::vector<int64_t> lengths;
    int32_t num_docs;
    int64_t capacity;
    int32_t rank;
    std::string message;
  } cases[] = {
      {{4, 9, 0}, 3, 0, -1, "lengths[2] (0) must be positive"},
      {{4, -9, 2}, 3, 0, -1, "lengths[1] (-9) must be positive"},
      {{4, 9, 2}, -1, 0, -1, "num_docs (-1)"},
      {{4, 9, 2}, 3, 8, -1, "document 1 (9 tokens) is longer than the capacity (8)"},
      {{4, 9, 2}, 3, 14, -1, "group 0 would hold 15 tokens, more than the capacity (14)"},
      {{4, 9, 2}, 3, -3, -1, "capacity (-3)"},
      {{4, 9, 2}, 3, 0, n, "rank (" + std::to_string(n) + ") is outside 0.." + std::to_string(n - 1)},
      {{4, 9, 2}, 3, 0, -2, "rank (-2) is outside"},
  };
  for (const auto& k : cases) {
    INFO(k.message);
    Poisoned p;
    CHECK(call(p, c.comm, k.lengths.data(), k.num_docs, k.capacity, k.rank, 8) == BASP_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(last(), Catch::Contains(k.message));
    CHECK(p.untouched());
  }
  // A destroyed comm is no comm.
  basp_comm_t gone = nullptr;
  {
    Comm other(1);
    gone = other.comm;
  }
  Poisoned p;
  CHECK(call(p, gone, lengths.data(), 3, 0, -1, 8) == BASP_ERROR_INVALID_HANDLE);
  CHECK(p.untouched());
}

TEST_CASE("documents: optional outputs, empty batches and larger structs", "[documents]") {
  Comm c(1);
  const std::vector<int64_t> lengths = {4, 9, 2};
  // Neither array: max_docs is not read.
  basp_doc_assignment_t a = BASP_DOC_ASSIGNMENT_INITIALIZER;
  REQUIRE(basp_comm_assign_documents(c.comm, lengths.data(), 3, 0, -1, &a, nullptr, nullptr, -5) == BASP_SUCCESS);
  CHECK(a.num_docs == 3);
  CHECK(a.stream_tokens == 15);
  // Only docs, exactly as many entries as needed (cu_seqlens would need one more).
  std::vector<int32_t> docs(3, -1);
  REQUIRE(basp_comm_assign_documents(c.comm, lengths.data(), 3, 0, -1, &a, docs.data(), nullptr, 3) == BASP_SUCCESS);
  CHECK(docs == std::vector<int32_t>{0, 1, 2});
  // No document: lengths may be NULL; cu_seqlens gets its single 0.
  int64_t cu[2] = {-9, -9};
  REQUIRE(basp_comm_assign_documents(c.comm, nullptr, 0, 0, -1, &a, nullptr, cu, 0) == BASP_SUCCESS);
  CHECK((cu[0] == 0 && cu[1] == -9));
  CHECK((a.num_docs == 0 && a.stream_tokens == 0 && a.first_doc == -1 && a.imbalance == 1.0));
  // A caller built against a later, larger struct: this library writes its own fields and nothing past them.
  struct Larger {
    basp_doc_assignment_t a;
    unsigned char tail[32];
  } larger;
  std::memset(&larger, 0xcd, sizeof(larger));
  larger.a.size = sizeof(larger);
  larger.a.magic = BASP_DOC_ASSIGNMENT_MAGIC;
  larger.a.version = BASP_DOC_ASSIGNMENT_VERSION;
  REQUIRE(basp_comm_assign_documents(c.comm, lengths.data(), 3, 0, -1, &larger.a, nullptr, nullptr, 0) == BASP_SUCCESS);
  CHECK(larger.a.size == sizeof(larger));
  CHECK(larger.a.stream_tokens == 15);
  CHECK(std::all_of(larger.tail, larger.tail + sizeof(larger.tail), [](unsigned char b) { return b == 0xcd; }));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  return basp::test::run_catch_session_on_all_ranks(argc, argv);
}
