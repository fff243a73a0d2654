// The registry holds exactly the generator's list, in KernelConfig order, every entry valid.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "flashattn.h"

namespace {

std::vector<std::string> generated_names() {
  std::ifstream in(FA_GENERATED_KERNEL_LIST);
  REQUIRE_MESSAGE(in.good(), "cannot read " FA_GENERATED_KERNEL_LIST);
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) names.push_back(line);
  }
  return names;
}

auto key(fa_kernel_config const& c) {
  return std::make_tuple(c.dtype, c.d_head, c.B_r, c.B_c, c.n_warps, c.async_copy,
                         c.eager_load_blocks, c.swizzled, c.Q_mma_load_K_tiles,
                         c.K_mma_load_K_tiles, c.V_mma_load_K_tiles, c.mma_double_buffer_loads,
                         c.optimized_softmax, c.family, c.stages, c.overlap, c.pingpong,
                         c.persistent);
}

}  // namespace

TEST_SUITE("core") {

TEST_CASE("registry equals the generator's list, in order") {
  std::vector<std::string> expected = generated_names();
  REQUIRE(fa_kernel_count() == expected.size());
  // Every build with CUDA has kernels; a CPU-only one (FA_CUDA=OFF) has none.
  REQUIRE((fa_kernel_count() > 0) == FA_CUDA_BUILT);
  fa_kernel_config previous{};
  for (size_t i = 0; i < expected.size(); ++i) {
    fa_kernel_config c;
    REQUIRE(fa_kernel_config_init(&c) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_get(i, &c) == FA_STATUS_SUCCESS);
    char name[128];
    REQUIRE(fa_kernel_config_name(&c, name, sizeof name, nullptr) == FA_STATUS_SUCCESS);
    CHECK(expected[i] == name);
    INFO(name);
    CHECK(fa_kernel_config_validate(&c) == FA_STATUS_SUCCESS);
    int registered = 0;
    REQUIRE(fa_kernel_is_registered(&c, &registered) == FA_STATUS_SUCCESS);
    CHECK(registered == 1);
    if (i > 0) CHECK(key(previous) < key(c));  // strictly increasing: sorted, no duplicates
    // Only canonical configs are registered: no two entries compile to the same code.
    fa_kernel_config canon;
    REQUIRE(fa_kernel_config_init(&canon) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_config_canonical(&c, &canon) == FA_STATUS_SUCCESS);
    CHECK(key(canon) == key(c));
    // A no-op variant (double buffering a whole-block mma.sync kernel) counts as registered.
    if (c.family == FA_FAMILY_MMA_SYNC && c.K_mma_load_K_tiles == 0 && c.V_mma_load_K_tiles == 0) {
      fa_kernel_config variant = c;
      variant.mma_double_buffer_loads = 1 - c.mma_double_buffer_loads;
      REQUIRE(fa_kernel_is_registered(&variant, &registered) == FA_STATUS_SUCCESS);
      CHECK(registered == 1);
    }
    previous = c;
  }
}

TEST_CASE("a valid config outside the build is not registered") {
  fa_kernel_config c;
  REQUIRE(fa_kernel_config_init(&c) == FA_STATUS_SUCCESS);
  REQUIRE(fa_kernel_config_parse("(BF16, 128, 128, 48, 4): swizzled+load_4_4_2_tiles", &c) ==
          FA_STATUS_SUCCESS);
  REQUIRE(fa_kernel_config_validate(&c) == FA_STATUS_SUCCESS);
  int registered = -1;
  REQUIRE(fa_kernel_is_registered(&c, &registered) == FA_STATUS_SUCCESS);
  CHECK(registered == 0);
}

TEST_CASE("fa_kernel_get rejects an index past the end and leaves the output alone") {
  fa_kernel_config c, before;
  REQUIRE(fa_kernel_config_init(&c) == FA_STATUS_SUCCESS);
  c.B_r = 12345;
  std::memcpy(&before, &c, sizeof c);
  CHECK(fa_kernel_get(fa_kernel_count(), &c) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("out of range") != std::string::npos);
  CHECK(std::memcmp(&c, &before, sizeof c) == 0);
  CHECK(fa_kernel_get(0, nullptr) != FA_STATUS_SUCCESS);
}

}  // TEST_SUITE
