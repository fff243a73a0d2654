// A validated attention problem: what every backend receives after the C API has checked fa_config.
#pragma once

#include <cstdint>

namespace fa {

// Values equal the public fa_dtype values.
enum class DType : int32_t { kFP16 = 1, kBF16 = 2, kFP32 = 3, kE4M3 = 4 };

constexpr int dtype_size(DType t) {
  return t == DType::kFP32 ? 4 : t == DType::kE4M3 ? 1 : 2;
}

// Values equal the public fa_layout values.
enum class Layout : int32_t { kDense = 0, kVarlen = 1, kKvCache = 2, kPagedKv = 3 };

// Values equal the public fa_alibi values.
enum class Alibi : int32_t { kNone = 0, kPerHead = 1, kPerBatch = 2 };

// Element strides of one (batch, seq, head, dim) tensor; dim is contiguous.
struct TensorStrides {
  int64_t batch;
  int64_t seq;
  int64_t head;
};

// All fields resolved: softmax_scale is never 0 and packed-default strides are filled in.
struct Problem {
  DType dtype;      // q's element type
  DType kv_dtype;   // k's and v's (fa_config's 0 resolved to dtype)
  DType out_dtype;  // o's: dtype, or for e4m3 queries fa_config.out_dtype resolved (BF16 default)
  bool causal;  // bottom-right aligned: key j is visible to query i iff j <= i + seqlen_k - seqlen_q
  int64_t batch;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int64_t heads_q;
  int64_t heads_kv;  // heads_q % heads_kv == 0; query head h reads K/V head h / (heads_q / heads_kv)
  int64_t head_dim;    // columns of q and k
  int64_t head_dim_v;  // columns of v and o (fa_config's 0 resolved to head_dim)
  float softmax_scale;
  TensorStrides q;
  TensorStrides k;
  TensorStrides v;
  TensorStrides o;

  Layout layout = Layout::kDense;
  // Sliding window; a negative bound is unbounded. Causal is kept separately and caps the right
  // bound at 0 (see visible_keys()).
  bool window = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
  float softcap = 0.f;  // 0 = off
  Alibi alibi = Alibi::kNone;
  bool sinks = false;
  int num_splits = 0;  // 0 = automatic (GPU only)
  int64_t total_q = 0;  // varlen
  int64_t total_k = 0;  // varlen
  int64_t num_pages = 0;  // paged
  int64_t page_size = 0;  // paged
  int64_t max_pages_per_seq = 0;  // paged
  bool descale_per_head = false;  // descales are batch x heads_kv, else one per tensor
  // The launch a plan falls back to for a run without its workspace (api.cpp): kernels that
  // cannot run without one (the sm90 FP8 tile that copies V's images) refuse it.
  bool no_workspace = false;

  bool fp8() const { return dtype == DType::kE4M3 || kv_dtype == DType::kE4M3; }

  // Rows of q and o (and of the LSE per head): total_q for varlen, else batch * seqlen_q.
  int64_t q_rows() const { return layout == Layout::kVarlen ? total_q : batch * seqlen_q; }
  bool needs_cu_seqlens() const { return layout == Layout::kVarlen; }
  bool needs_cache_seqlens() const {
    return layout == Layout::kKvCache || layout == Layout::kPagedKv;
  }
};

// The keys query row i of a sequence with sq queries and sk keys sees: [lo, hi] (empty when
// lo > hi). Bottom-right aligned: query i sits at key position i + sk - sq.
struct KeyRange {
  int64_t lo;
  int64_t hi;
};
inline KeyRange visible_keys(Problem const& p, int64_t i, int64_t sq, int64_t sk) {
  int64_t const diag = i + sk - sq;
  KeyRange r{0, sk - 1};
  if (p.causal && diag < r.hi) r.hi = diag;
  if (p.window && p.window_right >= 0 && diag + p.window_right < r.hi) r.hi = diag + p.window_right;
  if (p.window && p.window_left >= 0 && diag - p.window_left > r.lo) r.lo = diag - p.window_left;
  return r;
}

}  // namespace fa

namespace fa {

// The run-time (non-tensor) arguments of one run: read by the kernels when they run, never
// stored in a plan. Null when the problem does not use them.
struct RunPointers {
  int32_t const* cu_seqlens_q = nullptr;   // varlen: batch + 1
  int32_t const* cu_seqlens_k = nullptr;   // varlen: batch + 1
  int32_t const* cache_seqlens = nullptr;  // kv cache, paged: batch
  int32_t const* block_table = nullptr;    // paged: batch x max_pages_per_seq
  float const* alibi_slopes = nullptr;     // heads_q, or batch x heads_q
  float const* sinks = nullptr;            // heads_q
  // 1 or batch x heads_kv each (Problem::descale_per_head); null means 1.0.
  float const* q_descale = nullptr;
  float const* k_descale = nullptr;
  float const* v_descale = nullptr;
};

}  // namespace fa
