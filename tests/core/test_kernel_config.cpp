// The kernel-config rules every family keeps, the dispatch to each family's rules, canonical
// form, autotune filter and names, and the name's parsing, through the C API.
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

// Each family's own rules, canonical form, filter and name tokens are tested with the family
// (tests/cuda/sm80/test_config.cpp, tests/cuda/sm90/test_config.cpp); here, the rules every
// family keeps and the dispatch to the family's, through the C API.
TEST_CASE("common rules: each accepts its good side and rejects its bad side") {
  check_valid(Knobs{});
  check_valid(sm90({.B_r = 128, .B_c = 128, .n_warps = 12, .stages = 2}));

  SUBCASE("dtype") {
    check_valid({.dtype = FA_DTYPE_FP16});
    check_invalid({.dtype = FA_DTYPE_FP32}, "dtype");
    check_invalid({.dtype = 0}, "dtype");
    // E4M3: the sm90 family's FP8 kernels only.
    check_valid(sm90({.dtype = FA_DTYPE_E4M3, .B_r = 128, .B_c = 128, .n_warps = 12, .stages = 2}));
    check_invalid({.dtype = FA_DTYPE_E4M3}, "must be FP16 or BF16 in the mma.sync family");
  }
  SUBCASE("d_head: a multiple of 64 in [64, 256]") {
    check_valid({.d_head = 64});
    check_valid({.d_head = 256, .B_c = 32});
    check_invalid({.d_head = 96}, "d_head");
    check_invalid({.d_head = 0}, "d_head");
    check_invalid({.d_head = 320}, "d_head");
  }
  SUBCASE("fields bounded before any arithmetic (no overflow on wild values)") {
    check_invalid({.B_c = 1 << 30}, "[0, 65536]");
    check_invalid({.Q = 0, .K = 1 << 29}, "[0, 65536]");
    check_invalid({.Q = -2, .K = -2}, "[0, 65536]");
    check_invalid({.d_head = -128}, "[0, 65536]");
    check_invalid({.B_c = -16}, "[0, 65536]");
  }
}

TEST_CASE("dispatch: each family's rules, canonical form and name; other families' knobs unset") {
  Knobs const sm90_base = sm90({.B_r = 128, .B_c = 128, .n_warps = 12, .stages = 2});
  SUBCASE("a family the library does not know is refused, the known ones listed") {
    for (int32_t family : {2, -1}) {
      fa_kernel_config c = make({.family = family});
      CHECK(fa_kernel_config_validate(&c) == FA_STATUS_INVALID_KERNEL_CONFIG);
      CHECK(std::string(fa_last_error_detail()).find("must be 0 (mma.sync) or 1 (sm90)") !=
            std::string::npos);
    }
  }
  SUBCASE("each family's own rules apply to its configs alone") {
    check_invalid({.n_warps = 12}, "n_warps = 12 must be 4 or 8");
    Knobs k = sm90_base;
    k.n_warps = 4;
    check_invalid(k, "must be 8, 12 or 16");
  }
  SUBCASE("a config keeps the other families' knobs at their defaults") {
    Knobs k = sm90_base;
    k.swizzled = 1;
    check_invalid(k, "the mma.sync knobs");
    k = sm90_base;
    k.V = 2;
    check_invalid(k, "must be 0 in the sm90 family");
    check_invalid(Knobs{.stages = 2}, "must be 0 in the mma.sync family (sm90 knobs)");
    check_invalid(Knobs{.overlap = 1}, "overlap");
    check_invalid(Knobs{.pingpong = 1}, "pingpong");
    check_invalid(Knobs{.persistent = 1}, "persistent");
  }
  SUBCASE("canonical: the family's") {
    fa_kernel_config in = make({.B_r = 64, .Q = 0, .K = 16, .V = 2, .buffer = 0}), out;
    REQUIRE(fa_kernel_config_init(&out) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_config_canonical(&in, &out) == FA_STATUS_SUCCESS);
    CHECK(out.K_mma_load_K_tiles == 0);
    in = make(sm90_base);
    REQUIRE(fa_kernel_config_canonical(&in, &out) == FA_STATUS_SUCCESS);
    CHECK(std::memcmp(&in, &out, sizeof in) == 0);
  }
  SUBCASE("the seed's filter: the family's") {
    CHECK_FALSE(kept({.B_r = 128, .Q = 0, .K = 0}));
    CHECK(kept(sm90_base));
  }
  SUBCASE("names: a tagged family's carry its knobs alone, the untagged form's every knob set") {
    CHECK(name_of(make({})) == "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles+buffer");
    CHECK(name_of(make(sm90_base)) == "(BF16, 128, 128, 128, 12): sm90+stages_2");
    // Invalid configs are named too (their errors print the name) and round-trip.
    for (Knobs k : {Knobs{.stages = 2, .overlap = 1}, Knobs{.family = 7, .persistent = 1}}) {
      fa_kernel_config c = make(k), back;
      std::string const name = name_of(c);
      INFO(name);
      REQUIRE(fa_kernel_config_init(&back) == FA_STATUS_SUCCESS);
      REQUIRE(fa_kernel_config_parse(name.c_str(), &back) == FA_STATUS_SUCCESS);
      CHECK(std::memcmp(&c, &back, sizeof c) == 0);
    }
    CHECK(name_of(make({.stages = 2, .overlap = 1})) ==
          "(BF16, 128, 128, 64, 4): stages_2+overlap+async+eager+swizzled+load_2_2_0_tiles+buffer");
    CHECK(name_of(make({.family = 7, .persistent = 1})) ==
          "(BF16, 128, 128, 64, 4): family_7+persistent+async+eager+swizzled+load_2_2_0_tiles+buffer");
    fa_kernel_config parsed;
    REQUIRE(fa_kernel_config_init(&parsed) == FA_STATUS_SUCCESS);
    CHECK(fa_kernel_config_parse("(BF16, 128, 128, 128, 12): sm90+stages_2+swizzled", &parsed) ==
          FA_STATUS_PARSE_ERROR);
    CHECK(std::string(fa_last_error_detail()) ==
          "cannot parse kernel name: an sm90 kernel has no mma.sync features (async, eager, "
          "swizzled, load_*, buffer, opt_softmax)");
  }
}

TEST_CASE("short names: print/parse round trip of every registered kernel") {
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
