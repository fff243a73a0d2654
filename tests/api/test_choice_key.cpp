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
}

}  // namespace fa
