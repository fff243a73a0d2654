#include "api/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "api/status.hpp"
#include "core/checked.hpp"
#include "core/family_config.hpp"

namespace fa {

namespace {

// A caller built against a newer header may pass a larger struct; that is accepted when the fields
// this version does not know are all zero (their defaults), so a new feature is never silently
// ignored.
// `oldest` is the size of the struct's first published version: a caller built against it passes
// that size, and the fields it lacks read as 0.
template <class S>
fa_status check_struct_size(S const* s, char const* name, size_t oldest = sizeof(S)) {
  if (s->struct_size < oldest) {
    return fail(FA_STATUS_BAD_STRUCT_SIZE,
                "%s.struct_size = %zu is smaller than %zu: initialise it with %s_init()", name,
                s->struct_size, oldest, name);
  }
  auto const* bytes = reinterpret_cast<unsigned char const*>(s);
  for (size_t i = sizeof(S); i < s->struct_size; ++i) {
    if (bytes[i] != 0) {
      return fail(FA_STATUS_BAD_STRUCT_SIZE,
                  "%s.struct_size = %zu: byte %zu, past the %zu bytes this library knows, is not 0",
                  name, s->struct_size, i, sizeof(S));
    }
  }
  return FA_STATUS_SUCCESS;
}

struct Dim {
  int64_t extent;
  int64_t stride;
};

// The largest element offset a tensor reaches, or -1 on int64 overflow.
int64_t max_offset(std::array<Dim, 4> const& dims) {
  int64_t total = 0;
  for (Dim const& d : dims) {
    if (!checked_mul_add(d.extent - 1, d.stride, total, &total)) return -1;
  }
  return total;
}

// True when no two elements of the tensor share an address: sorted by stride, each dimension must
// step past everything the smaller ones span.
bool non_overlapping(std::array<Dim, 4> dims) {
  std::sort(dims.begin(), dims.end(), [](Dim a, Dim b) { return a.stride < b.stride; });
  int64_t span = 1;  // elements covered by the dimensions sorted so far
  for (Dim const& d : dims) {
    if (d.extent == 1) continue;
    if (d.stride < span) return false;
    span = d.stride * (d.extent - 1) + span;
  }
  return true;
}

// `dim_name` names the field that gives the tensor's last dimension (head_dim or head_dim_v).
fa_status resolve_strides(char const* name, int64_t seq, int64_t heads, char const* dim_name,
                          int64_t dim, int64_t const (&in)[3], TensorStrides* out) {
  static char const* const kDims[3] = {"batch", "seq", "head"};
  if (in[0] == 0 && in[1] == 0 && in[2] == 0) {
    int64_t row, batch;
    if (!checked_product({heads, dim}, &row) || !checked_product({seq, row}, &batch)) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config: packed tensor %s of %lld x %lld x %s = %lld elements per batch "
                  "entry overflows int64",
                  name, static_cast<long long>(seq), static_cast<long long>(heads), dim_name,
                  static_cast<long long>(dim));
    }
    *out = {batch, row, dim};
    return FA_STATUS_SUCCESS;
  }
  for (int i = 0; i < 3; ++i) {
    if (in[i] < 0) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.%s_%s_stride = %lld must be >= 0", name,
                  kDims[i], static_cast<long long>(in[i]));
    }
  }
  *out = {in[0], in[1], in[2]};
  return FA_STATUS_SUCCESS;
}

}  // namespace

// fa_config as published in 0.2.0 ended with the o strides.
constexpr size_t kConfigSize_0_2 = offsetof(fa_config, layout);
// No tail padding: every struct_size a caller's header can give ends at a field, so a larger
// struct's first unknown byte is a field of a newer version (see fa_kernel_config's 0.2 trap).
static_assert(offsetof(fa_config, reserved1) + sizeof(int32_t) == sizeof(fa_config));
// fa_run_args as a 0.3 header before the descales had it, ending with workspace_size.
constexpr size_t kRunArgsSize_NoDescale = offsetof(fa_run_args, q_descale);
static_assert(offsetof(fa_run_args, v_descale) + sizeof(float const*) == sizeof(fa_run_args));

