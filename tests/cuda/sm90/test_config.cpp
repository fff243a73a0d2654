// The sm90 family's config rules and name tokens (src/cuda/sm90/config.hpp and config.cpp).
#include <doctest/doctest.h>

#include <string>

#include "cuda/config_cases.hpp"
#include "cuda/sm90/config.hpp"

namespace fa::cuda::sm90 {

namespace {

using test::check_invalid;
using test::check_valid;

// The default build's d 128 kernel: two consumer warpgroups, 128 keys a stage, 2 stages.
constexpr KernelConfig kBase{DType::kBF16, 128, 128, 128, 12, false, false, false, 0, 0, 0, false,
                             false, kId, 2};

template <class Change>
KernelConfig base_with(Change change) {
  return test::with(kBase, change);
}

}  // namespace

// The kernel templates static_assert the same rules validate() reports, and launch.cuh checks the
// formula against tile.cuh's Tile::kSmemBytes: 1024 + (128 + 2 * 2 * 128) * 128 * 2 + 8 * (2 + 8)
// for the pipeline, and at d 128 O's staging buffer (128 * 128 * 2) where it fits in 227 KiB: at
// 2 stages, not at 3 (1024 + (128 + 2 * 3 * 128) * 128 * 2 + 8 * (2 + 12) = 230512; 32768 more
// would pass 232448); never at d 64 (1024 + (128 + 2 * 2 * 128) * 64 * 2 + 8 * (2 + 8)).
static_assert(fa::rules::common_ok(kBase) && rules::own(kBase) && !rules::knobs_unset(kBase));
static_assert(smem_bytes(kBase) == 164944 + 32768);
static_assert(smem_bytes(KernelConfig{DType::kBF16, 128, 128, 128, 12, false, false, false, 0, 0,
                                      0, false, false, kId, 3}) == 230512);
static_assert(smem_bytes(KernelConfig{DType::kBF16, 64, 128, 128, 12, false, false, false, 0, 0,
                                      0, false, false, kId, 2}) == 83024);
static_assert(!rules::own(KernelConfig{DType::kBF16, 128, 128, 128, 12, false, false, false, 0, 0,
                                       0, false, false, kId, 5}));
// V's columns: d_head where its stages fit (d 192 with 112 keys: 1024 + (128 + 2 * 2 * 112) *
// 192 * 2 + 80 = 222288), else 128 where they fit so (d 192 with 128 keys: 1024 + 128 * 192 * 2 +
// 2 * 128 * (192 + 128) * 2 + 80 = 214096, where 192 columns would take 246864).
constexpr KernelConfig kD192{DType::kBF16, 192, 128, 112, 12, false, false, false, 0, 0, 0, false,
                             false, kId, 2};
constexpr KernelConfig kD192V128{DType::kBF16, 192, 128, 128, 12, false, false, false, 0, 0, 0,
                                 false, false, kId, 2};
static_assert(v_cols(kD192) == 192 && smem_bytes(kD192) == 222288);
static_assert(v_cols(kD192V128) == 128 && smem_bytes(kD192V128) == 214096 &&
              pipe_bytes(kD192V128, 192) == 246864 && rules::own(kD192V128));
static_assert(v_cols(KernelConfig{DType::kBF16, 64, 128, 128, 12, false, false, false, 0, 0, 0,
                                  false, false, kId, 2}) == 64);
// Not at d 256: 96 keys would fit with V in 128 columns (1024 + 128 * 256 * 2 + 2 * 96 * 384 * 2
// + 80 = 214096) but stay 256 wide, over 227 KiB.
constexpr KernelConfig kD256B96{DType::kBF16, 256, 128, 96, 12, false, false, false, 0, 0, 0,
                                false, false, kId, 2};
static_assert(v_cols(kD256B96) == 256 && pipe_bytes(kD256B96, 128) == 214096 &&
              !rules::own(kD256B96));
// Consumers get 232 registers where S, P and O take 200 or fewer of them (d 128 with 128 keys:
// 96 + 64), else 240 (d 256; the V-128 tile); a 16-bit tile of two consumers whose S, P and O
// take more than 200 is refused (d 128 with 192 keys: 144 + 64 = 208; d 64 with 240: 180 + 32),
// 176 keys at d 128 (132 + 64 = 196) and d 256's 80 (60 + 128) stay.
static_assert(rules::consumer_regs(kBase) == 232 && rules::consumer_regs(kD192) == 232);
constexpr KernelConfig kD128B192{DType::kBF16, 128, 128, 192, 12, false, false, false, 0, 0, 0,
                                 false, false, kId, 2};
static_assert(rules::consumer_regs(kD128B192) == 240 && rules::accumulator_regs(kD128B192) == 208 &&
              rules::accumulator_limit(kD128B192) == 200 && !rules::own(kD128B192));
static_assert(rules::consumer_regs(kD192V128) == 240 && rules::consumer_regs(kD256B96) == 240);
static_assert(!rules::own(KernelConfig{DType::kBF16, 64, 128, 240, 12, false, false, false, 0, 0,
                                       0, false, false, kId, 2}));
static_assert(rules::own(KernelConfig{DType::kBF16, 128, 128, 176, 12, false, false, false, 0, 0,
                                      0, false, false, kId, 2}) &&
              rules::own(KernelConfig{DType::kBF16, 256, 128, 80, 12, false, false, false, 0, 0,
                                      0, false, false, kId, 2}));

// FP8 kernels (dtype E4M3: e4m3 Q, K and V): their own layout (config.hpp), 1024 + Q (128 * 128)
// + 2 stages of K (128 * 128) and of V transposed (16 groups of 8 rows, 8 * 128 + 16 bytes apart:
// 16640, a multiple of 128), the stages' end rounded up to 1024 (82432 -> 82944) + barriers 80,
// then O's buffer (128 * 128 * 2) and two raw V slots of 128 * 128 + 16 bytes; consumers on 224
// registers (S 64, P 16, O 64); at d 256 64 keys.
constexpr KernelConfig kFp8{DType::kE4M3, 128, 128, 128, 12, false, false, false, 0, 0, 0, false,
                            false, kId, 2, true, false, true};
static_assert(rules::own(kFp8) && rules::e4m3_ok(kFp8) && !rules::fp8_kv_tile(kFp8));
static_assert(e4m3_pipe_bytes(kFp8) == 1024 + 82944 + 80 &&
              e4m3_o_bytes(kFp8) == 32768 && e4m3_v_slots(kFp8) == 2 &&
              smem_bytes(kFp8) == e4m3_pipe_bytes(kFp8) + 32768 + 2 * 16400);
static_assert(rules::consumer_regs(kFp8) == 224 && rules::accumulator_regs(kFp8) == 144 &&
              !e4m3_images_only(kFp8));
constexpr KernelConfig kFp8D256{DType::kE4M3, 256, 128, 64, 12, false, false, false, 0, 0, 0,
                                false, false, kId, 2, true, false, true};
// d 256 with 64 keys: Q 32768 + 2 stages of K 16384 and V 32 groups of 4 * 128 + 16 (16896),
// 99328 (already a multiple of 1024), then O's buffer (128 * 256 * 2) and two raw slots.
static_assert(rules::own(kFp8D256) && rules::accumulator_regs(kFp8D256) == 168 &&
              !e4m3_images_only(kFp8D256) && e4m3_o_bytes(kFp8D256) == 65536 &&
              e4m3_v_slots(kFp8D256) == 2 &&
              smem_bytes(kFp8D256) == 1024 + 99328 + 80 + 65536 + 2 * (64 * 256 + 16));
// d 128 with 192 keys: S 96, P 24, O 64 = 184, over 176, so its producer only copies V's images
// (24 registers, consumers 240, no raw slots); 12 groups of V 12 * 128 + 16 bytes apart
// (16 * 1552 = 24832), the stages' end 115200 rounded up to 115712, then O's buffer.
constexpr KernelConfig kFp8B192{DType::kE4M3, 128, 128, 192, 12, false, false, false, 0, 0, 0,
                                false, false, kId, 2, true, false, true};
static_assert(rules::own(kFp8B192) && rules::accumulator_regs(kFp8B192) == 184 &&
              e4m3_images_only(kFp8B192) && e4m3_v_slots(kFp8B192) == 0 &&
              rules::consumer_regs(kFp8B192) == 240 &&
              smem_bytes(kFp8B192) == 1024 + 115712 + 80 + 32768);
// d 256 with 128 keys (FA3's FP8 tile): S, P and O take 64 + 16 + 128 = 208, so the producer
// only copies V's images (24 registers, consumers 240, no raw slots): 1024 + Q 32768 +
// 2 stages of K 32768 and V 32 groups of 8 * 128 + 16 (33280): 164864, a multiple of 1024, + 80,
// then O's buffer (128 * 256 * 2), 944 bytes under the 227 KiB (each V stage rounded up to 1024
// bytes left it 80 bytes over).
constexpr KernelConfig kFp8D256B128{DType::kE4M3, 256, 128, 128, 12, false, false, false, 0, 0,
                                    0, false, false, kId, 2, true, false, true};
static_assert(rules::own(kFp8D256B128) && e4m3_images_only(kFp8D256B128) &&
              rules::consumer_regs(kFp8D256B128) == 240 && e4m3_v_slots(kFp8D256B128) == 0 &&
              e4m3_o_bytes(kFp8D256B128) == 65536 &&
              smem_bytes(kFp8D256B128) == 1024 + 164864 + 80 + 65536 &&
              smem_bytes(kFp8D256B128) + 944 == kMaxSmemBytesAnyArch);

TEST_SUITE("family") {
  TEST_CASE("sm90 FP8 (E4M3) configs: two consumers at d 128 or 256, B_c a generated e4m3 N") {
    check_valid(kFp8);
    check_valid(test::with(kFp8, [](KernelConfig& c) { c.d_head = 256, c.B_c = 64; }));
    check_invalid(test::with(kFp8, [](KernelConfig& c) { c.d_head = 64; }),
                  "an E4M3 kernel needs n_warps = 12, d_head = 128 or 256, B_c = 64, 128, 192 "
                  "or 256 and room for two raw V slots, or none where S, P and O take over 176 "
                  "registers (V copied from its images) (got n_warps = 12, d_head = 64, B_c = "
                  "128, 2 slot(s))");
    check_invalid(test::with(kFp8, [](KernelConfig& c) { c.B_c = 96; }), "an E4M3 kernel needs");
    // 192 keys at 3 stages: 1024 + 16384 + 3 * 50176 + 112 = 168048 and O's buffer (no raw
    // slots). No e4m3 wgmma of 160 keys is generated.
    check_valid(kFp8B192);
    check_valid(test::with(kFp8B192, [](KernelConfig& c) { c.stages = 3; }));
    check_invalid(test::with(kFp8B192, [](KernelConfig& c) { c.B_c = 160; }),
                  "an E4M3 kernel needs");
    // 256 keys: S, P and O take 128 + 32 + 64 = 224, over the 216 even a copying producer leaves.
    check_invalid(test::with(kFp8, [](KernelConfig& c) { c.B_c = 256; }),
                  "need 224 accumulator registers");
    check_invalid(test::with(kFp8, [](KernelConfig& c) { c.n_warps = 16, c.B_r = 192; }),
                  "an E4M3 kernel needs");
    // d 256 with 128 keys copies V's images; at 3 stages it would not fit (233584 bytes).
    check_valid(kFp8D256B128);
    check_invalid(test::with(kFp8D256B128, [](KernelConfig& c) { c.stages = 3; }),
                  "shared memory of the E4M3 layout");
    CHECK(short_name(kFp8) == "(E4M3, 128, 128, 128, 12): sm90+stages_2+overlap+persistent");
    CHECK(test::parsed(short_name(kFp8)) == kFp8);
  }

  TEST_CASE("sm90 config rules: each accepts its good side and rejects its bad side") {
    check_valid(kBase);
    SUBCASE("its knobs on") {
      check_valid(base_with([](KernelConfig& c) { c.overlap = true; }));
      check_valid(base_with([](KernelConfig& c) { c.persistent = true; }));
      check_valid(base_with([](KernelConfig& c) { c.overlap = c.pingpong = c.persistent = true; }));
    }
    SUBCASE("ping-pong: exactly two consumer warpgroups") {
      check_valid(base_with([](KernelConfig& c) { c.pingpong = true; }));
      check_invalid(base_with([](KernelConfig& c) { c.pingpong = true, c.n_warps = 8, c.B_r = 64; }),
                    "pingpong");
      check_invalid(base_with([](KernelConfig& c) {
                      c.pingpong = true, c.n_warps = 16, c.B_r = 192, c.B_c = 64;
                    }),
                    "pingpong");
    }
    SUBCASE("warpgroups: a producer and 1 to 3 consumers of 64 rows each") {
      check_valid(base_with([](KernelConfig& c) { c.n_warps = 8, c.B_r = 64; }));
      check_valid(base_with([](KernelConfig& c) { c.n_warps = 16, c.B_r = 192, c.B_c = 64; }));
      check_invalid(base_with([](KernelConfig& c) { c.n_warps = 4, c.B_r = 0; }), "n_warps");
      check_invalid(base_with([](KernelConfig& c) { c.n_warps = 20, c.B_r = 256; }), "n_warps");
      check_invalid(base_with([](KernelConfig& c) { c.B_r = 64; }), "B_r");
    }
    SUBCASE("B_c: a wgmma N, a multiple of 16 in [64, 256]") {
      check_valid(base_with([](KernelConfig& c) { c.B_c = 176; }));
      check_invalid(base_with([](KernelConfig& c) { c.B_c = 48; }), "B_c");
      check_invalid(base_with([](KernelConfig& c) { c.B_c = 136; }), "B_c");
    }
    SUBCASE("stages: 2 to 4") {
      check_valid(base_with([](KernelConfig& c) { c.stages = 3; }));
      check_invalid(base_with([](KernelConfig& c) { c.stages = 1; }), "stages");
      check_invalid(base_with([](KernelConfig& c) { c.stages = 5; }), "stages");
    }
    SUBCASE("accumulators within the consumer's registers") {
      check_valid(base_with([](KernelConfig& c) { c.d_head = 256, c.B_c = 64; }));
      check_invalid(base_with([](KernelConfig& c) { c.d_head = 256; }), "registers");
      check_invalid(base_with([](KernelConfig& c) { c.B_c = 192; }), "over the 200 a tile");
      check_invalid(base_with([](KernelConfig& c) { c.n_warps = 16, c.B_r = 192, c.B_c = 192; }),
                    "registers");
    }
    SUBCASE("shared memory within 227 KiB") {
      check_invalid(base_with([](KernelConfig& c) { c.stages = 4; }),
                    "shared memory 1024 + (B_r * d_head + stages * B_c * (d_head + v_cols)) * 2 "
                    "+ barriers = 296080 bytes exceeds 232448 (v_cols = 128: d_head, or 128 where "
                    "that alone fits)");
      // d 192 with 128 keys holds V in 128 columns; with 144 neither layout fits.
      check_valid(kD192V128);
      check_invalid(test::with(kD192, [](KernelConfig& c) { c.B_c = 144; }), "v_cols = 192");
    }
  }

  TEST_CASE("sm90: the seed's filter keeps every config; canonical is the config itself") {
    KernelConfig const all = base_with([](KernelConfig& c) { c.overlap = c.pingpong = c.persistent = true; });
    CHECK(test::kept(kBase));
    CHECK(test::kept(base_with([](KernelConfig& c) { c.B_r = 64, c.n_warps = 8; })));
    CHECK(fa::canonical(all) == all);
  }

  TEST_CASE("sm90: names carry the tag, the stages and the knobs on, and round-trip") {
    CHECK(short_name(kBase) == "(BF16, 128, 128, 128, 12): sm90+stages_2");
    KernelConfig const overlapped = base_with([](KernelConfig& c) { c.overlap = true; });
    CHECK(short_name(overlapped) == "(BF16, 128, 128, 128, 12): sm90+stages_2+overlap");
    KernelConfig const all = base_with([](KernelConfig& c) { c.overlap = c.pingpong = c.persistent = true; });
    char const* all_name = "(BF16, 128, 128, 128, 12): sm90+stages_2+overlap+pingpong+persistent";
    CHECK(short_name(all) == all_name);
    CHECK(test::parsed(short_name(kBase)) == kBase);
    CHECK(test::parsed(short_name(overlapped)) == overlapped);
    CHECK(test::parsed(all_name) == all);
    KernelConfig c{};
    std::string error;
    CHECK_FALSE(parse_short_name("(BF16, 128, 128, 128, 12): sm90+stages_two", &c, &error));
    CHECK(error == "malformed stages token \"stages_two\" (expected stages_<N>)");
  }
}

}  // namespace fa::cuda::sm90
