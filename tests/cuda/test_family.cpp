// The building blocks both kernel families' answers use (src/cuda/family.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/device.hpp"
#include "cuda/family.hpp"
#include "cuda/family_cases.hpp"
#include "cuda/sm80/family.hpp"
#include "cuda/sm90/family.hpp"

namespace fa::cuda {

TEST_SUITE("family") {
  TEST_CASE("both families run a value head dim in multiples of 8 up to head_dim, refusing others by name") {
    struct Case {
      KernelFamily const& family;
      KernelConfig kernel;
      char const* name;
    };
    for (Case const& c : {Case{sm80::kFamily, test::mma_sync_kernel(64, 128, 4), "mma.sync"},
                          Case{sm90::kFamily, test::sm90_kernel(128, true), "sm90"}}) {
      Problem p = test::dense_problem(1, 100, 100, 8, 8);
      for (int64_t dv : {8, 64, 96, 120, 128}) {
        p.head_dim_v = dv;
        CHECK_MESSAGE(c.family.cannot_run(c.kernel, p).empty(), c.name, " head_dim_v ", dv);
      }
      for (int64_t dv : {160, 100, 4}) {  // above head_dim, or not a multiple of 8
        p.head_dim_v = dv;
        std::string const why = c.family.cannot_run(c.kernel, p);
        CHECK_MESSAGE(why.find("head_dim_v = " + std::to_string(dv) + " with head_dim = 128") !=
                          std::string::npos, why);
        CHECK(why.find(c.name) != std::string::npos);
      }
    }
  }

  TEST_CASE("forward_params folds causal into the window and the scale into exp2") {
    Problem p = test::dense_problem(2, 100, 300, 8, 2);
    Schedule s;
    ForwardParams f = forward_params(p, 64, s);
    CHECK(f.masked == 0);
    CHECK(f.window_right == (int64_t(1) << 40));
    CHECK(f.n_q_blocks == 2);  // ceil(100 / 64)
    CHECK(f.head_units == 8);
    CHECK(f.q_heads_per_kv == 4);
    CHECK(f.transform == 0);
    CHECK(f.score_scale_log2 == doctest::Approx(0.125 * 1.4426950408889634));
    CHECK(f.partial_rows == 200);
    CHECK(f.head_dim == 128);

    p.causal = true;
    p.window = true;
    p.window_left = 5;
    p.window_right = 7;
    f = forward_params(p, 64, s);
    CHECK(f.masked == 1);
    CHECK(f.window_left == 5);
    CHECK(f.window_right == 0);  // causal caps the right bound at the diagonal

    p.softcap = 30.f;
    f = forward_params(p, 64, s);
    CHECK(f.transform == 1);
    CHECK(f.score_scale_log2 == 1.f);
    CHECK(f.inv_softcap == doctest::Approx(1.0 / 30.0));
  }

  TEST_CASE("forward_params packs the query heads of a K/V head into a tile") {
    Problem const p = test::dense_problem(3, 1, 4096, 32, 8);
    Schedule s;
    s.pack_gqa = true;
    s.num_splits = 5;
    ForwardParams const f = forward_params(p, 64, s);
    CHECK(f.pack_gqa == 1);
    CHECK(f.head_units == 8);
    CHECK(f.n_q_blocks == 1);  // 1 query x 4 heads in one 64-row tile
    CHECK(f.num_splits == 5);
    CHECK(unsplit_blocks(64, p, true) == 1 * 8 * 3);
    CHECK(unsplit_blocks(64, p, false) == 1 * 32 * 3);
  }

  TEST_CASE("the general instantiation takes every feature the plain one lacks") {
    Problem p = test::dense_problem(1, 128, 128, 4, 4);
    CHECK_FALSE(needs_general(p, 128, 128, false, 1));
    p.causal = true;
    p.window = true;
    p.window_left = 16;
    CHECK_FALSE(needs_general(p, 128, 128, false, 1));  // masks are plain
    CHECK(needs_general(p, 128, 128, true, 1));
    CHECK(needs_general(p, 128, 128, false, 2));
    Problem q = p;
    q.sinks = true;
    CHECK(needs_general(q, 128, 128, false, 1));
    q = p;
    q.softmax_scale = -0.1f;
    CHECK(needs_general(q, 128, 128, false, 1));
    q = p;
    q.layout = Layout::kPagedKv;
    CHECK(needs_general(q, 128, 128, false, 1));
    q = p;
    q.alibi = Alibi::kPerHead;
    CHECK(needs_general(q, 128, 128, false, 1));
    // A head dim below the kernel's: the plain kernels store every column of their own.
    q = p;
    CHECK_FALSE(needs_general(q, 128, 128, false, 1));
    CHECK(needs_general(q, 256, 256, false, 1));
    q.head_dim_v = 64;
    CHECK(needs_general(q, 128, 128, false, 1));
    // A kernel whose V and O have fewer columns than Q and K (d 192 / 128): plain at its dims,
    // general below either.
    q.head_dim = 192;
    q.head_dim_v = 128;
    CHECK_FALSE(needs_general(q, 192, 128, false, 1));
    CHECK(needs_general(q, 192, 192, false, 1));
    q.head_dim = 160;
    CHECK(needs_general(q, 192, 128, false, 1));
    q.head_dim = 192;
    q.head_dim_v = 96;
    CHECK(needs_general(q, 192, 128, false, 1));
  }

  TEST_CASE("a page pool of 2^31 pages or more reaches the kernels as INT32_MAX pages") {
    Problem p = test::dense_problem(1, 16, 64, 4, 4);
    p.layout = Layout::kPagedKv;
    p.page_size = 16;
    p.max_pages_per_seq = 4;
    for (int64_t pages : {int64_t(5), (int64_t(1) << 31) - 1, int64_t(1) << 31, (int64_t(1) << 32) + 3}) {
      p.num_pages = pages;
      ForwardParams const f = forward_params(p, 64, Schedule{});
      CHECK(f.num_pages == std::min<int64_t>(pages, INT32_MAX));
    }
  }

  TEST_CASE("split workspace: partial outputs and LSEs, rounded to 256 bytes") {
    Problem const p = test::dense_problem(3, 7, 1000, 5, 5, 64);
    size_t const floats = size_t(4) * 21 * 5 * 65;
    size_t const bytes = split_workspace_bytes(p, 4);
    CHECK(bytes % 256 == 0);
    CHECK(bytes >= floats * 4);
    CHECK(bytes < floats * 4 + 256);
  }

  TEST_CASE("split workspace: the partial outputs have O's head_dim_v columns") {
    Problem p = test::dense_problem(3, 7, 1000, 5, 5, 192);
    p.head_dim_v = 128;
    size_t const floats = size_t(4) * 21 * 5 * 129;
    size_t const bytes = split_workspace_bytes(p, 4);
    CHECK(bytes >= floats * 4);
    CHECK(bytes < floats * 4 + 256);
  }

  TEST_CASE("a forced num_splits whose grid would pass 2^31 - 1 blocks is refused, by name") {
    // 2^25 (query block, head, sequence) blocks unsplit: one query block, 32 heads (no GQA to
    // pack), 2^20 sequences; 64 splits make 2^31 of them, 63 fit.
    for (KernelConfig const& k : {test::mma_sync_kernel(64, 128, 4), test::sm90_kernel(128, true)}) {
      Problem p = test::dense_problem(int64_t(1) << 20, 1, 4096, 32, 32);
      p.num_splits = 64;
      std::string const why = cannot_run(k, p);
      CHECK_MESSAGE(why.find("the grid of 33554432 thread blocks times fa_config.num_splits = 64 "
                             "exceeds 2^31 - 1") != std::string::npos, why);
      for (int splits : {63, 1, 0}) {
        p.num_splits = splits;
        CHECK_MESSAGE(cannot_run(k, p).empty(), splits, ": ", cannot_run(k, p));
      }
    }
  }
}

}  // namespace fa::cuda