namespace {

char const* dtype_name(int32_t t) {
  switch (t) {
    case FA_DTYPE_FP16: return "FA_DTYPE_FP16";
    case FA_DTYPE_BF16: return "FA_DTYPE_BF16";
    case FA_DTYPE_FP32: return "FA_DTYPE_FP32";
    case FA_DTYPE_E4M3: return "FA_DTYPE_E4M3";
    default: return "not a fa_dtype";
  }
}

// The element types of q, k/v and o (fa_config's 0s resolved), or a failure naming the field.
// Allowed: one type throughout; 16-bit queries against an e4m3 cache (o takes q's type); e4m3
// queries against an e4m3 cache with o in bf16 or fp16. fp32 is never mixed (CPU-only, and no
// model stores fp32 queries against an fp8 cache).
fa_status resolve_dtypes(fa_config const* c, Problem* p) {
  if (c->dtype < FA_DTYPE_FP16 || c->dtype > FA_DTYPE_E4M3) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.dtype = %d is not a fa_dtype", c->dtype);
  }
  int32_t const kv = c->kv_dtype != 0 ? c->kv_dtype : c->dtype;
  if (kv < FA_DTYPE_FP16 || kv > FA_DTYPE_E4M3) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.kv_dtype = %d is not a fa_dtype or 0",
                c->kv_dtype);
  }
  bool const sixteen_bit = c->dtype == FA_DTYPE_FP16 || c->dtype == FA_DTYPE_BF16;
  if (kv != c->dtype && !(kv == FA_DTYPE_E4M3 && sixteen_bit)) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config.kv_dtype = %d (%s) cannot go with dtype = %d (%s): k and v take q's "
                "type, or FA_DTYPE_E4M3 under FA_DTYPE_FP16 or FA_DTYPE_BF16 queries",
                c->kv_dtype, dtype_name(kv), c->dtype, dtype_name(c->dtype));
  }
  int32_t out = c->dtype;
  if (c->dtype == FA_DTYPE_E4M3) {
    out = c->out_dtype != 0 ? c->out_dtype : FA_DTYPE_BF16;
    if (out != FA_DTYPE_FP16 && out != FA_DTYPE_BF16) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config.out_dtype = %d (%s) must be FA_DTYPE_BF16, FA_DTYPE_FP16 or 0 for "
                  "dtype = FA_DTYPE_E4M3",
                  c->out_dtype, dtype_name(c->out_dtype));
    }
  } else if (c->out_dtype != 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config.out_dtype = %d must be 0 for dtype = %d (%s): only FA_DTYPE_E4M3 "
                "queries choose o's type",
                c->out_dtype, c->dtype, dtype_name(c->dtype));
  }
  if (c->descale != FA_DESCALE_PER_TENSOR && c->descale != FA_DESCALE_PER_HEAD_KV) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.descale = %d is not a fa_descale",
                c->descale);
  }
  if (c->descale != FA_DESCALE_PER_TENSOR && kv != FA_DTYPE_E4M3) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config.descale = %d needs FA_DTYPE_E4M3 inputs (dtype = %d, kv_dtype = %d)",
                c->descale, c->dtype, c->kv_dtype);
  }
  if (c->reserved1 != 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.reserved1 = %d must be 0", c->reserved1);
  }
  p->dtype = static_cast<DType>(c->dtype);
  p->kv_dtype = static_cast<DType>(kv);
  p->out_dtype = static_cast<DType>(out);
  p->descale_per_head = c->descale == FA_DESCALE_PER_HEAD_KV;
  return FA_STATUS_SUCCESS;
}

}  // namespace

