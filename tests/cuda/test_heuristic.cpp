// The measured choice table's lookups (src/cuda/heuristic.cpp): the picks nearest a problem's
// length, which the choice walks for a paged cache's better-fitting kernel, and the rows a head
// dim between the table's takes.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "cuda/family_cases.hpp"
#include "cuda/heuristic.hpp"

namespace fa::cuda {

TEST_SUITE("family") {
  TEST_CASE("the table's picks nearest a length: the covering row, then below and above in turn") {
    Problem p = test::dense_problem(4, 512, 2048, 32, 8, 256);
    p.causal = true;
    p.dtype = DType::kFP16;
    std::vector<ChoicePick> rows;  // the table's own rows for (sm_90, d 256, causal), in order
    for (ChoicePick const& pick : choice_picks()) {
      if (pick.arch == 90 && pick.d_head == 256 && pick.causal && !pick.fallback) rows.push_back(pick);
    }
    REQUIRE(rows.size() >= 4);
    size_t covering = 0;
    while (covering + 1 < rows.size() && rows[covering].max_seqlen < 2048) ++covering;
    REQUIRE(rows[covering].max_seqlen >= 2048);

    std::vector<KernelConfig> const nearest = table_picks_nearest(90, p);
    REQUIRE(nearest.size() == rows.size());
    auto same = [&](KernelConfig const& got, size_t row) {
      KernelConfig want = rows[row].config;
      want.dtype = DType::kFP16;  // the problem's dtype, not the table's placeholder
      return got == want;
    };
    CHECK(same(nearest[0], covering));
    CHECK(same(nearest[1], covering - 1));
    CHECK(same(nearest[2], covering + 1));
    CHECK(table_choice(90, p, false) == nearest[0]);

    // Longer than every row: the longest row first, then downwards.
    p.seqlen_k = 1 << 20;
    std::vector<KernelConfig> const longest = table_picks_nearest(90, p);
    REQUIRE(longest.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) CHECK(same(longest[i], rows.size() - 1 - i));

    // A head dim between the table's takes the rows of the next one up (a family that can runs
    // it on that head dim's kernels with zero columns); one above every row, nothing.
    p.head_dim = 200;
    CHECK(table_picks_nearest(90, p) == longest);
    CHECK(table_choice(90, p, false) == longest[0]);
    std::vector<KernelConfig> between, own;
    for_each_candidate(90, p, [&](KernelConfig const& k) { between.push_back(k); });
    Problem at_256 = p;
    at_256.head_dim = 256;
    for_each_candidate(90, at_256, [&](KernelConfig const& k) { own.push_back(k); });
    CHECK(!own.empty());
    CHECK(between == own);
    p.head_dim = 264;
    CHECK(table_picks_nearest(90, p).empty());
    CHECK(!table_choice(90, p, false).has_value());
    int visited = 0;
    for_each_candidate(90, p, [&](KernelConfig const&) { ++visited; });
    CHECK(visited == 0);
  }
}

}  // namespace fa::cuda
