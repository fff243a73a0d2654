#include "api/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "api/status.hpp"

namespace fa {

namespace {

// A caller built against a newer header may pass a larger struct; that is accepted when the fields
// this version does not know are all zero (their defaults), so a new feature is never silently
// ignored.
template <class S>
fa_status check_struct_size(S const* s, char const* name) {
  if (s->struct_size < sizeof(S)) {
    return fail(FA_STATUS_BAD_STRUCT_SIZE,
                "%s.struct_size = %zu is smaller than %zu: initialise it with %s_init()", name,
                s->struct_size, sizeof(S), name);
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
    int64_t term;
    if (__builtin_mul_overflow(d.extent - 1, d.stride, &term) ||
        __builtin_add_overflow(total, term, &total)) {
      return -1;
    }
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

fa_status resolve_strides(char const* name, int64_t seq, int64_t heads, int64_t dim,
                          int64_t const (&in)[3], TensorStrides* out) {
  static char const* const kDims[3] = {"batch", "seq", "head"};
  if (in[0] == 0 && in[1] == 0 && in[2] == 0) {
    int64_t row, batch;
    if (__builtin_mul_overflow(heads, dim, &row) || __builtin_mul_overflow(seq, row, &batch)) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config: packed tensor %s of %lld x %lld x %lld elements per batch entry "
                  "overflows int64",
                  name, static_cast<long long>(seq), static_cast<long long>(heads),
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

fa_status to_problem(fa_config const* c, Problem* out) {
  if (c == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "config is NULL");
  if (fa_status s = check_struct_size(c, "fa_config"); s != FA_STATUS_SUCCESS) return s;
  if (c->dtype != FA_DTYPE_FP16 && c->dtype != FA_DTYPE_BF16 && c->dtype != FA_DTYPE_FP32) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "fa_config.dtype = %d is not a fa_dtype", c->dtype);
  }
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

  Problem p;
  p.dtype = static_cast<DType>(c->dtype);
  p.causal = c->causal != 0;
  p.batch = c->batch;
  p.seqlen_q = c->seqlen_q;
  p.seqlen_k = c->seqlen_k;
  p.heads_q = c->heads_q;
  p.heads_kv = c->heads_kv;
  p.head_dim = c->head_dim;
  p.softmax_scale = c->softmax_scale != 0.f
                        ? c->softmax_scale
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c->head_dim)));

  struct Tensor {
    char const* name;
    int64_t seq, heads;
    int64_t strides[3];
    bool output;
    TensorStrides* out;
  };
  Tensor tensors[4] = {
      {"q", p.seqlen_q, p.heads_q, {c->q_batch_stride, c->q_seq_stride, c->q_head_stride}, false, &p.q},
      {"k", p.seqlen_k, p.heads_kv, {c->k_batch_stride, c->k_seq_stride, c->k_head_stride}, false, &p.k},
      {"v", p.seqlen_k, p.heads_kv, {c->v_batch_stride, c->v_seq_stride, c->v_head_stride}, false, &p.v},
      {"o", p.seqlen_q, p.heads_q, {c->o_batch_stride, c->o_seq_stride, c->o_head_stride}, true, &p.o},
  };
  for (Tensor& t : tensors) {
    fa_status s = resolve_strides(t.name, t.seq, t.heads, p.head_dim, t.strides, t.out);
    if (s != FA_STATUS_SUCCESS) return s;
    std::array<Dim, 4> dims = {Dim{p.batch, t.out->batch}, Dim{t.seq, t.out->seq},
                               Dim{t.heads, t.out->head}, Dim{p.head_dim, 1}};
    if (max_offset(dims) < 0) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config: tensor %s with strides (%lld, %lld, %lld) spans more than 2^63 elements",
                  t.name, static_cast<long long>(t.out->batch), static_cast<long long>(t.out->seq),
                  static_cast<long long>(t.out->head));
    }
    if (t.output && !non_overlapping(dims)) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_config: output strides (o_batch_stride = %lld, o_seq_stride = %lld, "
                  "o_head_stride = %lld) make elements of o overlap",
                  static_cast<long long>(t.out->batch), static_cast<long long>(t.out->seq),
                  static_cast<long long>(t.out->head));
    }
  }
  *out = p;
  return FA_STATUS_SUCCESS;
}

fa_status to_kernel_config(fa_kernel_config const* in, KernelConfig* out) {
  if (in == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "kernel config is NULL");
  if (fa_status s = check_struct_size(in, "fa_kernel_config"); s != FA_STATUS_SUCCESS) return s;
  struct Flag {
    char const* name;
    int32_t value;
  };
  for (Flag const& f : {Flag{"async_copy", in->async_copy},
                        Flag{"eager_load_blocks", in->eager_load_blocks},
                        Flag{"swizzled", in->swizzled},
                        Flag{"mma_double_buffer_loads", in->mma_double_buffer_loads},
                        Flag{"optimized_softmax", in->optimized_softmax}}) {
    if (f.value != 0 && f.value != 1) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_kernel_config.%s = %d must be 0 or 1", f.name,
                  f.value);
    }
  }
  *out = KernelConfig{static_cast<DType>(in->dtype), in->d_head, in->B_r, in->B_c, in->n_warps,
                      in->async_copy != 0, in->eager_load_blocks != 0, in->swizzled != 0,
                      in->Q_mma_load_K_tiles, in->K_mma_load_K_tiles, in->V_mma_load_K_tiles,
                      in->mma_double_buffer_loads != 0, in->optimized_softmax != 0};
  return FA_STATUS_SUCCESS;
}

fa_status from_kernel_config(KernelConfig const& in, fa_kernel_config* out) {
  if (out == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "output kernel config is NULL");
  if (out->struct_size < sizeof(fa_kernel_config)) {
    return fail(FA_STATUS_BAD_STRUCT_SIZE,
                "fa_kernel_config.struct_size = %zu is smaller than %zu: initialise it with "
                "fa_kernel_config_init()",
                out->struct_size, sizeof(fa_kernel_config));
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
  return FA_STATUS_SUCCESS;
}

}  // namespace fa