fa_status check_features(fa_config const* c) {
  if (c->layout < FA_LAYOUT_DENSE || c->layout > FA_LAYOUT_PAGED_KV) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.layout = %d is not a fa_layout", c->layout);
  }
  if (c->window != 0 && c->window != 1) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.window = %d must be 0 or 1", c->window);
  }
  if (c->window == 0 && (c->window_left != 0 || c->window_right != 0)) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config.window_left = %lld, window_right = %lld are set but window = 0",
                static_cast<long long>(c->window_left), static_cast<long long>(c->window_right));
  }
  if (!std::isfinite(c->softcap) || c->softcap < 0.f) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.softcap = %g must be 0 or finite and > 0",
                static_cast<double>(c->softcap));
  }
  if (c->alibi < FA_ALIBI_NONE || c->alibi > FA_ALIBI_PER_BATCH) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.alibi = %d is not a fa_alibi", c->alibi);
  }
  if (c->sinks != 0 && c->sinks != 1) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.sinks = %d must be 0 or 1", c->sinks);
  }
  // 256 splits bound the combine kernel's per-row shared memory (256 LSEs).
  if (c->num_splits < 0 || c->num_splits > 256) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.num_splits = %d must be in [0, 256]",
                c->num_splits);
  }
  struct Field {
    char const* name;
    int64_t value;
    bool used;
  };
  bool const varlen = c->layout == FA_LAYOUT_VARLEN, paged = c->layout == FA_LAYOUT_PAGED_KV;
  for (Field f : {Field{"total_q", c->total_q, varlen}, Field{"total_k", c->total_k, varlen},
                  Field{"num_pages", c->num_pages, paged}, Field{"page_size", c->page_size, paged},
                  Field{"max_pages_per_seq", c->max_pages_per_seq, paged}}) {
    if (f.used && f.value < 1) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.%s = %lld must be >= 1 for layout %d",
                  f.name, static_cast<long long>(f.value), c->layout);
    }
    if (!f.used && f.value != 0) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.%s = %lld must be 0 for layout %d",
                  f.name, static_cast<long long>(f.value), c->layout);
    }
  }
  if (paged) {
    int64_t span;
    if (__builtin_mul_overflow(c->max_pages_per_seq, c->page_size, &span) || span < c->seqlen_k) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config.max_pages_per_seq = %lld pages of page_size = %lld rows cannot hold "
                  "seqlen_k = %lld rows",
                  static_cast<long long>(c->max_pages_per_seq),
                  static_cast<long long>(c->page_size), static_cast<long long>(c->seqlen_k));
    }
  }
  if (varlen) {
    struct Stride {
      char const* name;
      int64_t value;
    };
    for (Stride st : {Stride{"q", c->q_batch_stride}, Stride{"k", c->k_batch_stride},
                      Stride{"v", c->v_batch_stride}, Stride{"o", c->o_batch_stride}}) {
      if (st.value != 0) {
        return fail(FA_STATUS_INVALID_ARGUMENT,
                    "fa_config.%s_batch_stride = %lld must be 0 for FA_LAYOUT_VARLEN (rows are "
                    "addressed through cu_seqlens)",
                    st.name, static_cast<long long>(st.value));
      }
    }
  }
  return FA_STATUS_SUCCESS;
}

