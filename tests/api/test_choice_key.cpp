// The context's per-shape cache of the built-in choice (src/api/choice_key.hpp): its key holds every
// field the choice and the families' refusals read, so a problem never reuses a kernel chosen
// for a different one.
#include <doctest/doctest.h>

#include "api/choice_key.hpp"

namespace fa {

TEST_CASE("the built-in choice's cache key tells apart what the choice reads") {
  Problem p{};
  p.dtype = p.kv_dtype = DType::kBF16;
  p.batch = 4;
  p.seqlen_q = 512;
  p.seqlen_k = 8192;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = 128;
  p.causal = true;
  p.layout = Layout::kPagedKv;
  p.page_size = 1;
  BuiltinKey const page_1 = builtin_key(p);
  // A page-1 cache's pick is not a page-16 cache's (a family may refuse one and not the other).
  p.page_size = 16;
  CHECK(builtin_key(p) != page_1);
  Problem same = p;
  same.page_size = 1;
  CHECK(builtin_key(same) == page_1);
  Problem contiguous = p;
  contiguous.layout = Layout::kKvCache;
  contiguous.page_size = 0;
  CHECK(builtin_key(contiguous) != builtin_key(p));
  Problem grouped = p;
  grouped.heads_kv = 4;
  CHECK(builtin_key(grouped) != builtin_key(p));
  Problem longer = p;
  longer.seqlen_k = 8193;
  CHECK(builtin_key(longer) != builtin_key(p));
  Problem narrow_v = p;  // 192 / 128 takes its own rows and kernels, not 192 / 192's
  narrow_v.head_dim_v = 64;
  CHECK(builtin_key(narrow_v) != builtin_key(p));
  CHECK(choice_key(narrow_v) != choice_key(p));
  Problem e4m3 = p;  // an FP8 cache of the same shape runs on the fp8 decode tiles only
  e4m3.kv_dtype = DType::kE4M3;
  CHECK(builtin_key(e4m3) != builtin_key(p));
  // 16-bit and e4m3-cache keys stay per shape: the batch is not the choice's.
  Problem batched = p;
  batched.batch = 64;
  CHECK(builtin_key(batched) == builtin_key(p));
}

TEST_CASE("e4m3 queries' cache key holds what the rule for V's images reads") {
  Problem p{};
  p.dtype = p.kv_dtype = DType::kE4M3;
  p.batch = 8;
  p.seqlen_q = p.seqlen_k = 2048;
  p.heads_q = p.heads_kv = 16;
  p.head_dim = p.head_dim_v = 256;
  BuiltinKey const key = builtin_key(p);
  Problem same = p;
  CHECK(builtin_key(same) == key);
  // A window (32 query tiles per V block, not 16), another batch (whether the grid fills the
  // device), a run without a workspace (the plan's fallback): each its own pick.
  Problem windowed = p;
  windowed.window = true;
  CHECK(builtin_key(windowed) != key);
  Problem one = p;
  one.batch = 1;
  CHECK(builtin_key(one) != key);
  Problem bare = p;
  bare.no_workspace = true;
  CHECK(builtin_key(bare) != key);
  // A varlen batch's query rows per sequence.
  Problem varlen = p;
  varlen.layout = Layout::kVarlen;
  varlen.total_q = 8 * 2048;
  Problem fewer_rows = varlen;
  fewer_rows.total_q = 8 * 100;
  CHECK(builtin_key(varlen) != builtin_key(fewer_rows));
}

}  // namespace fa
