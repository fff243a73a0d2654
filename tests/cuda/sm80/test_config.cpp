// The mma.sync family's config rules, canonical form, autotune filter and name tokens
// (src/cuda/sm80/config.hpp and config.cpp).
#include <doctest/doctest.h>

#include <string>

#include "cuda/config_cases.hpp"
#include "cuda/sm80/config.hpp"

namespace fa::cuda::sm80 {

namespace {

using test::check_invalid;
using test::check_valid;
using test::kept;

// B_r 128, B_c 64, 4 warps, every copy knob on, Q and K loaded 2 fragments at a time, buffered.
constexpr KernelConfig kBase{DType::kBF16, 128, 128, 64, 4, true, true, true, 2, 2, 0, true, false};

template <class Change>
KernelConfig base_with(Change change) {
  return test::with(kBase, change);
}

}  // namespace

// The kernel templates static_assert the same rules validate() reports.
static_assert(fa::rules::common_ok(kBase) && rules::own(kBase) && !rules::knobs_unset(kBase));
static_assert(!rules::own(KernelConfig{DType::kBF16, 128, 80, 64, 4, true, true, true, 2, 2, 0,
                                       true, false}));
static_assert(smem_bytes(kBase) == (128 + 2 * 64) * 128 * 2);

TEST_SUITE("family") {
  TEST_CASE("mma.sync config rules: each accepts its good side and rejects its bad side") {
    check_valid(kBase);
    SUBCASE("n_warps: 4 or 8") {
      check_valid(base_with([](KernelConfig& c) { c.B_c = 32, c.n_warps = 8; }));
      check_invalid(base_with([](KernelConfig& c) { c.n_warps = 2; }), "n_warps");
      check_invalid(base_with([](KernelConfig& c) { c.n_warps = 16; }), "n_warps");
    }
    SUBCASE("B_r: whole m16 tiles per warp") {
      check_valid(base_with([](KernelConfig& c) { c.B_r = 64; }));
      check_invalid(base_with([](KernelConfig& c) { c.B_r = 64, c.n_warps = 8; }), "B_r");
      check_invalid(base_with([](KernelConfig& c) { c.B_r = 80; }), "B_r");
      check_invalid(base_with([](KernelConfig& c) { c.B_r = 0; }), "B_r");
    }
    SUBCASE("B_c: a multiple of 16") {
      check_valid(base_with([](KernelConfig& c) { c.B_c = 48; }));
      check_invalid(base_with([](KernelConfig& c) { c.B_c = 24; }), "B_c");
    }
    SUBCASE("B_r and B_c: multiples of the copy pass (threads / 8 rows)") {
      check_invalid(base_with([](KernelConfig& c) { c.B_c = 16, c.n_warps = 8; }), "threads / 8");
    }
    SUBCASE("load tiles: 0 or a power of two other than 1") {
      check_valid(base_with([](KernelConfig& c) {
        c.Q_mma_load_K_tiles = c.K_mma_load_K_tiles = c.V_mma_load_K_tiles = 0;
      }));
      check_valid(base_with([](KernelConfig& c) {
        c.Q_mma_load_K_tiles = c.K_mma_load_K_tiles = c.V_mma_load_K_tiles = 4;
        c.mma_double_buffer_loads = false;
      }));
      check_invalid(base_with([](KernelConfig& c) { c.Q_mma_load_K_tiles = c.K_mma_load_K_tiles = 1; }),
                    "Q_mma_load_K_tiles");
      check_invalid(base_with([](KernelConfig& c) { c.Q_mma_load_K_tiles = 0, c.K_mma_load_K_tiles = 6; }),
                    "K_mma_load_K_tiles");
      check_invalid(base_with([](KernelConfig& c) { c.V_mma_load_K_tiles = 3; }), "V_mma_load_K_tiles");
    }
    SUBCASE("load tiles fit the dimension, halved with double buffering") {
      auto tiles = [](int Q, int K, int B_c, int V, bool buffer) {
        return base_with([=](KernelConfig& c) {
          c.Q_mma_load_K_tiles = Q, c.K_mma_load_K_tiles = K, c.B_c = B_c;
          c.V_mma_load_K_tiles = V, c.mma_double_buffer_loads = buffer;
        });
      };
      check_valid(tiles(16, 16, 64, 0, false));
      check_invalid(tiles(16, 16, 64, 0, true), "room for a second buffer");
      check_valid(tiles(0, 8, 64, 0, true));
      check_invalid(tiles(0, 32, 64, 0, false), "K_mma_load_K_tiles");
      check_valid(tiles(2, 2, 32, 2, true));
      check_invalid(tiles(2, 2, 32, 4, true), "V_mma_load_K_tiles");
      check_valid(tiles(2, 2, 32, 4, false));
      SUBCASE("and divide it") {
        check_valid(tiles(2, 2, 48, 2, false));
        check_invalid(tiles(2, 2, 48, 4, false), "does not divide");
      }
    }
    SUBCASE("Q streams with K or is resident") {
      auto qk = [](int Q, int K) {
        return base_with([=](KernelConfig& c) {
          c.Q_mma_load_K_tiles = Q, c.K_mma_load_K_tiles = K, c.mma_double_buffer_loads = false;
        });
      };
      check_valid(qk(0, 4));
      check_invalid(qk(2, 4), "must be 0 or equal K_mma_load_K_tiles");
      check_invalid(qk(2, 0), "must be 0 or equal K_mma_load_K_tiles");
    }
    SUBCASE("shared memory within 227 KiB") {
      check_valid(base_with([](KernelConfig& c) { c.d_head = 256, c.B_c = 128; }));
      check_invalid(base_with([](KernelConfig& c) { c.d_head = 256, c.B_r = 256, c.B_c = 128, c.n_warps = 8; }),
                    "shared memory (B_r + 2 * B_c) * d_head * 2 = 262144 bytes exceeds 232448");
    }
  }

  TEST_CASE("mma.sync: the seed's autotune filter keeps its good side and drops its bad side") {
    auto knobs = [](int B_r, int B_c, int n_warps, int Q, int K) {
      return base_with([=](KernelConfig& c) {
        c.B_r = B_r, c.B_c = B_c, c.n_warps = n_warps, c.Q_mma_load_K_tiles = Q;
        c.K_mma_load_K_tiles = K;
      });
    };
    CHECK(kept(kBase));
    // 1. eager prefetch needs async copies.
    CHECK_FALSE(kept(base_with([](KernelConfig& c) { c.async_copy = false; })));
    CHECK(kept(base_with([](KernelConfig& c) { c.async_copy = c.eager_load_blocks = false; })));
    // 2. Q streams with K or not at all.
    CHECK_FALSE(kept(knobs(128, 64, 4, 2, 4)));
    CHECK(kept(knobs(64, 64, 4, 0, 4)));
    // 3a. B_r = 64 only with 4 warps.
    CHECK_FALSE(kept(knobs(64, 32, 8, 2, 2)));
    CHECK(kept(knobs(64, 32, 4, 2, 2)));
    // 3b. B_r = 64, B_c = 32 needs Q streamed; 3c. B_r = 64, B_c = 64 needs Q resident.
    CHECK_FALSE(kept(knobs(64, 32, 4, 0, 2)));
    CHECK_FALSE(kept(knobs(64, 64, 4, 2, 2)));
    CHECK(kept(knobs(64, 64, 4, 0, 2)));
    // 4. B_r = 128 needs Q streamed.
    CHECK_FALSE(kept(knobs(128, 64, 4, 0, 2)));
  }

  TEST_CASE("mma.sync: the seed's autotune space filters to 40 valid configs per dtype") {
    for (DType dtype : {DType::kFP16, DType::kBF16}) {
      int count = 0;
      for (int B_r : {64, 128})
        for (int B_c : {32, 64})
          for (int Q : {0, 2})
            for (int K : {0, 2})
              for (int V : {0, 2})
                for (bool buffer : {false, true})
                  for (bool opt : {false, true}) {
                    KernelConfig const c{dtype, 128, B_r, B_c, 4, true, true, true, Q, K, V, buffer, opt};
                    if (!kept(c)) continue;
                    ++count;
                    check_valid(c);
                  }
      CHECK(count == 40);
    }
  }

  TEST_CASE("mma.sync: canonical configs fold each no-op field, and only then") {
    auto loads = [](int B_r, int Q, int K, int V, bool buffer) {
      return base_with([=](KernelConfig& c) {
        c.B_r = B_r, c.Q_mma_load_K_tiles = Q, c.K_mma_load_K_tiles = K;
        c.V_mma_load_K_tiles = V, c.mma_double_buffer_loads = buffer;
      });
    };
    // K loaded d_head/8 fragments at a time with Q resident is the whole-block load ...
    CHECK(fa::canonical(loads(64, 0, 16, 2, false)) == loads(64, 0, 0, 2, false));
    // ... but not with Q streamed (it reloads Q every block), nor at a smaller granularity.
    CHECK(fa::canonical(loads(128, 16, 16, 2, false)) == loads(128, 16, 16, 2, false));
    CHECK(fa::canonical(loads(64, 0, 8, 2, false)) == loads(64, 0, 8, 2, false));
    // V loaded B_c/8 fragments at a time is the whole-block load; a smaller granularity is not.
    CHECK(fa::canonical(loads(128, 2, 2, 8, false)) == loads(128, 2, 2, 0, false));
    CHECK(fa::canonical(loads(128, 2, 2, 4, false)) == loads(128, 2, 2, 4, false));
    // Double buffering with a single load group in both GEMMs does nothing; with two it does.
    CHECK(fa::canonical(loads(64, 0, 0, 0, true)) == loads(64, 0, 0, 0, false));
    CHECK(fa::canonical(loads(64, 0, 0, 2, true)) == loads(64, 0, 0, 2, true));
    CHECK(fa::canonical(kBase) == kBase);
  }

  TEST_CASE("mma.sync: names carry the seed's tokens, the load token always, and round-trip") {
    CHECK(short_name(kBase) == "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles+buffer");
    KernelConfig const bare{DType::kFP16, 128, 64, 64, 4, true, false, false, 0, 0, 0, false, true};
    CHECK(short_name(bare) == "(FP16, 128, 64, 64, 4): async+load_0_0_0_tiles+opt_softmax");
    CHECK(test::parsed(short_name(kBase)) == kBase);
    CHECK(test::parsed(short_name(bare)) == bare);
    KernelConfig c{};
    std::string error;
    CHECK_FALSE(parse_short_name("(BF16, 128, 64, 64, 4): async", &c, &error));
    CHECK(error == "missing the load_<Q>_<K>_<V>_tiles feature");
    CHECK_FALSE(parse_short_name("(BF16, 128, 64, 64, 4): load_0_0_tiles", &c, &error));
    CHECK(error == "malformed load token \"load_0_0_tiles\" (expected load_<Q>_<K>_<V>_tiles)");
  }
}

}  // namespace fa::cuda::sm80