fa_status to_problem(fa_config const* caller, Problem* out) {
  if (caller == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "config is NULL");
  if (fa_status s = check_struct_size(caller, "fa_config", kConfigSize_0_2); s != FA_STATUS_SUCCESS) {
    return s;
  }
  // An older caller's struct is shorter: the fields it lacks are 0.
  fa_config full;
  std::memset(&full, 0, sizeof full);
  std::memcpy(&full, caller, std::min(caller->struct_size, sizeof full));
  fa_config const* c = &full;
  Problem p;
  if (fa_status s = resolve_dtypes(c, &p); s != FA_STATUS_SUCCESS) return s;
  if (c->causal != 0 && c->causal != 1) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.causal = %d must be 0 or 1", c->causal);
  }
  struct Size {
    char const* name;
    int64_t value;
  };
  for (Size const& s : {Size{"batch", c->batch}, Size{"seqlen_q", c->seqlen_q},
                        Size{"seqlen_k", c->seqlen_k}, Size{"heads_q", c->heads_q},
                        Size{"heads_kv", c->heads_kv}, Size{"head_dim", c->head_dim}}) {
    if (s.value < 1) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.%s = %lld must be >= 1", s.name,
                  static_cast<long long>(s.value));
    }
  }
  // 0 is the default (head_dim); any positive value runs on the CPU, the GPU families refuse
  // what their kernels do not cover (family.cpp's cannot_run).
  if (c->head_dim_v < 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config.head_dim_v = %lld must be >= 1, or 0 for head_dim = %lld",
                static_cast<long long>(c->head_dim_v), static_cast<long long>(c->head_dim));
  }
  if (c->heads_q % c->heads_kv != 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config.heads_q = %lld is not a multiple of heads_kv = %lld",
                static_cast<long long>(c->heads_q), static_cast<long long>(c->heads_kv));
  }
  if (!std::isfinite(c->softmax_scale)) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.softmax_scale = %g must be finite",
                static_cast<double>(c->softmax_scale));
  }
  if (c->reserved0 != 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.reserved0 = %d must be 0", c->reserved0);
  }
  if (fa_status s = check_features(c); s != FA_STATUS_SUCCESS) return s;

  p.causal = c->causal != 0;
  p.batch = c->batch;
  p.seqlen_q = c->seqlen_q;
  p.seqlen_k = c->seqlen_k;
  if (c->layout == FA_LAYOUT_VARLEN) {
    // Upper bounds of the lengths (max_seqlen_q/k): no sequence is longer than all rows
    // together. Clamped, the bound sizes the grid and the CPU's work list by the rows that
    // exist (a bound of 2^63 - 1 gave one 2^57-unit CPU loop for a single row).
    p.seqlen_q = std::min(c->seqlen_q, c->total_q);
    p.seqlen_k = std::min(c->seqlen_k, c->total_k);
  }
  p.heads_q = c->heads_q;
  p.heads_kv = c->heads_kv;
  p.head_dim = c->head_dim;
  p.head_dim_v = c->head_dim_v != 0 ? c->head_dim_v : c->head_dim;
  p.softmax_scale = c->softmax_scale != 0.f
                        ? c->softmax_scale
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c->head_dim)));

  struct Tensor {
    char const* name;
    int64_t seq, heads;
    char const* dim_name;
    int64_t dim;
    int64_t strides[3];
    bool output;
    TensorStrides* out;
  };
  p.layout = static_cast<Layout>(c->layout);
  p.window = c->window != 0;
  p.window_left = p.window ? c->window_left : -1;
  p.window_right = p.window ? c->window_right : -1;
  // A bound no row can reach is unbounded: key j < Sk and query i < Sq give i + Sk - Sq - j in
  // (-Sq, Sk), so window_left >= Sk and window_right >= Sq never mask a key. Dropping them keeps
  // the backends' i + Sk - Sq -/+ window arithmetic within int64 (window_left = INT64_MAX
  // overflowed it). Sk and Sq are at most seqlen_k and seqlen_q, and cu_seqlens and
  // cache_seqlens (int32) bound them by INT32_MAX.
  {
    bool const int32_q = c->layout == FA_LAYOUT_VARLEN;
    bool const int32_k = c->layout != FA_LAYOUT_DENSE;
    int64_t const max_sq = int32_q ? std::min<int64_t>(c->seqlen_q, INT32_MAX) : c->seqlen_q;
    int64_t const max_sk = int32_k ? std::min<int64_t>(c->seqlen_k, INT32_MAX) : c->seqlen_k;
    if (p.window_left >= max_sk) p.window_left = -1;
    if (p.window_right >= max_sq) p.window_right = -1;
  }
  p.softcap = c->softcap;
  p.alibi = static_cast<Alibi>(c->alibi);
  p.sinks = c->sinks != 0;
  p.num_splits = c->num_splits;
  p.total_q = c->total_q;
  p.total_k = c->total_k;
  p.num_pages = c->num_pages;
  p.page_size = c->page_size;
  p.max_pages_per_seq = c->max_pages_per_seq;

  // The (outer, rows) extents each tensor spans: varlen tensors are one run of total rows, a
  // paged cache is num_pages pages of page_size rows.
  bool const varlen = p.layout == Layout::kVarlen, paged = p.layout == Layout::kPagedKv;
  int64_t const q_outer = varlen ? 1 : p.batch, q_seq = varlen ? p.total_q : p.seqlen_q;
  int64_t const k_outer = varlen ? 1 : paged ? p.num_pages : p.batch;
  int64_t const k_seq = varlen ? p.total_k : paged ? p.page_size : p.seqlen_k;
  int64_t const d = p.head_dim, dv = p.head_dim_v;
  Tensor tensors[4] = {
      {"q", q_seq, p.heads_q, "head_dim", d,
       {c->q_batch_stride, c->q_seq_stride, c->q_head_stride}, false, &p.q},
      {"k", k_seq, p.heads_kv, "head_dim", d,
       {c->k_batch_stride, c->k_seq_stride, c->k_head_stride}, false, &p.k},
      {"v", k_seq, p.heads_kv, "head_dim_v", dv,
       {c->v_batch_stride, c->v_seq_stride, c->v_head_stride}, false, &p.v},
      {"o", q_seq, p.heads_q, "head_dim_v", dv,
       {c->o_batch_stride, c->o_seq_stride, c->o_head_stride}, true, &p.o},
  };
  for (Tensor& t : tensors) {
    fa_status s = resolve_strides(t.name, t.seq, t.heads, t.dim_name, t.dim, t.strides, t.out);
    if (s != FA_STATUS_SUCCESS) return s;
    if (varlen) t.out->batch = 0;
    int64_t const outer = (t.name[0] == 'q' || t.name[0] == 'o') ? q_outer : k_outer;
    std::array<Dim, 4> dims = {Dim{outer, t.out->batch}, Dim{t.seq, t.out->seq},
                               Dim{t.heads, t.out->head}, Dim{t.dim, 1}};
    // Byte offsets (up to 8 bytes per element) and the extent (last offset + 1) stay in int64.
    if (int64_t const last = max_offset(dims); last < 0 || last >= INT64_MAX / 8) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config: tensor %s with strides (%lld, %lld, %lld) and %s = %lld columns "
                  "spans 2^60 elements or more",
                  t.name, static_cast<long long>(t.out->batch), static_cast<long long>(t.out->seq),
                  static_cast<long long>(t.out->head), t.dim_name, static_cast<long long>(t.dim));
    }
    if (t.output && !non_overlapping(dims)) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config: output strides (o_batch_stride = %lld, o_seq_stride = %lld, "
                  "o_head_stride = %lld) make elements of o overlap",
                  static_cast<long long>(t.out->batch), static_cast<long long>(t.out->seq),
                  static_cast<long long>(t.out->head));
    }
  }
  Extents e;
  if (fa_status s = checked_extents(p, &e); s != FA_STATUS_SUCCESS) return s;
  *out = p;
  return FA_STATUS_SUCCESS;
}

