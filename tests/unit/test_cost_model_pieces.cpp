// The cost model's per-piece term (plan/cost_model.h): a model without it predicts every exchange as before, the fit
// of per_piece from chunked timings whose answer is known (synthetic, and a small case worked out here by hand), its
// bad samples, and its text form.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "plan/cost_model.h"
#include "plan/exchange.h"
#include "plan/head_chunk_choice.h"
#include "plan/head_chunks.h"

using basp::plan::CostModel;
using basp::plan::CostSample;

namespace {

uint64_t bits(double v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// The truth the synthetic timings follow: not the defaults, so that a coefficient left at base's value cannot pass.
constexpr double kA0 = 31e-6, kA1 = 7e-6, kBetaNode = 1.0 / 3.3e9, kBetaNetwork = 1.0 / 11e9, kPerPiece = 2.5e-7;

// C chunks one after another of an exchange of k ranks: C alphas, the bytes once, the extra pieces.
double truth_seconds(int32_t k, double node, double network, int32_t chunks, double pieces) {
  return chunks * (kA0 + kA1 * (k - 1)) + kBetaNode * node + kBetaNetwork * network + kPerPiece * pieces * (chunks - 1);
}

// Whole exchanges where every coefficient matters, and the same exchanges in 2 and 8 chunks when `chunked`.
std::vector<CostSample> samples(bool chunked) {
  std::vector<CostSample> out;
  for (const int32_t k : {2, 4, 8}) {
    for (const double rows : {4.0, 256.0, 4096.0}) {
      const double pieces = rows * (k - 1);
      for (const double net : {0.0, 2e6}) {
        const double node = pieces * 4096.0;
        for (const int32_t c : {1, 2, 8}) {
          if (c > 1 && !chunked) continue;
          out.push_back({k, node, net, truth_seconds(k, node, net, c, pieces), c, pieces});
        }
      }
    }
  }
  return out;
}

void require_close(double got, double want, double rel) {
  INFO("got " << got << ", want " << want);
  REQUIRE(std::fabs(got - want) <= rel * std::fabs(want));
}

std::string fit_error(const std::vector<CostSample>& s, const CostModel& base) {
  try {
    basp::plan::fit_exchange(s, base);
  } catch (const basp::detail::Error& e) {
    CHECK(e.status() == BASP_ERROR_INVALID_ARGUMENT);
    return e.what();
  }
  FAIL("no error");
  return {};
}

}  // namespace

TEST_CASE("per-piece term: a model without it prices chunks as before", "[cost_model]") {
  CostModel m = basp::plan::default_cost_model();
  CHECK(m.per_piece == 0.0);
  for (const int32_t count : {1, 2, 3, 8, 64}) CHECK(m.chunk_piece_seconds(1e9, count) == 0.0);
  m.per_piece = 1e-7;
  CHECK(m.chunk_piece_seconds(1e9, 1) == 0.0);  // a whole exchange never pays it
  // 1,000 pieces in 4 chunks: 3,000 extra pieces in all, a quarter of them on each chunk.
  CHECK(m.chunk_piece_seconds(1000.0, 4) == Approx(1e-7 * 1000.0 * 3.0 / 4.0).epsilon(1e-15));
  // check_cost_model names it.
  m.per_piece = -2.0;
  REQUIRE_THROWS_WITH(basp::plan::check_cost_model(m, "model->"),
                      Catch::Contains("model->per_piece (-2) must be finite and >= 0"));
}

TEST_CASE("per-piece term: the head chunk choice adds it per chunk, and only it", "[cost_model]") {
  // One BSHD tensor of 8 heads of 64 bytes, S = 1024, K = 2: each rank sends its 512 tokens of 4 heads to its peer,
  // one piece per token (512 pieces, 512 * 4 * 64 bytes); max 4 chunks.
  basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_BYTE;
  d.seq_len = 1024;
  d.head_dim = 64;
  d.num_tensors = 1;
  d.num_heads[0] = 8;
  const basp::plan::ExchangePlan x = basp::plan::make_exchange_plan(basp::plan::validate_spec(d), 2, 0, 1);
  REQUIRE(basp::plan::max_head_chunks(x) == 4);
  for (const int32_t c : {1, 2, 4}) {
    CHECK(basp::plan::chunk_pieces_per_peer(x, 1024, {0, c}, basp::Direction::kScatter) == 512);
    CHECK(basp::plan::chunk_pieces_per_peer(x, 1024, {c - 1, c}, basp::Direction::kGather) == 512);
  }
  CostModel plain;
  plain.a0 = 1e-4;
  plain.beta_node = 1e-9;
  const basp::plan::GroupTraffic unit{1.0, 0.0};    // K - 1 = 1 node byte per per-peer byte
  const double whole = 1e-4 + 1e-9 * 512 * 4 * 64;  // one exchange: 231.072 us
  const double attention = 2.0 * whole;
  const basp::plan::HeadChunkChoice a = basp::plan::choose_head_chunks(x, x, 1024, plain, unit, attention);
  // By hand, plain model: C chunks each cost 1e-4 + 1e-9 * bytes / C (bytes = 131072); C = 2: S0 = 165.536 us,
  // max(A/2, S1 + 0) = 231.072 us, max(A/2, 0 + G0) = 231.072 us, G1 = 165.536 us: 793.216 us < 0.95 * 4 * whole.
  REQUIRE(a.predicted.size() == 4);
  CHECK(a.predicted[0] == Approx(4.0 * whole).epsilon(1e-12));
  CHECK(a.predicted[1] == Approx(2 * 165.536e-6 + 2 * 231.072e-6).epsilon(1e-9));
  CHECK(a.count > 1);
  // The same model with per_piece: chunk c of C pays 1e-7 * 512 * (C - 1) / C more. C = 2: 25.6 us per chunk,
  // S0 = G1 = 191.136 us, the middle steps still the attention: 844.416 us. C = 4: 38.4 us per chunk on
  // 1e-4 + 32.768 us: S = G = 171.168 us, A/4 = 115.536 us below every exchange step: 4 * 171.168 + 2 * 342.336 =
  // 1369.344 us.
  CostModel pieces = plain;
  pieces.per_piece = 1e-7;
  const basp::plan::HeadChunkChoice b = basp::plan::choose_head_chunks(x, x, 1024, pieces, unit, attention);
  CHECK(b.predicted[0] == a.predicted[0]);  // C = 1 is the same number, bit for bit
  CHECK(b.predicted[1] == Approx(2 * 191.136e-6 + 2 * 231.072e-6).epsilon(1e-9));
  CHECK(b.predicted[3] == Approx(1369.344e-6).epsilon(1e-9));
  CHECK(b.count == 2);  // 844.416 < 0.95 * 924.288 = 878.07: still worth 2, not 4
  // A per_piece large enough that no C gains 5 %: 3e-7 * 512 / 2 = 76.8 us per chunk at C = 2, S = G = 242.336 us,
  // now above A/2 too: 4 * 242.336 = 969.344 us > 0.95 * 924.288 us.
  pieces.per_piece = 3e-7;
  const basp::plan::HeadChunkChoice c = basp::plan::choose_head_chunks(x, x, 1024, pieces, unit, attention);
  CHECK(c.predicted[1] == Approx(4 * 242.336e-6).epsilon(1e-9));
  CHECK(c.count == 1);
  // A group whose traffic crosses a network link pays no piece term: the plain model's numbers, bit for bit.
  const basp::plan::GroupTraffic across{1.0, 0.5};
  const basp::plan::HeadChunkChoice linked = basp::plan::choose_head_chunks(x, x, 1024, pieces, across, attention);
  CHECK(linked.predicted == basp::plan::choose_head_chunks(x, x, 1024, plain, across, attention).predicted);
  CHECK(linked.count > 1);
}

TEST_CASE("per-piece fit: whole samples fit exactly as before, chunked ones give per_piece", "[cost_model]") {
  CostModel base = basp::plan::default_cost_model();
  base.per_piece = 9e-9;  // not the truth
  const CostModel whole = basp::plan::fit_exchange(samples(false), base);
  CHECK(bits(whole.per_piece) == bits(9e-9));  // no chunked sample: base's
  const CostModel m = basp::plan::fit_exchange(samples(true), base);
  // The exchange coefficients come from the whole samples alone: the same bits.
  CHECK(bits(m.a0) == bits(whole.a0));
  CHECK(bits(m.a1) == bits(whole.a1));
  CHECK(bits(m.beta_node) == bits(whole.beta_node));
  CHECK(bits(m.beta_network) == bits(whole.beta_network));
  require_close(m.a0, kA0, 1e-9);
  require_close(m.beta_node, kBetaNode, 1e-9);
  require_close(m.per_piece, kPerPiece, 1e-8);
  CHECK(m.source == "calibrated");
}

TEST_CASE("per-piece fit: a case worked out by hand; clamped at 0; undetermined keeps base's", "[cost_model]") {
  // Two whole samples of K = 2 fix a0 = 1e-3 and beta_node = 1e-9 (a1 stays base's 0: one K; no network bytes).
  CostModel base;
  const std::vector<CostSample> whole = {{2, 0.0, 0.0, 1e-3}, {2, 1e6, 0.0, 2e-3}};
  // Chunked: 2 chunks of the 1 MB exchange with 1,000 pieces, predicted without pieces 2e-3 + 1e-3 = 3e-3, measured
  // 4e-3: 1e-3 over 1,000 extra pieces; 4 chunks of it, predicted 5e-3, measured 8e-3: 3e-3 over 3,000.
  std::vector<CostSample> s = whole;
  s.push_back({2, 1e6, 0.0, 4e-3, 2, 1000.0});
  s.push_back({2, 1e6, 0.0, 8e-3, 4, 1000.0});
  CHECK(basp::plan::fit_exchange(s, base).per_piece == Approx(1e-6).epsilon(1e-12));
  // Disagreeing samples: relative least squares, x = sum(e r / t^2) / sum(e^2 / t^2) with e = extra pieces, r =
  // seconds above the prediction, t = seconds: (1000 * 2e-3 / 5e-3^2 + 3000 * 6e-3 / 11e-3^2) /
  // (1000^2 / 5e-3^2 + 3000^2 / 11e-3^2).
  s = whole;
  s.push_back({2, 1e6, 0.0, 5e-3, 2, 1000.0});
  s.push_back({2, 1e6, 0.0, 11e-3, 4, 1000.0});
  const double want =
      (1000 * 2e-3 / (5e-3 * 5e-3) + 3000 * 6e-3 / (11e-3 * 11e-3)) / (1e6 / (5e-3 * 5e-3) + 9e6 / (11e-3 * 11e-3));
  CHECK(basp::plan::fit_exchange(s, base).per_piece == Approx(want).epsilon(1e-12));
  // Chunks faster than the model's whole-exchange terms predict: 0, not negative.
  s = whole;
  s.push_back({2, 1e6, 0.0, 2.5e-3, 2, 1000.0});
  CHECK(basp::plan::fit_exchange(s, base).per_piece == 0.0);
  // Chunked samples without pieces cannot tell: base's.
  base.per_piece = 4e-8;
  s = whole;
  s.push_back({2, 1e6, 0.0, 4e-3, 2, 0.0});
  CHECK(basp::plan::fit_exchange(s, base).per_piece == 4e-8);
}

TEST_CASE("per-piece fit: bad samples and base are named", "[cost_model]") {
  std::vector<CostSample> s = {{2, 0.0, 0.0, 1e-3}, {2, 1e6, 0.0, 2e-3}, {2, 1e6, 0.0, 4e-3, 2, 1000.0}};
  s[2].chunks = 0;
  CHECK_THAT(fit_error(s, CostModel{}), Catch::Contains("samples[2].chunks (0) must be 1 or more"));
  s[2].chunks = 2;
  s[2].pieces = -1.0;
  CHECK_THAT(fit_error(s, CostModel{}), Catch::Contains("samples[2].pieces (-1) must be finite and 0 or more"));
  s[2].pieces = 1000.0;
  CHECK_THAT(fit_error({s[2]}, CostModel{}), Catch::Contains("all 1 samples are chunked"));
  CostModel bad;
  bad.per_piece = -1.0;
  CHECK_THAT(fit_error(s, bad), Catch::Contains("base.per_piece (-1)"));
}

TEST_CASE("per-piece term: the text form", "[cost_model]") {
  const std::string old_text =
      "basp-cost-model 1\na0 2e-05\na1 5e-06\nbeta_node 2e-10\nbeta_network 8e-11\nc2 0\nc1 0\nsource calibrated\n"
      "world_size 8\nnum_nodes 2\nnote\n";
  // A text without it (every text earlier versions wrote) reads as 0, and a model with 0 writes that text again.
  const CostModel m = basp::plan::import_cost_model(old_text);
  CHECK(m.per_piece == 0.0);
  CHECK(basp::plan::export_cost_model(m) == old_text);
  // With it: one line after c1, read back to the same bits.
  CostModel p = m;
  p.per_piece = 1.0 / 3.0 * 1e-7;
  const std::string text = basp::plan::export_cost_model(p);
  CHECK(text.find("c1 0\nper_piece 3.333333333333333e-08\nsource calibrated\n") != std::string::npos);
  CHECK(bits(basp::plan::import_cost_model(text).per_piece) == bits(p.per_piece));
  for (const char* bad : {"per_piece -1e-07\n", "per_piece x\n", "per_piece 1\nper_piece 2\n"}) {
    INFO(bad);
    CHECK_THROWS_WITH(basp::plan::import_cost_model(old_text + bad), Catch::Contains("per_piece"));
  }
}
