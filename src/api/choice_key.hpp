// The keys a context caches kernel choices under (context.hpp): host-only, so the tests can
// check them without the CUDA headers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "core/problem.hpp"

namespace fa {

// What the kernel choice depends on: (dtype, causal, head_dim, seqlen_q, seqlen_k, head_dim_v).
// The plan cache's and the tuning results' key. (Without head_dim_v, a 192 / 192 problem's pick,
// which also runs 192 / 128, became the pick of a 192 / 128 problem of the same length, 0.88x
// the table's own 192 / 128 kernel at 512 on an H200.)
using ChoiceKey = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t>;

inline ChoiceKey choice_key(Problem const& p) {
  return {static_cast<int>(p.dtype), p.causal, p.head_dim, p.seqlen_q, p.seqlen_k, p.head_dim_v};
}

// The built-in choice's cache key: the shape key plus what else choose_kernel() and the
// families' refusals read to pick between decode and table kernels (query heads per K/V head,
// the layout, the page size: a family may run some page sizes and not others, as the sm90
// family ran pages of 16 rows but not of 1 before it gathered small pages, and a fallback chosen
// for one must not become another's pick), and the K/V dtype (an e4m3 cache runs on fewer
// kernels than a 16-bit one of the same shape).
// For e4m3 queries also what the sm90 family's rule for V's images reads (a window, the batch,
// a varlen batch's query rows per sequence: the tile that copies the images runs where they pay
// and where its unsplit grid fills the device) and whether the run brings a workspace (a plan's
// fallback for a run without one); zeros for other problems, whose keys stay per shape.
using Fp8Key = std::tuple<bool, bool, int64_t, int64_t>;
using BuiltinKey = std::tuple<ChoiceKey, int64_t, int, int64_t, int, Fp8Key>;

inline BuiltinKey builtin_key(Problem const& p) {
  Fp8Key fp8{};
  if (p.dtype == DType::kE4M3) {
    int64_t const rows =
        p.layout == Layout::kVarlen ? p.total_q / std::max<int64_t>(p.batch, 1) : 0;
    fp8 = {p.window, p.no_workspace, p.batch, rows};
  }
  return {choice_key(p), p.heads_q / std::max<int64_t>(p.heads_kv, 1), static_cast<int>(p.layout),
          p.page_size, static_cast<int>(p.kv_dtype), fp8};
}

}  // namespace fa
