// The sm90 family's tile order on the host (src/cuda/sm90/tile_order.hpp): the (batch, head)
// pairs a launch walks together.
#include "cuda/sm90/tile_order.hpp"

#include <doctest/doctest.h>

#include <initializer_list>

namespace fa::cuda::sm90 {
namespace {

// The FA-paper grid's point at `seqlen` with head dim `d` (hidden 2048, batch 16384 / seqlen)
// as the launcher sees it: B_r = 128 rows a query block.
ForwardParams paper_point(int seqlen, int d, bool causal) {
  ForwardParams p{};
  p.batch = 16384 / seqlen;
  p.heads_q = 2048 / d;
  p.q_heads_per_kv = 1;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.n_q_blocks = (seqlen + 127) / 128;
  p.masked = causal ? 1 : 0;
  return p;
}

}  // namespace

TEST_SUITE("family") {
  TEST_CASE("sm90 tile order: pairs walked together") {
    constexpr int64_t kGrid = 132;  // an H100's or H200's SMs
    SUBCASE("without a mask: the query heads of one K/V head") {
      for (int seqlen : {512, 16384}) {
        for (bool persistent : {false, true}) {
          ForwardParams p = paper_point(seqlen, 128, false);
          CHECK(head_group(p, 128, persistent, kGrid) == 1);
          p.q_heads_per_kv = 4;
          CHECK(head_group(p, 128, persistent, kGrid) == 4);
        }
      }
      ForwardParams p = paper_point(16384, 128, false);  // 1 x 16 pairs
      p.q_heads_per_kv = 32;
      CHECK(head_group(p, 128, true, kGrid) == 16);
    }
    SUBCASE("under a mask without persistent blocks: K and V within 24 MiB of L2") {
      // d 128, 16k keys: 8 MiB of K and V a head, 3 heads; 4 query heads per K/V head share it.
      ForwardParams p = paper_point(16384, 128, true);
      CHECK(head_group(p, 128, false, kGrid) == 3);
      p.q_heads_per_kv = 4;
      CHECK(head_group(p, 128, false, kGrid) == 12);
      // 512 keys: 256 KiB a head, 96 heads of the 512 pairs.
      CHECK(head_group(paper_point(512, 128, true), 128, false, kGrid) == 96);
    }
    SUBCASE("a persistent kernel under a mask, short sequences: L2's share, at least 4 rounds") {
      // 4 query blocks a pair: 132 pairs fill 4 rounds of 132 blocks (more than L2's 96).
      CHECK(head_group(paper_point(512, 128, true), 128, true, kGrid) == 132);
      // d 64 at 512: 128 KiB a head, L2 holds 192 pairs, more than 4 rounds need; rounded up to
      // 198, 6 rounds of 132 tiles.
      CHECK(head_group(paper_point(512, 64, true), 64, true, kGrid) == 198);
      // 16 query blocks (2048 keys), the longest grouped: ceil(4 * 132 / 16) = 33 > L2's 24.
      CHECK(head_group(paper_point(2048, 128, true), 128, true, kGrid) == 33);
    }
    SUBCASE("a persistent kernel's groups end where a pair of the snake's rounds does") {
      for (int64_t grid : {kGrid, int64_t(114), int64_t(78)}) {
        for (int seqlen : {256, 384, 640, 1024, 1500, 2048}) {
          for (int d : {64, 128, 256}) {
            for (int batch : {1, 3, 16, 64}) {
              ForwardParams p = paper_point(seqlen, d, true);
              p.batch = batch;
              int64_t const pairs = int64_t(p.batch) * p.heads_q;
              int64_t const group = head_group(p, d, true, grid);
              CAPTURE(grid);
              CAPTURE(seqlen);
              CAPTURE(d);
              CAPTURE(batch);
              CHECK(group >= 1);
              CHECK(group <= pairs);
              if (group < pairs) CHECK(group * p.n_q_blocks % (2 * grid) == 0);
            }
          }
        }
      }
    }
    SUBCASE("a persistent kernel under a mask, longer sequences: every pair") {
      CHECK(head_group(paper_point(4096, 128, true), 128, true, kGrid) == 4 * 16);
      CHECK(head_group(paper_point(16384, 256, true), 256, true, kGrid) == 8);
    }
    SUBCASE("under a mask, query rows at most a quarter of the keys: as without a mask") {
      // A chunked prefill: 4 x 512 query rows against 8k cached keys, 32 / 8 heads, causal.
      ForwardParams p = paper_point(512, 128, true);
      p.batch = 4;
      p.heads_q = 32;
      p.q_heads_per_kv = 4;
      p.seqlen_k = 8192;
      for (bool persistent : {false, true}) CHECK(head_group(p, 128, persistent, kGrid) == 4);
      p.seqlen_k = 2048;  // exactly a quarter
      CHECK(head_group(p, 128, true, kGrid) == 4);
      p.seqlen_k = 2047;  // one key short of the rule's bound: grouped for balance
      CHECK(head_group(p, 128, true, kGrid) == 128);
      CHECK(head_group(p, 128, false, kGrid) > 4);
    }
    SUBCASE("within [1, pairs]") {
      ForwardParams p = paper_point(512, 128, true);
      p.batch = 1;
      p.heads_q = 2;
      CHECK(head_group(p, 128, true, kGrid) == 2);
      p = paper_point(16384, 256, true);
      p.seqlen_k = 1 << 30;  // K and V far past L2
      CHECK(head_group(p, 256, false, kGrid) == 1);
    }
  }
}

}  // namespace fa::cuda::sm90
