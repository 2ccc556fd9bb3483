// The check data: a fill verifies against itself, any damaged element is counted once, and the shard helpers
// describe the two forms of a tensor as the plan does.
#include <catch2/catch.hpp>

#include <vector>

#include "perf_check.h"

using namespace basp::bench;

namespace {

basp_rank_info_t info(int32_t k, int32_t l, int64_t seq_len, int64_t first_seq, int64_t num_seq) {
  basp_rank_info_t i = BASP_RANK_INFO_INITIALIZER;
  i.group_size = k;
  i.group_position = l;
  i.seq_len = seq_len;
  i.first_sequence = first_seq;
  i.num_sequences = num_seq;
  i.token_begin = l * seq_len / k;
  i.token_end = (l + 1) * seq_len / k;
  return i;
}

}  // namespace

TEST_CASE("shards: sequence-sharded holds a token range, head-sharded a head range", "[bench][check]") {
  const basp_rank_info_t i = info(4, 1, 16, 2, 3);
  const Shard seq = seq_shard(i, BASP_LAYOUT_BSHD, 2, 8, 12);
  CHECK(seq.token_begin == 4);
  CHECK(seq.tokens == 4);
  CHECK(seq.head_begin == 0);
  CHECK(seq.heads == 12);
  const Shard head = head_shard(i, BASP_LAYOUT_SBHD, 2, 8, 12);
  CHECK(head.token_begin == 0);
  CHECK(head.tokens == 16);
  CHECK(head.head_begin == 3);
  CHECK(head.heads == 3);
  CHECK(seq.bytes() == head.bytes());
  CHECK(seq.index(1, 2, 3, 4) == ((1 * 4 + 2) * 12 + 3) * 8 + 4);
  CHECK(head.index(1, 2, 0, 4) == ((2 * 3 + 1) * 3 + 0) * 8 + 4);
}

TEST_CASE("count_wrong finds every damaged element and only those", "[bench][check]") {
  for (int64_t elem : {1, 2, 4, 8}) {
    const Shard s = seq_shard(info(2, 0, 8, 0, 2), BASP_LAYOUT_BSHD, elem, 5, 6);
    std::vector<unsigned char> data(static_cast<size_t>(s.bytes()), kCheckPoison);
    CHECK(count_wrong(s, 1, 0, data.data()) > s.elements() * 9 / 10);  // poison is not the data
    fill_expected(s, 1, 0, data.data());
    CHECK(count_wrong(s, 1, 0, data.data()) == 0);
    CHECK(count_wrong(s, 2, 0, data.data()) > 0);  // another seed
    CHECK(count_wrong(s, 1, 3, data.data()) > 0);  // another tensor
    data[0] ^= 1;
    data[data.size() - 1] ^= 0x80;
    CHECK(count_wrong(s, 1, 0, data.data()) == 2);
  }
}

TEST_CASE("with K = 1 the two forms hold the same data in the same order", "[bench][check]") {
  const basp_rank_info_t i = info(1, 0, 6, 0, 2);
  for (basp_layout_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD}) {
    const Shard seq = seq_shard(i, layout, 2, 4, 3);
    const Shard head = head_shard(i, layout, 2, 4, 3);
    std::vector<unsigned char> a(static_cast<size_t>(seq.bytes())), b(a.size());
    fill_expected(seq, 9, 0, a.data());
    fill_expected(head, 9, 0, b.data());
    CHECK(a == b);
  }
}