fa_status check_run_args_size(fa_run_args const* args) {
  return check_struct_size(args, "fa_run_args", kRunArgsSize_NoDescale);
}

fa_status checked_extents(Problem const& p, Extents* out) {
  bool const varlen = p.layout == Layout::kVarlen, paged = p.layout == Layout::kPagedKv;
  int64_t const q_outer = varlen ? 1 : p.batch, q_seq = varlen ? p.total_q : p.seqlen_q;
  int64_t const k_outer = varlen ? 1 : paged ? p.num_pages : p.batch;
  int64_t const k_seq = varlen ? p.total_k : paged ? p.page_size : p.seqlen_k;
  auto extent = [&](TensorStrides const& t, int64_t outer, int64_t seq, int64_t heads,
                    int64_t dim) {
    int64_t const last =
        max_offset({Dim{outer, t.batch}, Dim{seq, t.seq}, Dim{heads, t.head}, Dim{dim, 1}});
    return last < 0 || last >= kMaxElements ? int64_t{-1} : last + 1;
  };
  int64_t const d = p.head_dim, dv = p.head_dim_v;
  Extents e{extent(p.q, q_outer, q_seq, p.heads_q, d),
            extent(p.k, k_outer, k_seq, p.heads_kv, d),
            extent(p.v, k_outer, k_seq, p.heads_kv, dv),
            extent(p.o, q_outer, q_seq, p.heads_q, dv),
            0, 0, 0, 0, 0, 0, 0};
  struct Tensor {
    char const* name;
    int64_t extent;
  };
  for (Tensor t : {Tensor{"q", e.q}, Tensor{"k", e.k}, Tensor{"v", e.v}, Tensor{"o", e.o}}) {
    if (t.extent < 0) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config: tensor %s spans 2^60 elements or more",
                  t.name);
    }
  }
  // The LSE grows with batch x heads_q x seqlen_q even where q broadcasts along them (stride 0).
  if (!bounded_count({q_outer, q_seq, p.heads_q}, &e.lse)) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config: the LSE of batch = %lld x seqlen_q = %lld x heads_q = %lld rows "
                "exceeds 2^60 entries",
                static_cast<long long>(q_outer), static_cast<long long>(q_seq),
                static_cast<long long>(p.heads_q));
  }
  // The run-time arrays the problem uses, as fa_run_args documents their lengths.
  struct Array {
    char const* name;
    bool used;
    int64_t rows, per_row;
    int64_t* count;
  };
  int64_t batch_plus_one;
  if (!checked_mul_add(p.batch, 1, 1, &batch_plus_one)) batch_plus_one = -1;  // refused below
  for (Array a : {Array{"cu_seqlens_q and cu_seqlens_k (batch + 1 entries)", varlen,
                        batch_plus_one, 1, &e.cu_seqlens},
                  Array{"cache_seqlens (batch entries)", p.needs_cache_seqlens(), p.batch, 1,
                        &e.cache_seqlens},
                  Array{"block_table (batch x max_pages_per_seq entries)", paged,
                        p.batch, p.max_pages_per_seq, &e.block_table},
                  Array{"alibi_slopes (batch x heads_q entries)", p.alibi == Alibi::kPerBatch,
                        p.batch, p.heads_q, &e.alibi_slopes},
                  Array{"alibi_slopes (heads_q entries)", p.alibi == Alibi::kPerHead,
                        p.heads_q, 1, &e.alibi_slopes},
                  Array{"sinks (heads_q entries)", p.sinks, p.heads_q, 1, &e.sinks},
                  Array{"q_descale, k_descale and v_descale (batch x heads_kv entries)",
                        p.descale_per_head, p.batch, p.heads_kv, &e.descales}}) {
    if (a.used && !bounded_count({a.rows, a.per_row}, a.count)) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config: %s would exceed 2^60 entries (batch = %lld, heads_q = %lld, "
                  "heads_kv = %lld, max_pages_per_seq = %lld)",
                  a.name, static_cast<long long>(p.batch), static_cast<long long>(p.heads_q),
                  static_cast<long long>(p.heads_kv), static_cast<long long>(p.max_pages_per_seq));
    }
  }
  if (!p.descale_per_head) e.descales = 1;  // one per tensor
  // The CPU's work list and the GPU's grid take (sequence, query head, query tile) units: batch x
  // heads_q x tiles of the longest sequence. Dense and cache layouts bound it by the LSE above; a
  // varlen batch's LSE holds total_q rows, not batch, so a batch of many empty sequences (an
  // offset repeated in cu_seqlens) could wrap the count: a CPU call then returned success with
  // most of o unwritten, or failed on an exception.
  if (int64_t units; varlen && !bounded_count({p.batch, p.seqlen_q, p.heads_q}, &units)) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_config: a varlen batch of batch = %lld sequences x seqlen_q = %lld rows (at "
                "most total_q) x heads_q = %lld exceeds 2^60 (sequence, row, head) entries",
                static_cast<long long>(p.batch), static_cast<long long>(p.seqlen_q),
                static_cast<long long>(p.heads_q));
  }
  *out = e;
  return FA_STATUS_SUCCESS;
}

