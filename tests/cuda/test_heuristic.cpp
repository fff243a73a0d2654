// The measured choice table's lookups (src/cuda/heuristic.cpp): the picks nearest a problem's
// length, which the choice walks for a paged cache's better-fitting kernel, and the rows a head
// dim between the table's takes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/family.hpp"
#include "cuda/family_cases.hpp"
#include "cuda/heuristic.hpp"
#include "cuda/kernel_entry.hpp"
#include "cuda/sm80/family.hpp"
#include "cuda/sm90/config.hpp"
#include "cuda/sm90/family.hpp"

namespace fa::cuda {

// The families the choice asks for a kernel's rules: the library's generated list names those its
// build compiles for (the CPU-only build none); these tests link both families' host rules.
KernelFamily const* find_family(int32_t family) {
  return family == FA_FAMILY_SM90 ? &sm90::kFamily
         : family == FA_FAMILY_MMA_SYNC ? &sm80::kFamily
                                        : nullptr;
}

TEST_SUITE("family") {
  TEST_CASE("the table's picks nearest a length: the covering row, then below and above in turn") {
    Problem p = test::dense_problem(4, 512, 2048, 32, 8, 256);
    p.causal = true;
    p.dtype = DType::kFP16;
    std::vector<ChoicePick> rows;  // the table's own rows for (sm_90, d 256, causal), in order
    for (ChoicePick const& pick : choice_picks()) {
      if (pick.arch == 90 && pick.d_head == 256 && pick.causal && !pick.fallback && !pick.padded) {
        rows.push_back(pick);
      }
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

    // A head dim between the table's takes the pad rows of the next one up (the kernels of that
    // head dim that carry the narrow pairs, run with zero columns), as does a value head dim
    // below the row's; its candidates are the head dim's; one above every row, nothing.
    std::vector<ChoicePick> pad;
    for (ChoicePick const& pick : choice_picks()) {
      if (pick.arch == 90 && pick.d_head == 256 && pick.causal && pick.padded) pad.push_back(pick);
    }
    REQUIRE(pad.size() >= 2);
    std::vector<KernelConfig> pad_longest;
    for (size_t i = pad.size(); i-- > 0;) {
      KernelConfig k = pad[i].config;
      k.dtype = DType::kFP16;
      pad_longest.push_back(k);
    }
    p.head_dim = 200;
    CHECK(table_picks_nearest(90, p) == pad_longest);
    CHECK(table_choice(90, p, false) == pad_longest[0]);
    Problem at_own = p;  // the fallback rows are the head dim's own
    at_own.head_dim = 256;
    CHECK(table_choice(90, p, true) == table_choice(90, at_own, true));
    CHECK(table_picks_nearest(90, at_own) == longest);
    at_own.head_dim_v = 224;
    CHECK(table_picks_nearest(90, at_own) == pad_longest);
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

  TEST_CASE("a paged chunked prefill's choice: three stages on gathered pages, the pick's boxes or larger otherwise") {
    // choose_kernel on an H100-like device holding every sm_90 pick and autotuning candidate of
    // the table (host only: nothing is launched). A paged problem gives its pick up for the
    // first of the table's picks (nearest in length), then its candidates, that the family
    // ranks higher (choice.cpp's better_for_pages, sm90/family.cpp's paged_rank).
    std::vector<KernelEntry> entries;
    for (ChoicePick const& pick : choice_picks()) {
      if (pick.arch == 90 && pick.config.family == FA_FAMILY_SM90) entries.push_back({pick.config, nullptr, nullptr, nullptr, nullptr});
    }
    for (ChoiceCandidate const& c : choice_candidates()) {
      if (c.arch == 90 && c.config.family == FA_FAMILY_SM90) entries.push_back({c.config, nullptr, nullptr, nullptr, nullptr});
    }
    for (KernelEntry& e : entries) e.config.dtype = DType::kBF16;
    Device device;
    device.cc_major = 9;
    device.sm_count = 132;
    device.smem_per_block_optin = 227 * 1024;
    for (KernelEntry const& e : entries) device.kernels.push_back(&e);
    auto choose = [&](int64_t d, bool causal, int64_t page) {
      Problem p = test::dense_problem(4, 512, 16384, 32, 8, d);
      p.causal = causal;
      p.layout = page == 0 ? Layout::kKvCache : Layout::kPagedKv;
      p.page_size = page;
      p.max_pages_per_seq = page == 0 ? 0 : 16384 / page;
      p.num_pages = page == 0 ? 0 : 4 * p.max_pages_per_seq;
      KernelEntry const* chosen = nullptr;
      REQUIRE(choose_kernel(device, p, &chosen) == FA_STATUS_SUCCESS);
      return chosen->config;
    };
    for (int64_t d : {64, 128}) {
      for (bool causal : {false, true}) {
        INFO("d " << d << " causal " << causal);
        KernelConfig const contiguous = choose(d, causal, 0);
        // Gathered pages (1, 3): a three-stage tile, a candidate where the picks have none.
        CHECK(choose(d, causal, 1).stages == 3);
        CHECK(choose(d, causal, 3).stages == 3);
        // Pages of 16: every tile reads boxes of 16 rows; the pick stays.
        CHECK(choose(d, causal, 16) == contiguous);
        // Pages of 64: boxes of 64 rows where the pick's are smaller.
        KernelConfig const at_64 = choose(d, causal, 64);
        CHECK(std::gcd(int64_t(at_64.B_c), int64_t(64)) == 64);
      }
    }
    // d 192 causal: the picks' B_c 96 reads pages of 64 in boxes of 32 rows; a candidate of
    // B_c 112 (boxes of 16 rows) must not take its place.
    KernelConfig const d192 = choose(192, true, 64);
    CHECK(d192 == choose(192, true, 0));
    CHECK(std::gcd(int64_t(d192.B_c), int64_t(64)) >= 32);
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
