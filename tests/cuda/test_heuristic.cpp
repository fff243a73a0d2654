// The measured choice table's lookups (src/cuda/heuristic.cpp): the picks nearest a problem's
// length, which the choice walks for a paged cache's better-fitting kernel, and the rows a head
// dim between the table's takes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/family_cases.hpp"
#include "cuda/heuristic.hpp"
#include "cuda/sm90/config.hpp"
#include "cuda/sm90/family.hpp"

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

  TEST_CASE("gathered pages at d 64 and 128: a three-stage sm90 kernel among the table's picks or candidates") {
    // The choice gives a paged problem's pick up for a higher-ranked kernel among the table's
    // picks, then its candidates (choice.cpp's better_for_pages); on gathered pages the sm90
    // family ranks three stages above two (1.13-1.29x on pages of 1, H200). The d 128 causal
    // rows' picks all have two stages, so their candidates must hold the three-stage tile.
    for (int64_t d : {64, 128}) {
      for (bool causal : {false, true}) {
        Problem p = test::dense_problem(4, 512, 16384, 32, 8, d);
        p.causal = causal;
        p.layout = Layout::kPagedKv;
        p.page_size = 1;
        std::vector<KernelConfig> rows = table_picks_nearest(90, p);
        for_each_candidate(90, p, [&](KernelConfig const& k) { rows.push_back(k); });
        bool three = false;
        for (KernelConfig const& k : rows) {
          three |= k.family == FA_FAMILY_SM90 && k.stages >= 3 &&
                   sm90::kFamily.paged_rank(k, p) > sm90::kFamily.paged_rank(rows[0], p);
        }
        INFO("d " << d << " causal " << causal);
        CHECK(three);
      }
    }
  }

  TEST_CASE("every sm90 row's kernel holds the value head dim its row serves") {
    // A kernel holding V in 128 columns in a "192" row would send every 192 / 192 problem to the
    // fallback; one in a "192:128" row must run 128.
    int sm90_rows = 0;
    for (ChoicePick const& pick : choice_picks()) {
      if (pick.config.family != FA_FAMILY_SM90) continue;
      INFO("d " << pick.d_head << ":" << pick.d_head_v << ", causal " << pick.causal << ", up to "
                << pick.max_seqlen);
      CHECK(sm90::v_cols(pick.config) >= pick.d_head_v);
      if (pick.d_head_v == pick.d_head) CHECK(sm90::v_cols(pick.config) == pick.d_head);
      ++sm90_rows;
    }
    CHECK(sm90_rows > 0);
    for (ChoiceCandidate const& c : choice_candidates()) {
      if (c.config.family == FA_FAMILY_SM90) CHECK(sm90::v_cols(c.config) >= c.d_head_v);
    }
  }

  TEST_CASE("a value head dim below the head dim takes the table's rows for it, and the head dim's fallback") {
    // The rows of (sm_90, d 192, non-causal) for value head dims 128 and 192, and the fallbacks.
    std::vector<ChoicePick> v128, v192, fallback;
    for (ChoicePick const& pick : choice_picks()) {
      if (pick.arch != 90 || pick.d_head != 192 || pick.causal) continue;
      if (pick.fallback) {
        fallback.push_back(pick);
      } else {
        (pick.d_head_v == 128 ? v128 : v192).push_back(pick);
      }
    }
    REQUIRE(!v128.empty());
    REQUIRE(!v192.empty());
    REQUIRE(!fallback.empty());
    for (ChoicePick const& pick : fallback) CHECK(pick.d_head_v == 192);
    CHECK(table_value_dim(90, 192, false, 128, false) == 128);
    CHECK(table_value_dim(90, 192, false, 120, false) == 128);
    CHECK(table_value_dim(90, 192, false, 136, false) == 192);
    CHECK(table_value_dim(90, 192, false, 128, true) == 192);
    CHECK(table_value_dim(90, 192, false, 200, false) == 0);
    CHECK(table_value_dim(90, 256, false, 128, false) == 256);  // no 256:128 rows

    auto first_row = [](std::vector<ChoicePick> const& rows) {
      KernelConfig k = rows.front().config;
      k.dtype = DType::kBF16;
      return k;
    };
    Problem p = test::dense_problem(2, 128, 128, 32, 32, 192);  // shorter than every row
    p.dtype = DType::kBF16;
    CHECK(table_choice(90, p, false) == first_row(v192));
    p.head_dim_v = 128;
    CHECK(table_choice(90, p, false) == first_row(v128));
    CHECK(table_choice(90, p, true) == first_row(fallback));
    CHECK(table_picks_nearest(90, p).front() == first_row(v128));
    p.head_dim = 176;  // the next head dim up, and its value dim's rows
    p.head_dim_v = 96;
    CHECK(table_choice(90, p, false) == first_row(v128));
    std::vector<KernelConfig> candidates;
    for_each_candidate(90, p, [&](KernelConfig const& k) { candidates.push_back(k); });
    CHECK(!candidates.empty());
    for (ChoiceCandidate const& c : choice_candidates()) {
      if (c.arch != 90 || c.d_head != 192 || c.causal) continue;
      KernelConfig k = c.config;
      k.dtype = DType::kBF16;
      bool const listed = std::find(candidates.begin(), candidates.end(), k) != candidates.end();
      // The 192:128 rows' candidates, and none of the 192 rows' (the two lists do not overlap).
      CHECK(listed == (c.d_head_v == 128));
    }
  }
}

}  // namespace fa::cuda