Extents extents(Problem const& p) {
  Extents e{};
  checked_extents(p, &e);  // cannot fail: to_problem made the same check
  return e;
}

fa_status to_merge_shape(fa_merge_config const* c, MergeShape* out) {
  if (c == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "config is NULL");
  if (fa_status s = check_struct_size(c, "fa_merge_config"); s != FA_STATUS_SUCCESS) return s;
  if (c->dtype != FA_DTYPE_FP16 && c->dtype != FA_DTYPE_BF16 && c->dtype != FA_DTYPE_FP32) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_merge_config.dtype = %d is not FA_DTYPE_FP16, FA_DTYPE_BF16 or FA_DTYPE_FP32 "
                "(merged outputs are never FA_DTYPE_E4M3)",
                c->dtype);
  }
  if (c->reserved0 != 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_merge_config.reserved0 = %d must be 0",
                c->reserved0);
  }
  struct Size {
    char const* name;
    int64_t value;
  };
  for (Size const& s : {Size{"batch", c->batch}, Size{"seqlen", c->seqlen}, Size{"heads", c->heads},
                        Size{"head_dim", c->head_dim}}) {
    if (s.value < 1) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_merge_config.%s = %lld must be >= 1", s.name,
                  static_cast<long long>(s.value));
    }
  }
  MergeShape m{static_cast<DType>(c->dtype), c->batch, c->seqlen, c->heads, c->head_dim, {}, 0, 0};
  int64_t const strides[3] = {c->o_batch_stride, c->o_seq_stride, c->o_head_stride};
  if (fa_status s =
          resolve_strides("o", m.seqlen, m.heads, "head_dim", m.head_dim, strides, &m.o);
      s != FA_STATUS_SUCCESS) {
    return s;
  }
  std::array<Dim, 4> const dims = {Dim{m.batch, m.o.batch}, Dim{m.seqlen, m.o.seq},
                                   Dim{m.heads, m.o.head}, Dim{m.head_dim, 1}};
  int64_t const last = max_offset(dims);
  int64_t lse_elems;
  if (last < 0 || last >= kMaxElements || !bounded_count({m.batch, m.seqlen, m.heads}, &lse_elems)) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_merge_config: the tensors span 2^60 elements or more");
  }
  if (!non_overlapping(dims)) {
    return fail(FA_STATUS_INVALID_ARGUMENT,
                "fa_merge_config: strides (%lld, %lld, %lld) make elements of o overlap",
                static_cast<long long>(m.o.batch), static_cast<long long>(m.o.seq),
                static_cast<long long>(m.o.head));
  }
  m.o_extent = last + 1;
  m.lse_count = lse_elems;
  *out = m;
  return FA_STATUS_SUCCESS;
}

