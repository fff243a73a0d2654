// The kernel-config rules, the seed's autotune filter, and short names, through the C API.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "flashattn.h"

namespace {

struct Knobs {
  int32_t dtype = FA_DTYPE_BF16, d_head = 128, B_r = 128, B_c = 64, n_warps = 4;
  int32_t async_copy = 1, eager = 1, swizzled = 1, Q = 2, K = 2, V = 0, buffer = 1, opt = 0;
  int32_t family = FA_FAMILY_MMA_SYNC, stages = 0, overlap = 0, pingpong = 0, persistent = 0;
};

// The sm90 family's knobs, from its default build's d 128 kernel.
Knobs sm90(Knobs k) {
  k.family = FA_FAMILY_SM90;
  k.async_copy = k.eager = k.swizzled = k.Q = k.K = k.V = k.buffer = k.opt = 0;
  return k;
}

fa_kernel_config make(Knobs const& k) {
  fa_kernel_config c;
  REQUIRE(fa_kernel_config_init(&c) == FA_STATUS_SUCCESS);
  c.dtype = k.dtype;
  c.d_head = k.d_head;
  c.B_r = k.B_r;
  c.B_c = k.B_c;
  c.n_warps = k.n_warps;
  c.async_copy = k.async_copy;
  c.eager_load_blocks = k.eager;
  c.swizzled = k.swizzled;
  c.Q_mma_load_K_tiles = k.Q;
  c.K_mma_load_K_tiles = k.K;
  c.V_mma_load_K_tiles = k.V;
  c.mma_double_buffer_loads = k.buffer;
  c.optimized_softmax = k.opt;
  c.family = k.family;
  c.stages = k.stages;
  c.overlap = k.overlap;
  c.pingpong = k.pingpong;
  c.persistent = k.persistent;
  return c;
}

std::string name_of(fa_kernel_config const& c) {
  char buf[128];
  REQUIRE(fa_kernel_config_name(&c, buf, sizeof buf, nullptr) == FA_STATUS_SUCCESS);
  return buf;
}

// Valid configs pass; each invalid one fails with a message naming the rule's field.
void check_valid(Knobs const& k) {
  fa_kernel_config c = make(k);
  INFO(name_of(c));
  CHECK(fa_kernel_config_validate(&c) == FA_STATUS_SUCCESS);
  CHECK(std::string(fa_last_error_detail()).empty());
}
void check_invalid(Knobs const& k, char const* field) {
  fa_kernel_config c = make(k);
  INFO("field: " << std::string(field));
  CHECK(fa_kernel_config_validate(&c) == FA_STATUS_INVALID_KERNEL_CONFIG);
  CHECK(std::string(fa_last_error_detail()).find(field) != std::string::npos);
}

bool kept(Knobs const& k) {
  fa_kernel_config c = make(k);
  int keep = -1;
  REQUIRE(fa_kernel_config_autotune_filter(&c, &keep) == FA_STATUS_SUCCESS);
  REQUIRE((keep == 0 || keep == 1));
  if (!keep) CHECK(std::strlen(fa_last_error_detail()) > 0);  // the rule that dropped it
  return keep == 1;
}

}  // namespace

