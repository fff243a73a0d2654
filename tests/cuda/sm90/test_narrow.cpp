// The sm90 family's narrow pairs (src/cuda/sm90/narrow.hpp): which pair a problem's head dims
// get, which tiles take none, which lists a registration refuses, which heads shift, which maps
// take boxes of exactly head_dim columns or run over a row's heads, and which chunks of O a
// bounded store writes.
#include <doctest/doctest.h>

#include <initializer_list>

#include "cuda/sm90/narrow.hpp"

namespace fa::cuda::sm90 {

namespace {

template <int kHeadDim, int kValueDim = kHeadDim, bool kIsFp8 = false>
struct FakeTile {
  static constexpr int kD = kHeadDim;
  static constexpr int kDv = kValueDim;
  static constexpr bool kFp8 = kIsFp8;
};

// The default build's pairs on its d 128 and d 192 kernels (tools/generate_kernels.py).
constexpr NarrowList kD128{3, {{80, 80}, {96, 96}, {112, 112}}};
constexpr NarrowList kD192{4, {{144, 144}, {160, 160}, {192, 128}, {176, 176}}};

}  // namespace

TEST_SUITE("family") {
  TEST_CASE("sm90 narrow pairs: the first pair holding both head dims, the cheapest") {
    using N = Narrow<FakeTile<128>, kD128>;
    CHECK(N::kCount == 3);
    CHECK(N::pick(72, 72) == 1);
    CHECK(N::pick(80, 80) == 1);
    CHECK(N::pick(88, 64) == 2);
    CHECK(N::pick(80, 96) == 2);  // the value head dim needs the wider pair
    CHECK(N::pick(112, 8) == 3);
    CHECK(N::pick(120, 120) == 0);  // past every pair: the kernel's own columns
    CHECK(N::pick(8, 8) == 1);
    using M = Narrow<FakeTile<192>, kD192>;
    CHECK(M::pick(136, 136) == 1);
    CHECK(M::pick(160, 128) == 2);   // (160, 160) and (192, 128) cost the same: the first
    CHECK(M::pick(176, 128) == 3);   // (192, 128) over (176, 176): 320 columns against 352
    CHECK(M::pick(176, 136) == 4);
    CHECK(M::pick(184, 128) == 3);
    CHECK(M::pick(184, 136) == 0);
  }

  TEST_CASE("sm90 narrow pairs: FP8 tiles and tiles holding V in fewer columns take none") {
    CHECK(Narrow<FakeTile<128, 128, true>, kD128>::kCount == 0);
    CHECK(Narrow<FakeTile<128, 128, true>, kD128>::pick(72, 72) == 0);
    CHECK(Narrow<FakeTile<192, 128>, kD192>::kCount == 0);
    CHECK(Narrow<FakeTile<192, 128>, kD192>::pick(144, 128) == 0);
    CHECK(Narrow<FakeTile<192>, NarrowList{}>::pick(144, 144) == 0);
  }

  TEST_CASE("sm90 narrow pairs: the lists a registration refuses") {
    CHECK(Narrow<FakeTile<128>, kD128>::valid());
    CHECK(Narrow<FakeTile<192>, kD192>::valid());
    CHECK(Narrow<FakeTile<64>, NarrowList{2, {{16, 8}, {48, 40}}}>::valid());
    CHECK_FALSE(Narrow<FakeTile<128>, NarrowList{1, {{72, 72}}}>::valid());     // qk % 16
    CHECK_FALSE(Narrow<FakeTile<128>, NarrowList{1, {{80, 76}}}>::valid());     // v % 8
    CHECK_FALSE(Narrow<FakeTile<128>, NarrowList{1, {{144, 144}}}>::valid());   // past the tile
    CHECK(Narrow<FakeTile<128>, NarrowList{1, {{128, 128}}}>::valid());   // its own width
    CHECK_FALSE(Narrow<FakeTile<128>, NarrowList{2, {{96, 96}, {80, 80}}}>::valid());  // order
  }

  TEST_CASE("sm90 narrow pairs: which K/V heads read 8 columns to the left") {
    // d 72 packed (32 heads, rows of 32 heads x 144 bytes): odd heads start 16 bytes into a
    // sector, even ones on one.
    int32_t const packed = column_shift_bits(0x10000, 2, 72, 80, 32 * 72, 512, 72, 32,
                                             512 * 32 * 72, 4);
    CHECK(packed == 2);
    CHECK(column_shift(packed, 0) == 0);
    CHECK(column_shift(packed, 1) == kShiftCols);
    CHECK(column_shift(packed, 30) == 0);
    CHECK(column_shift(packed, 31) == kShiftCols);
    // The same 16 bytes into an allocation: the even heads shift instead.
    int32_t const offset = column_shift_bits(0x10010, 2, 72, 80, 32 * 72, 512, 72, 32,
                                             512 * 32 * 72, 4);
    CHECK(offset == 3);
    CHECK(column_shift(offset, 0) == kShiftCols);
    CHECK(column_shift(offset, 1) == 0);
    // Heads 32 bytes apart (d 80, or rows padded to 80): every head as the first.
    CHECK(column_shift_bits(0x10010, 2, 72, 80, 32 * 80, 512, 80, 32, 512 * 32 * 80, 4) == 1);
    CHECK(column_shift_bits(0x10000, 2, 72, 80, 32 * 80, 512, 80, 32, 512 * 32 * 80, 4) == 0);
    // One head: its own start decides.
    CHECK(column_shift_bits(0x10010, 2, 72, 80, 2 * 72, 512, 72, 1, 512 * 2 * 72, 4) == 1);
    // No shift where it cannot align every row or does not fit the pair.
    CHECK(column_shift_bits(0x10000, 2, 72, 80, 3 * 72, 512, 72, 3, 512 * 3 * 72, 4) == 0);
    CHECK(column_shift_bits(0x10000, 2, 72, 80, 32 * 72, 1, 72, 32, 3 * 72, 4) == 0);
    CHECK(column_shift_bits(0x10000, 2, 72, 80, 32 * 72, 512, 72, 32, 3 * 72, 1) == 2);
    CHECK(column_shift_bits(0x10000, 2, 80, 80, 32 * 72, 512, 72, 32, 512 * 32 * 72, 4) == 0);
    CHECK(column_shift_bits(0x10000, 2, 120, 128, 32 * 120, 512, 120, 32, 512 * 32 * 120, 4) ==
          2);
    CHECK(column_shift_bits(0x10000, 1, 72, 80, 32 * 72, 512, 72, 32, 512 * 32 * 72, 4) == 0);
    CHECK(column_shift_bits(0x10008, 2, 72, 80, 32 * 72, 512, 72, 32, 512 * 32 * 72, 4) == 0);
    // Head-major caches (rows 144 bytes apart within a head): rows alternate, no shift.
    CHECK(column_shift_bits(0x10000, 2, 72, 80, 72, 300, 300 * 72, 2, 2 * 300 * 72, 2) == 0);
  }

  TEST_CASE("sm90 bounded stores: the chunks of O a tile writes") {
    CHECK(stored_chunks(0, 64) == 0xffu);
    CHECK(stored_chunks(0, 56) == 0x7fu);
    CHECK(stored_chunks(kShiftCols, 56) == 0xfeu);  // a shifted head: registers' chunks 1-7
    CHECK(stored_chunks(0, 256) == 0xffffffffu);
    CHECK(stored_chunks(kShiftCols, 248) == 0xfffffffeu);
    CHECK(stored_chunks(0, 8) == 0x1u);
    // Against the bounds as a loop over the chunks states them (skip a shifted head's first,
    // stop at head_dim_v), for every tile width, shift and value head dim that fits.
    for (int cols = 64; cols <= 256; cols += 64) {
      for (int shift : {0, kShiftCols}) {
        for (int dv = 8; dv + shift <= cols; dv += 8) {
          uint32_t expected = 0;
          for (int j = 0; j < cols / 8; ++j) {
            if (j == 0 && shift != 0) continue;
            if (8 * j - shift >= dv) break;
            expected |= 1u << j;
          }
          CAPTURE(cols);
          CAPTURE(shift);
          CAPTURE(dv);
          CHECK(stored_chunks(shift, dv) == expected);
        }
      }
    }
  }

  TEST_CASE("sm90 narrow pairs: which V maps run over a row's heads") {
    // 16-bit rows ending 16 bytes into a sector, heads side by side: the row's heads as one run.
    CHECK(flat_v_map(2, 56, 8, 56));
    CHECK(flat_v_map(2, 72, 2, 72));
    CHECK(flat_v_map(2, 8, 32, 8));
    // Rows ending on a sector, one head, heads apart (padded rows or head-major caches), e4m3.
    CHECK_FALSE(flat_v_map(2, 64, 8, 64));
    CHECK_FALSE(flat_v_map(2, 48, 8, 48));
    CHECK_FALSE(flat_v_map(2, 56, 1, 56));
    CHECK_FALSE(flat_v_map(2, 56, 8, 64));
    CHECK_FALSE(flat_v_map(2, 56, 8, 300 * 56));
    CHECK_FALSE(flat_v_map(1, 56, 8, 56));
  }

  TEST_CASE("sm90 narrow pairs: which Q and K maps take boxes of exactly head_dim columns") {
    // Rows ending inside a sector on a kernel whose rows are one box.
    CHECK(exact_qk_boxes(2, 8, 64));
    CHECK(exact_qk_boxes(2, 24, 64));
    CHECK(exact_qk_boxes(2, 56, 64));
    // Rows ending on a sector, rows of two or more boxes, e4m3.
    CHECK_FALSE(exact_qk_boxes(2, 48, 64));
    CHECK_FALSE(exact_qk_boxes(2, 64, 64));
    CHECK_FALSE(exact_qk_boxes(2, 56, 128));
    CHECK_FALSE(exact_qk_boxes(2, 72, 128));
    CHECK_FALSE(exact_qk_boxes(1, 56, 64));
  }
}

}  // namespace fa::cuda::sm90