// fa_kernel_config as published in 0.2.0 ended with optimized_softmax, at byte 60; its sizeof
// was 64, so a 0.2 caller passes struct_size = 64 with 4 bytes of tail padding (indeterminate:
// C does not zero padding) where 0.3 put `family`. Every struct_size below the current sizeof is
// such a caller, and only its fields are read. The current struct has no tail padding, so the
// next version's growth cannot meet the same trap.
constexpr size_t kKernelConfigSize_0_2 = offsetof(fa_kernel_config, family);
static_assert(offsetof(fa_kernel_config, persistent) + sizeof(int32_t) == sizeof(fa_kernel_config));

fa_status to_kernel_config(fa_kernel_config const* caller, KernelConfig* out) {
  if (caller == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "kernel config is NULL");
  if (fa_status s = check_struct_size(caller, "fa_kernel_config", kKernelConfigSize_0_2);
      s != FA_STATUS_SUCCESS) {
    return s;
  }
  // An older caller's struct is shorter: the fields it lacks are 0.
  fa_kernel_config full;
  std::memset(&full, 0, sizeof full);
  std::memcpy(&full, caller,
              caller->struct_size < sizeof full ? kKernelConfigSize_0_2 : sizeof full);
  fa_kernel_config const* in = &full;
  struct Flag {
    char const* name;
    int32_t value;
  };
  for (Flag const& f : {Flag{"async_copy", in->async_copy},
                        Flag{"eager_load_blocks", in->eager_load_blocks},
                        Flag{"swizzled", in->swizzled},
                        Flag{"mma_double_buffer_loads", in->mma_double_buffer_loads},
                        Flag{"optimized_softmax", in->optimized_softmax},
                        Flag{"overlap", in->overlap},
                        Flag{"pingpong", in->pingpong},
                        Flag{"persistent", in->persistent}}) {
    if (f.value != 0 && f.value != 1) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_kernel_config.%s = %d must be 0 or 1", f.name,
                  f.value);
    }
  }
  *out = KernelConfig{static_cast<DType>(in->dtype), in->d_head, in->B_r, in->B_c, in->n_warps,
                      in->async_copy != 0, in->eager_load_blocks != 0, in->swizzled != 0,
                      in->Q_mma_load_K_tiles, in->K_mma_load_K_tiles, in->V_mma_load_K_tiles,
                      in->mma_double_buffer_loads != 0, in->optimized_softmax != 0,
                      in->family, in->stages, in->overlap != 0, in->pingpong != 0,
                      in->persistent != 0};
  return FA_STATUS_SUCCESS;
}