TEST_SUITE("core") {

TEST_CASE("validity rules: each rule accepts its good side and rejects its bad side") {
  check_valid(Knobs{});

  SUBCASE("dtype") {
    check_valid({.dtype = FA_DTYPE_FP16});
    check_invalid({.dtype = FA_DTYPE_FP32}, "dtype");
    check_invalid({.dtype = 0}, "dtype");
  }
  SUBCASE("d_head: a multiple of 64 in [64, 256]") {
    check_valid({.d_head = 64});
    check_valid({.d_head = 256, .B_c = 32});
    check_invalid({.d_head = 96}, "d_head");
    check_invalid({.d_head = 0}, "d_head");
    check_invalid({.d_head = 320}, "d_head");
  }
  SUBCASE("n_warps: 4 or 8") {
    check_valid({.B_c = 32, .n_warps = 8});
    check_invalid({.n_warps = 2}, "n_warps");
    check_invalid({.n_warps = 16}, "n_warps");
  }
  SUBCASE("B_r: whole m16 tiles per warp") {
    check_valid({.B_r = 64});
    check_invalid({.B_r = 64, .n_warps = 8}, "B_r");
    check_invalid({.B_r = 80}, "B_r");
    check_invalid({.B_r = 0}, "B_r");
  }
  SUBCASE("B_c: a multiple of 16") {
    check_valid({.B_c = 48});
    check_invalid({.B_c = 24}, "B_c");
    check_invalid({.B_c = -16}, "B_c");
  }
  SUBCASE("B_r and B_c: multiples of the copy pass (threads / 8 rows)") {
    check_valid({.B_c = 32, .n_warps = 8});
    check_invalid({.B_c = 16, .n_warps = 8}, "threads / 8");
  }
  SUBCASE("load tiles: 0 or a power of two other than 1") {
    check_valid({.Q = 0, .K = 0, .V = 0});
    check_valid({.Q = 4, .K = 4, .V = 4, .buffer = 0});
    check_invalid({.Q = 1, .K = 1}, "Q_mma_load_K_tiles");
    check_invalid({.Q = 0, .K = 6}, "K_mma_load_K_tiles");
    check_invalid({.V = 3}, "V_mma_load_K_tiles");
    check_invalid({.Q = -2, .K = -2}, "[0, 65536]");
  }
  SUBCASE("load tiles fit the dimension, halved with double buffering") {
    check_valid({.Q = 16, .K = 16, .buffer = 0});
    check_invalid({.Q = 16, .K = 16, .buffer = 1}, "Q_mma_load_K_tiles");
    check_valid({.Q = 0, .K = 8, .buffer = 1});
    check_invalid({.Q = 0, .K = 32, .buffer = 0}, "K_mma_load_K_tiles");
    check_valid({.B_c = 32, .V = 2, .buffer = 1});
    check_invalid({.B_c = 32, .V = 4, .buffer = 1}, "V_mma_load_K_tiles");
    check_valid({.B_c = 32, .V = 4, .buffer = 0});
  }
  SUBCASE("load tiles divide the dimension") {
    check_valid({.B_c = 48, .V = 2, .buffer = 0});
    check_invalid({.B_c = 48, .V = 4, .buffer = 0}, "V_mma_load_K_tiles");
  }
  SUBCASE("Q streams with K or is resident") {
    check_valid({.Q = 0, .K = 4, .buffer = 0});
    check_invalid({.Q = 2, .K = 4, .buffer = 0}, "Q_mma_load_K_tiles");
    check_invalid({.Q = 2, .K = 0}, "Q_mma_load_K_tiles");
  }
  SUBCASE("fields bounded before any arithmetic (no overflow on wild values)") {
    check_invalid({.B_c = 1 << 30}, "[0, 65536]");
    check_invalid({.Q = 0, .K = 1 << 29}, "[0, 65536]");
    check_invalid({.d_head = -128}, "[0, 65536]");
  }
  SUBCASE("shared memory within 227 KiB") {
    check_valid({.d_head = 256, .B_r = 128, .B_c = 128});
    check_invalid({.d_head = 256, .B_r = 256, .B_c = 128, .n_warps = 8}, "shared memory");
  }
}

TEST_CASE("sm90 family rules: each accepts its good side and rejects its bad side") {
  Knobs const base = sm90({.B_r = 128, .B_c = 128, .n_warps = 12, .stages = 2});
  check_valid(base);
  auto with = [&](auto change) {
    Knobs k = base;
    change(k);
    return k;
  };
  SUBCASE("family: 0 or 1") {
    check_invalid(with([](Knobs& k) { k.family = 2; }), "family");
    check_invalid(with([](Knobs& k) { k.family = -1; }), "family");
  }
  SUBCASE("the mma.sync knobs are 0, and stages is an sm90 knob") {
    check_invalid(with([](Knobs& k) { k.swizzled = 1; }), "mma.sync knobs");
    check_invalid(with([](Knobs& k) { k.V = 2; }), "mma.sync knobs");
    check_invalid(Knobs{.stages = 2}, "stages");
    check_invalid(Knobs{.overlap = 1}, "overlap");
    check_invalid(Knobs{.pingpong = 1}, "pingpong");
    check_invalid(Knobs{.persistent = 1}, "persistent");
    check_valid(with([](Knobs& k) { k.overlap = 1; }));
    check_valid(with([](Knobs& k) { k.persistent = 1; }));
    check_valid(with([](Knobs& k) { k.overlap = k.pingpong = k.persistent = 1; }));
  }
  SUBCASE("ping-pong: exactly two consumer warpgroups") {
    check_valid(with([](Knobs& k) { k.pingpong = 1; }));
    check_invalid(with([](Knobs& k) { k.pingpong = 1, k.n_warps = 8, k.B_r = 64; }), "pingpong");
    check_invalid(with([](Knobs& k) { k.pingpong = 1, k.n_warps = 16, k.B_r = 192, k.B_c = 64; }),
                  "pingpong");
  }
  SUBCASE("warpgroups: a producer and 1 to 3 consumers of 64 rows each") {
    check_valid(with([](Knobs& k) { k.n_warps = 8, k.B_r = 64; }));
    check_valid(with([](Knobs& k) { k.n_warps = 16, k.B_r = 192, k.B_c = 64; }));
    check_invalid(with([](Knobs& k) { k.n_warps = 4, k.B_r = 0; }), "n_warps");
    check_invalid(with([](Knobs& k) { k.n_warps = 20, k.B_r = 256; }), "n_warps");
    check_invalid(with([](Knobs& k) { k.B_r = 64; }), "B_r");
  }
  SUBCASE("B_c: a wgmma N, a multiple of 16 in [64, 256]") {
    check_valid(with([](Knobs& k) { k.B_c = 176; }));
    check_invalid(with([](Knobs& k) { k.B_c = 48; }), "B_c");
    check_invalid(with([](Knobs& k) { k.B_c = 136; }), "B_c");
  }
  SUBCASE("stages: 2 to 4") {
    check_valid(with([](Knobs& k) { k.stages = 3; }));
    check_invalid(with([](Knobs& k) { k.stages = 1; }), "stages");
    check_invalid(with([](Knobs& k) { k.stages = 5; }), "stages");
  }
  SUBCASE("accumulators within the consumer's registers") {
    check_valid(with([](Knobs& k) { k.d_head = 256, k.B_c = 64; }));
    check_invalid(with([](Knobs& k) { k.d_head = 256, k.B_c = 128; }), "registers");
    check_invalid(with([](Knobs& k) { k.n_warps = 16, k.B_r = 192, k.B_c = 192; }), "registers");
  }
  SUBCASE("shared memory within 227 KiB") {
    check_valid(with([](Knobs& k) { k.stages = 3; }));
    check_invalid(with([](Knobs& k) { k.stages = 4; }), "shared memory");
  }
  SUBCASE("names round-trip and the seed's filter keeps every sm90 config") {
    fa_kernel_config c = make(base);
    CHECK(name_of(c) == "(BF16, 128, 128, 128, 12): sm90+stages_2");
    fa_kernel_config parsed;
    REQUIRE(fa_kernel_config_init(&parsed) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_config_parse("(BF16, 128, 128, 128, 12): sm90+stages_2", &parsed) ==
            FA_STATUS_SUCCESS);
    CHECK(std::memcmp(&parsed, &c, sizeof c) == 0);
    CHECK(fa_kernel_config_parse("(BF16, 128, 128, 128, 12): sm90+stages_2+swizzled", &parsed) ==
          FA_STATUS_PARSE_ERROR);
    CHECK(std::string(fa_last_error_detail()).find("no mma.sync features") != std::string::npos);
    CHECK(kept(base));
    fa_kernel_config overlapped = make(with([](Knobs& k) { k.overlap = 1; }));
    CHECK(name_of(overlapped) == "(BF16, 128, 128, 128, 12): sm90+stages_2+overlap");
    REQUIRE(fa_kernel_config_parse("(BF16, 128, 128, 128, 12): sm90+stages_2+overlap", &parsed) ==
            FA_STATUS_SUCCESS);
    CHECK(std::memcmp(&parsed, &overlapped, sizeof c) == 0);
    fa_kernel_config all = make(with([](Knobs& k) { k.overlap = k.pingpong = k.persistent = 1; }));
    char const* all_name = "(BF16, 128, 128, 128, 12): sm90+stages_2+overlap+pingpong+persistent";
    CHECK(name_of(all) == all_name);
    REQUIRE(fa_kernel_config_parse(all_name, &parsed) == FA_STATUS_SUCCESS);
    CHECK(std::memcmp(&parsed, &all, sizeof c) == 0);
  }
}

TEST_CASE("seed autotune filter: each rule keeps its good side and drops its bad side") {
  CHECK(kept({}));
  // 1. eager prefetch needs async copies.
  CHECK_FALSE(kept({.async_copy = 0, .eager = 1}));
  CHECK(kept({.async_copy = 0, .eager = 0}));
  // 2. Q streams with K or not at all.
  CHECK_FALSE(kept({.Q = 2, .K = 4}));
  CHECK(kept({.B_r = 64, .Q = 0, .K = 4}));
  // 3a. B_r = 64 only with 4 warps.
  CHECK_FALSE(kept({.B_r = 64, .B_c = 32, .n_warps = 8}));
  CHECK(kept({.B_r = 64, .B_c = 32, .n_warps = 4}));
  // 3b. B_r = 64, B_c = 32 needs Q streamed.
  CHECK_FALSE(kept({.B_r = 64, .B_c = 32, .Q = 0}));
  CHECK(kept({.B_r = 64, .B_c = 32, .Q = 2}));
  // 3c. B_r = 64, B_c = 64 needs Q resident.
  CHECK_FALSE(kept({.B_r = 64, .B_c = 64, .Q = 2}));
  CHECK(kept({.B_r = 64, .B_c = 64, .Q = 0}));
  // 4. B_r = 128 needs Q streamed.
  CHECK_FALSE(kept({.B_r = 128, .Q = 0}));
  CHECK(kept({.B_r = 128, .Q = 2}));
}

TEST_CASE("the seed's autotune space filters to 40 configs per dtype, all valid") {
  for (int32_t dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
    int count = 0;
    for (int32_t B_r : {64, 128})
      for (int32_t B_c : {32, 64})
        for (int32_t Q : {0, 2})
          for (int32_t K : {0, 2})
            for (int32_t V : {0, 2})
              for (int32_t buffer : {0, 1})
                for (int32_t opt : {0, 1}) {
                  Knobs k{.dtype = dtype, .B_r = B_r, .B_c = B_c, .Q = Q, .K = K, .V = V,
                          .buffer = buffer, .opt = opt};
                  if (!kept(k)) continue;
                  ++count;
                  check_valid(k);
                }
    CHECK(count == 40);
  }
}

TEST_CASE("canonical configs: each no-op field folds, and only then") {
  auto canon = [](Knobs const& k) {
    fa_kernel_config in = make(k), out;
    REQUIRE(fa_kernel_config_init(&out) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_config_canonical(&in, &out) == FA_STATUS_SUCCESS);
    return name_of(out);
  };
  // K loaded d_head/8 fragments at a time with Q resident is the whole-block load ...
  CHECK(canon({.B_r = 64, .Q = 0, .K = 16, .V = 2, .buffer = 0}) ==
        canon({.B_r = 64, .Q = 0, .K = 0, .V = 2, .buffer = 0}));
  // ... but not with Q streamed (it reloads Q every block), nor at a smaller granularity.
  CHECK(canon({.Q = 16, .K = 16, .V = 2, .buffer = 0}) ==
        name_of(make({.Q = 16, .K = 16, .V = 2, .buffer = 0})));
  CHECK(canon({.B_r = 64, .Q = 0, .K = 8, .V = 2, .buffer = 0}) ==
        name_of(make({.B_r = 64, .Q = 0, .K = 8, .V = 2, .buffer = 0})));
  // V loaded B_c/8 fragments at a time is the whole-block load; a smaller granularity is not.
  CHECK(canon({.V = 8, .buffer = 0}) == canon({.V = 0, .buffer = 0}));
  CHECK(canon({.V = 4, .buffer = 0}) == name_of(make({.V = 4, .buffer = 0})));
  // Double buffering with a single load group in both GEMMs does nothing; with two it does.
  CHECK(canon({.B_r = 64, .Q = 0, .K = 0, .V = 0, .buffer = 1}) ==
        name_of(make({.B_r = 64, .Q = 0, .K = 0, .V = 0, .buffer = 0})));
  CHECK(canon({.B_r = 64, .Q = 0, .K = 0, .V = 2, .buffer = 1}) ==
        name_of(make({.B_r = 64, .Q = 0, .K = 0, .V = 2, .buffer = 1})));
  CHECK(canon({}) == name_of(make({})));
}

TEST_CASE("short names: format, and print/parse round trip of every registered kernel") {
  CHECK(name_of(make({})) == "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles+buffer");
  CHECK(name_of(make({.dtype = FA_DTYPE_FP16, .B_r = 64, .async_copy = 1, .eager = 0, .swizzled = 0,
                      .Q = 0, .K = 0, .V = 0, .buffer = 0, .opt = 1})) ==
        "(FP16, 128, 64, 64, 4): async+load_0_0_0_tiles+opt_softmax");

  size_t n = fa_kernel_count();
  for (size_t i = 0; i < n; ++i) {
    fa_kernel_config c, back;
    REQUIRE(fa_kernel_config_init(&c) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_config_init(&back) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_get(i, &c) == FA_STATUS_SUCCESS);
    std::string name = name_of(c);
    INFO(name);
    REQUIRE(fa_kernel_config_parse(name.c_str(), &back) == FA_STATUS_SUCCESS);
    CHECK(std::memcmp(&c, &back, sizeof c) == 0);
  }
}

TEST_CASE("parse: seed spellings, table rows, and errors naming the bad part") {
  fa_kernel_config c;
  REQUIRE(fa_kernel_config_init(&c) == FA_STATUS_SUCCESS);

  SUBCASE("numeric dtype codes and lower case") {
    REQUIRE(fa_kernel_config_parse("(15, 128, 128, 64, 4): async+load_2_2_0_tiles", &c) ==
            FA_STATUS_SUCCESS);
    CHECK(c.dtype == FA_DTYPE_BF16);
    CHECK(c.eager_load_blocks == 0);
    REQUIRE(fa_kernel_config_parse("(fp16, 128, 64, 32, 4): load_2_2_2_tiles+buffer", &c) ==
            FA_STATUS_SUCCESS);
    CHECK(c.dtype == FA_DTYPE_FP16);
    CHECK(c.B_c == 32);
    CHECK(c.mma_double_buffer_loads == 1);
    CHECK(c.async_copy == 0);
  }
  SUBCASE("a Markdown table row") {
    REQUIRE(fa_kernel_config_parse(
                "| (BF16, 128, 64, 64, 4): async+eager+swizzled+load_0_2_2_tiles+opt_softmax | 412.5 |",
                &c) == FA_STATUS_SUCCESS);
    CHECK(c.B_r == 64);
    CHECK(c.Q_mma_load_K_tiles == 0);
    CHECK(c.K_mma_load_K_tiles == 2);
    CHECK(c.optimized_softmax == 1);
  }
  SUBCASE("errors") {
    fa_kernel_config before;
    std::memcpy(&before, &c, sizeof c);
    struct Bad {
      char const* text;
      char const* mentions;
    };
    for (Bad bad : {Bad{"(FP8, 128, 64, 64, 4): load_0_0_0_tiles", "FP8"},
                    Bad{"(BF16, 128, 64, 64): load_0_0_0_tiles", "5 comma-separated"},
                    Bad{"(BF16, 128, x64, 64, 4): load_0_0_0_tiles", "B_r"},
                    Bad{"(BF16, 128, 64, 64, 4): async+turbo+load_0_0_0_tiles", "turbo"},
                    Bad{"(BF16, 128, 64, 64, 4): async", "load_"},
                    Bad{"(BF16, 128, 64, 64, 4): load_0_0_tiles", "load_0_0_tiles"},
                    Bad{"BF16, 128, 64, 64, 4", "expected"}}) {
      INFO(bad.text);
      CHECK(fa_kernel_config_parse(bad.text, &c) == FA_STATUS_PARSE_ERROR);
      CHECK(std::string(fa_last_error_detail()).find(bad.mentions) != std::string::npos);
      CHECK(std::memcmp(&c, &before, sizeof c) == 0);
    }
  }
}

}  // TEST_SUITE