bool kernel_config_holds(fa_kernel_config const& out, int32_t family) {
  return out.struct_size >= sizeof(fa_kernel_config) ||
         (out.struct_size >= kKernelConfigSize_0_2 && family == FA_FAMILY_MMA_SYNC);
}

namespace {

// " (a 0.2 struct cannot hold an sm90 kernel)" for a family a 0.2 struct cannot hold, else "".
std::string a_0_2_struct_cannot_hold(int32_t family) {
  if (family == FA_FAMILY_MMA_SYNC) return {};
  FamilyConfig const* f = find_family_config(family);
  return std::string(" (a 0.2 struct cannot hold ") + (f != nullptr ? f->a_kernel : "its family") +
         ")";
}

}  // namespace

fa_status from_kernel_config(KernelConfig const& in, fa_kernel_config* out) {
  if (out == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "output kernel config is NULL");
  bool const full = out->struct_size >= sizeof(fa_kernel_config);
  if (!kernel_config_holds(*out, in.family)) {
    return fail(FA_STATUS_BAD_STRUCT_SIZE,
                "fa_kernel_config.struct_size = %zu is smaller than %zu: initialise it with "
                "fa_kernel_config_init()%s",
                out->struct_size, sizeof(fa_kernel_config),
                a_0_2_struct_cannot_hold(in.family).c_str());
  }
  out->dtype = static_cast<int32_t>(in.dtype);
  out->d_head = in.d_head;
  out->B_r = in.B_r;
  out->B_c = in.B_c;
  out->n_warps = in.n_warps;
  out->async_copy = in.async_copy;
  out->eager_load_blocks = in.eager_load_blocks;
  out->swizzled = in.swizzled;
  out->Q_mma_load_K_tiles = in.Q_mma_load_K_tiles;
  out->K_mma_load_K_tiles = in.K_mma_load_K_tiles;
  out->V_mma_load_K_tiles = in.V_mma_load_K_tiles;
  out->mma_double_buffer_loads = in.mma_double_buffer_loads;
  out->optimized_softmax = in.optimized_softmax;
  if (full) {
    out->family = in.family;
    out->stages = in.stages;
    out->overlap = in.overlap;
    out->pingpong = in.pingpong;
    out->persistent = in.persistent;
  }
  return FA_STATUS_SUCCESS;
}

}  // namespace fa
