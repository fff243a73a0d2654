// Test helpers shared by the CPU and GPU tests: dtype conversions, test problems and their memory
// layouts, seeded random data, naive references and error metrics. Header-only and independent of
// the library's sources (only the public flashattn.h is used), so a bug in the library's own
// conversions or layout handling cannot hide in the yardstick.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "flashattn.h"

namespace fa_test {

// ---- Dtype conversions --------------------------------------------------------------------------
// Written differently from the library on purpose: rounding goes through double arithmetic
// (frexp / nearbyint) instead of bit tricks.

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Bytes per element of an fa_dtype (1 for FA_DTYPE_E4M3, 2 for FA_DTYPE_FP16 / FA_DTYPE_BF16, 4
// for FA_DTYPE_FP32).
inline size_t dtype_bytes(int dtype) {
  return dtype == FA_DTYPE_FP32 ? 4 : dtype == FA_DTYPE_E4M3 ? 1 : 2;
}

// Rounds x to the nearest value (ties to even) of a binary format with `precision` significand
// bits (implicit bit included) and smallest normal exponent `min_exp`; beyond `max_finite` the
// result is +-inf. NaN and inf pass through.
inline double round_binary(double x, int precision, int min_exp, double max_finite) {
  if (!std::isfinite(x) || x == 0.0) {
    return x;
  }
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double quantum = std::ldexp(1.0, std::max(e - 1, min_exp) - (precision - 1));
  const double r = std::nearbyint(x / quantum) * quantum;  // the default mode rounds to even
  return std::fabs(r) > max_finite ? std::copysign(kInf, x) : r;
}

// Nearest value of the dtype (fp16: 11 bits, 2^-14, 65504; bf16: 8 bits, 2^-126, (2 - 2^-7) 2^127;
// fp32: 24 bits, 2^-126, FLT_MAX).
inline double round_to_dtype(int dtype, double x) {
  switch (dtype) {
    case FA_DTYPE_FP16:
      return round_binary(x, 11, -14, 65504.0);
    case FA_DTYPE_BF16:
      return round_binary(x, 8, -126, std::ldexp(255.0, 120));
    case FA_DTYPE_E4M3:
      return round_binary(x, 4, -6, 448.0);
    default:
      return round_binary(x, 24, -126, std::numeric_limits<float>::max());
  }
}

// Spacing of the dtype's values at |x| (the spacing of subnormals below the smallest normal).
inline double dtype_ulp(int dtype, double x) {
  const int precision = dtype == FA_DTYPE_FP16   ? 11
                        : dtype == FA_DTYPE_BF16 ? 8
                        : dtype == FA_DTYPE_E4M3 ? 4
                                                 : 24;
  const int min_exp = dtype == FA_DTYPE_FP16 ? -14 : dtype == FA_DTYPE_E4M3 ? -6 : -126;
  int e = min_exp + 1;
  if (x != 0.0 && std::isfinite(x)) {
    std::frexp(x, &e);
  }
  return std::ldexp(1.0, std::max(e - 1, min_exp) - (precision - 1));
}

inline double fp16_bits_to_double(uint16_t h) {
  const double sign = (h & 0x8000u) != 0 ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 0x1F) {
    return mantissa == 0 ? sign * kInf : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) {
    return sign * std::ldexp(mantissa, -24);
  }
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Rounds x to fp16 (ties to even) and encodes it. NaN becomes the quiet NaN 0x7E00.
inline uint16_t double_to_fp16_bits(double x) {
  const double r = round_to_dtype(FA_DTYPE_FP16, x);
  if (std::isnan(r)) {
    return 0x7E00;
  }
  const auto sign = static_cast<uint16_t>(std::signbit(r) ? 0x8000 : 0);
  const double a = std::fabs(r);
  if (std::isinf(a)) {
    return static_cast<uint16_t>(sign | 0x7C00);
  }
  if (a < std::ldexp(1.0, -14)) {
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(a, 24)));
  }
  int e = 0;
  const double f = std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1): field e + 14, mantissa 2f - 1
  const auto mantissa = static_cast<uint16_t>(std::ldexp(2.0 * f - 1.0, 10));
  return static_cast<uint16_t>(sign | ((e + 14) << 10) | mantissa);
}

inline double bf16_bits_to_double(uint16_t h) {
  float f = 0.0f;
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Rounds x to bf16 (ties to even) and encodes it. NaN becomes the quiet NaN 0x7FC0.
inline uint16_t double_to_bf16_bits(double x) {
  const double r = round_to_dtype(FA_DTYPE_BF16, x);
  if (std::isnan(r)) {
    return 0x7FC0;
  }
  const auto f = static_cast<float>(r);  // exact: every bf16 value is a float
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

// FP8 E4M3 (e4m3fn) from its definition: bias 7, subnormals m/8 * 2^-6, NaN at 0x7f and 0xff,
// no infinities (exponent 15 with mantissa < 7 is a normal value, up to 448).
inline double e4m3_bits_to_double(uint8_t x) {
  const double sign = (x & 0x80u) != 0 ? -1.0 : 1.0;
  const int exponent = (x >> 3) & 0xF;
  const int mantissa = x & 0x7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa / 8.0, -6);
  return sign * std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
}

// The e4m3 encoding of x rounded to nearest even (NaN beyond 448: the format has no infinity).
inline uint8_t double_to_e4m3_bits(double x) {
  const double r = round_binary(x, 4, -6, 448.0);
  if (!std::isfinite(r)) return 0x7Fu;
  const uint8_t sign = std::signbit(r) ? 0x80u : 0u;
  const double a = std::fabs(r);
  if (a < 0x1p-6) return static_cast<uint8_t>(sign | static_cast<unsigned>(a * 512.0));  // m 2^-9
  int exp = 0;
  const double frac = std::frexp(a, &exp);  // a = frac 2^exp, frac in [0.5, 1): 2 frac = 1.mmm
  const unsigned m = static_cast<unsigned>((2.0 * frac - 1.0) * 8.0);
  return static_cast<uint8_t>(sign | static_cast<unsigned>(exp - 1 + 7) << 3 | m);
}

// Element `index` of a dtype buffer, as double (exact).
inline double load_elem(int dtype, const void* base, int64_t index) {
  const auto* bytes = static_cast<const unsigned char*>(base) + index * dtype_bytes(dtype);
  if (dtype == FA_DTYPE_E4M3) return e4m3_bits_to_double(*bytes);
  if (dtype == FA_DTYPE_FP32) {
    float f = 0.0f;
    std::memcpy(&f, bytes, sizeof f);
    return f;
  }
  uint16_t h = 0;
  std::memcpy(&h, bytes, sizeof h);
  return dtype == FA_DTYPE_FP16 ? fp16_bits_to_double(h) : bf16_bits_to_double(h);
}

// Stores x rounded once (to nearest even) to the dtype.
inline void store_elem(int dtype, void* base, int64_t index, double x) {
  auto* bytes = static_cast<unsigned char*>(base) + index * dtype_bytes(dtype);
  if (dtype == FA_DTYPE_E4M3) {
    *bytes = double_to_e4m3_bits(x);
    return;
  }
  if (dtype == FA_DTYPE_FP32) {
    const auto f = static_cast<float>(x);
    std::memcpy(bytes, &f, sizeof f);
    return;
  }
  const uint16_t h = dtype == FA_DTYPE_FP16 ? double_to_fp16_bits(x) : double_to_bf16_bits(x);
  std::memcpy(bytes, &h, sizeof h);
}

// ---- Test problems and layouts ------------------------------------------------------------------

// Where one (batch, seq, head, dim) tensor lives: its first element's index in its buffer (q, k
// and v share the input buffer, o has the output buffer), and element strides (dim contiguous).
struct TensorLayout {
  int64_t offset = 0;
  int64_t batch_stride = 0;
  int64_t seq_stride = 0;
  int64_t head_stride = 0;
};

struct TestProblem {
  int dtype = FA_DTYPE_BF16;
  int64_t batch = 1;
  int64_t seqlen_q = 1;
  int64_t seqlen_k = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t head_dim = 1;
  int64_t head_dim_v = 0;  // as fa_config::head_dim_v: 0 means head_dim (see dim_v())
  bool causal = false;
  float scale = 0.0f;  // as fa_config::softmax_scale: 0 means 1/sqrt(head_dim)
  TensorLayout q, k, v, o;
  // Columns of v and o.
  int64_t dim_v() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
  int64_t in_elems = 0;   // size of the input buffer holding q, k and v, in elements
  int64_t out_elems = 0;  // size of the output buffer holding o, in elements
};

// Index of element (b, s, h, c) of a tensor in its buffer.
inline int64_t elem_index(const TensorLayout& t, int64_t b, int64_t s, int64_t h, int64_t c) {
  return t.offset + b * t.batch_stride + s * t.seq_stride + h * t.head_stride + c;
}

// One past the largest index a tensor of this shape reaches (strides are >= 0).
inline int64_t tensor_end(const TensorLayout& t, int64_t batch, int64_t seq, int64_t heads,
                          int64_t dim) {
  return elem_index(t, batch - 1, seq - 1, heads - 1, dim);
}

// Recomputes in_elems / out_elems from the layouts; call it after editing strides by hand (for
// example a stride of 0 to broadcast K/V over the batch).
inline void update_extents(TestProblem& p) {
  const int64_t d = p.head_dim, dv = p.dim_v();
  p.in_elems = std::max({tensor_end(p.q, p.batch, p.seqlen_q, p.heads_q, d),
                         tensor_end(p.k, p.batch, p.seqlen_k, p.heads_kv, d),
                         tensor_end(p.v, p.batch, p.seqlen_k, p.heads_kv, dv)});
  p.out_elems = tensor_end(p.o, p.batch, p.seqlen_q, p.heads_q, dv);
}

// Row-major [batch, seq, heads, dim] with `pad` unused elements after each head row, each
// sequence row and each batch, starting at element `offset`. Returns the index just past it.
inline int64_t padded_layout(TensorLayout& t, int64_t offset, int64_t batch, int64_t seq,
                             int64_t heads, int64_t dim, int64_t pad) {
  t.offset = offset;
  t.head_stride = dim + pad;
  t.seq_stride = heads * t.head_stride + pad;
  t.batch_stride = seq * t.seq_stride + pad;
  return offset + batch * t.batch_stride;
}

// q, k, v one after another in the input buffer, o in the output buffer; every row followed by
// `pad` unused elements (pad = 0: packed tensors), and o starting `pad` elements in, so that
// writes outside o's view land in poisoned memory.
inline void layout_padded(TestProblem& p, int64_t pad) {
  const int64_t d = p.head_dim, dv = p.dim_v();
  int64_t end = padded_layout(p.q, 0, p.batch, p.seqlen_q, p.heads_q, d, pad);
  end = padded_layout(p.k, end, p.batch, p.seqlen_k, p.heads_kv, d, pad);
  padded_layout(p.v, end, p.batch, p.seqlen_k, p.heads_kv, dv, pad);
  padded_layout(p.o, pad, p.batch, p.seqlen_q, p.heads_q, dv, pad);
  update_extents(p);
}

inline void layout_packed(TestProblem& p) { layout_padded(p, 0); }

// q, k, v as views into one packed QKV tensor [batch, seq, (heads_q + heads_kv) head_dim +
// heads_kv head_dim_v] (the layout of a fused QKV projection); o packed. Needs seqlen_q ==
// seqlen_k.
inline void layout_qkv_packed(TestProblem& p) {
  if (p.seqlen_q != p.seqlen_k) {
    throw std::invalid_argument("layout_qkv_packed needs seqlen_q == seqlen_k");
  }
  const int64_t d = p.head_dim, dv = p.dim_v();
  const int64_t row = (p.heads_q + p.heads_kv) * d + p.heads_kv * dv;
  const TensorLayout base{0, p.seqlen_q * row, row, d};
  p.q = base;
  p.k = base;
  p.k.offset = p.heads_q * d;
  p.v = base;
  p.v.offset = (p.heads_q + p.heads_kv) * d;
  p.v.head_stride = dv;
  padded_layout(p.o, 0, p.batch, p.seqlen_q, p.heads_q, dv, 0);
  update_extents(p);
}

// Every tensor as [batch, heads, seq, dim] (head stride > seq stride), o too.
inline void layout_heads_major(TestProblem& p) {
  auto place = [](TensorLayout& t, int64_t offset, int64_t batch, int64_t seq, int64_t heads,
                  int64_t d) {
    t = TensorLayout{offset, heads * seq * d, d, seq * d};
    return offset + batch * heads * seq * d;
  };
  const int64_t d = p.head_dim, dv = p.dim_v();
  int64_t end = place(p.q, 0, p.batch, p.seqlen_q, p.heads_q, d);
  end = place(p.k, end, p.batch, p.seqlen_k, p.heads_kv, d);
  place(p.v, end, p.batch, p.seqlen_k, p.heads_kv, dv);
  place(p.o, 0, p.batch, p.seqlen_q, p.heads_q, dv);
  update_extents(p);
}

// A problem with packed layout (layout_packed); head_dim_v 0 means head_dim.
inline TestProblem make_problem(int dtype, int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                int64_t heads_q, int64_t heads_kv, int64_t head_dim, bool causal,
                                float scale = 0.0f, int64_t head_dim_v = 0) {
  TestProblem p;
  p.dtype = dtype;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.causal = causal;
  p.scale = scale;
  layout_packed(p);
  return p;
}

// The scale the problem means, in double (1/sqrt(head_dim) when p.scale is 0).
inline double effective_scale(const TestProblem& p) {
  return p.scale != 0.0f ? static_cast<double>(p.scale)
                         : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
}

// An fa_config for the problem, every stride explicit (tensor pointers: elem_ptr(base, dtype,
// layout.offset)). Three zero strides of one tensor mean "packed" to the library.
inline fa_config make_config(const TestProblem& p) {
  fa_config c;
  fa_config_init(&c);
  c.dtype = p.dtype;
  c.causal = p.causal ? 1 : 0;
  c.batch = p.batch;
  c.seqlen_q = p.seqlen_q;
  c.seqlen_k = p.seqlen_k;
  c.heads_q = p.heads_q;
  c.heads_kv = p.heads_kv;
  c.head_dim = p.head_dim;
  c.head_dim_v = p.head_dim_v;
  c.softmax_scale = p.scale;
  c.q_batch_stride = p.q.batch_stride;
  c.q_seq_stride = p.q.seq_stride;
  c.q_head_stride = p.q.head_stride;
  c.k_batch_stride = p.k.batch_stride;
  c.k_seq_stride = p.k.seq_stride;
  c.k_head_stride = p.k.head_stride;
  c.v_batch_stride = p.v.batch_stride;
  c.v_seq_stride = p.v.seq_stride;
  c.v_head_stride = p.v.head_stride;
  c.o_batch_stride = p.o.batch_stride;
  c.o_seq_stride = p.o.seq_stride;
  c.o_head_stride = p.o.head_stride;
  return c;
}

// base + offset elements of the dtype (host or device pointers alike: no access is made).
inline const void* elem_ptr(const void* base, int dtype, int64_t offset) {
  const auto bytes = offset * static_cast<int64_t>(dtype_bytes(dtype));
  return static_cast<const unsigned char*>(base) + bytes;
}

inline void* elem_ptr(void* base, int dtype, int64_t offset) {
  const auto bytes = offset * static_cast<int64_t>(dtype_bytes(dtype));
  return static_cast<unsigned char*>(base) + bytes;
}

// ---- Data: random inputs, poisoned outputs ------------------------------------------------------

// Fills n elements with values uniform in [-1, -1/64] U [1/64, 1], rounded to the dtype: never 0
// or tiny, so a dropped term shows. Bits come straight from std::mt19937_64 (fully specified by
// the standard), so the data are the same with every standard library.
inline void fill_random(int dtype, void* buf, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr double kMinMagnitude = 1.0 / 64.0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    const double u = std::ldexp(static_cast<double>(bits >> 11), -53);  // [0, 1), 53 bits
    const double magnitude = kMinMagnitude + (1.0 - kMinMagnitude) * u;
    store_elem(dtype, buf, i, (bits & 1u) != 0 ? -magnitude : magnitude);
  }
}

// Fills n elements with a NaN bit pattern (0x7FFF for fp16/bf16, 0x7FFFFFFF for fp32), so an
// output element the library forgot to write reads as NaN.
inline void poison(int dtype, void* buf, int64_t n) {
  auto* bytes = static_cast<unsigned char*>(buf);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == FA_DTYPE_FP32) {
      const uint32_t nan = 0x7FFFFFFFu;
      std::memcpy(bytes + 4 * i, &nan, 4);
    } else if (dtype == FA_DTYPE_E4M3) {
      bytes[i] = 0x7Fu;
    } else {
      const uint16_t nan = 0x7FFFu;
      std::memcpy(bytes + 2 * i, &nan, 2);
    }
  }
}

inline void poison_lse(float* lse, int64_t n) {
  std::fill(lse, lse + n, std::numeric_limits<float>::quiet_NaN());
}

// Host buffers for one problem: `in` holds q, k and v (random), `out` holds o (poisoned), `lse`
// is [batch, heads_q, seqlen_q] (poisoned).
struct HostBuffers {
  std::vector<unsigned char> in;
  std::vector<unsigned char> out;
  std::vector<float> lse;

  const void* q(const TestProblem& p) const { return elem_ptr(in.data(), p.dtype, p.q.offset); }
  const void* k(const TestProblem& p) const { return elem_ptr(in.data(), p.dtype, p.k.offset); }
  const void* v(const TestProblem& p) const { return elem_ptr(in.data(), p.dtype, p.v.offset); }
  void* o(const TestProblem& p) { return elem_ptr(out.data(), p.dtype, p.o.offset); }
};

inline HostBuffers make_buffers(const TestProblem& p, uint64_t seed) {
  HostBuffers h;
  h.in.resize(static_cast<size_t>(p.in_elems) * dtype_bytes(p.dtype));
  h.out.resize(static_cast<size_t>(p.out_elems) * dtype_bytes(p.dtype));
  h.lse.resize(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q));
  fill_random(p.dtype, h.in.data(), p.in_elems, seed);
  poison(p.dtype, h.out.data(), p.out_elems);
  poison_lse(h.lse.data(), static_cast<int64_t>(h.lse.size()));
  return h;
}

// ---- Naive references ---------------------------------------------------------------------------

// o is packed [batch, seqlen_q, heads_q, head_dim_v], lse is [batch, heads_q, seqlen_q]; a row with
// no visible key has o = 0 and lse = -inf.
struct Reference {
  std::vector<double> o;
  std::vector<double> lse;
};

inline int64_t ref_o_index(const TestProblem& p, int64_t b, int64_t i, int64_t h, int64_t c) {
  return ((b * p.seqlen_q + i) * p.heads_q + h) * p.dim_v() + c;
}

inline int64_t ref_lse_index(const TestProblem& p, int64_t b, int64_t h, int64_t i) {
  return (b * p.heads_q + h) * p.seqlen_q + i;
}

// Number of keys query row i sees: all of them, or under the bottom-right aligned causal mask
// those with j <= i + seqlen_k - seqlen_q (possibly none).
inline int64_t visible_keys(const TestProblem& p, int64_t i) {
  if (!p.causal) {
    return p.seqlen_k;
  }
  return std::clamp(i + p.seqlen_k - p.seqlen_q + 1, int64_t{0}, p.seqlen_k);
}

// The whole input buffer (p.in_elems elements) decoded once, so the O(n^2 d) loops below index a
// plain array.
inline std::vector<double> decode_inputs(const TestProblem& p, const void* in) {
  std::vector<double> x(static_cast<size_t>(p.in_elems));
  for (int64_t i = 0; i < p.in_elems; ++i) {
    x[static_cast<size_t>(i)] = load_elem(p.dtype, in, i);
  }
  return x;
}

// Attention in float64 over the strided inputs in `in` (the buffer of HostBuffers::in).
inline Reference reference_f64(const TestProblem& p, const void* in) {
  const std::vector<double> x = decode_inputs(p, in);
  auto at = [&x](int64_t index) { return x[static_cast<size_t>(index)]; };
  const int64_t d = p.head_dim, dv = p.dim_v();
  const double scale = effective_scale(p);
  Reference r;
  r.o.assign(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q), -kInf);
  std::vector<double> s(static_cast<size_t>(p.seqlen_k));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t g = h / (p.heads_q / p.heads_kv);
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const int64_t n = visible_keys(p, i);
        if (n == 0) {
          continue;
        }
        double m = -kInf;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c) {
            dot += at(elem_index(p.q, b, i, h, c)) * at(elem_index(p.k, b, j, g, c));
          }
          s[static_cast<size_t>(j)] = scale * dot;
          m = std::max(m, s[static_cast<size_t>(j)]);
        }
        double l = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m);
          l += s[static_cast<size_t>(j)];
        }
        for (int64_t c = 0; c < dv; ++c) {
          double acc = 0.0;
          for (int64_t j = 0; j < n; ++j) {
            acc += s[static_cast<size_t>(j)] * at(elem_index(p.v, b, j, g, c));
          }
          r.o[static_cast<size_t>(ref_o_index(p, b, i, h, c))] = acc / l;
        }
        r.lse[static_cast<size_t>(ref_lse_index(p, b, h, i))] = m + std::log(l);
      }
    }
  }
  return r;
}

// What a plain 16-bit attention computes: fp32 scores from the dtype inputs, fp32 softmax, P
// rounded to the dtype, P.V accumulated in fp32 and divided by the fp32 row sum, O rounded to the
// dtype. Its error against reference_f64 is the yardstick for GPU kernels.
inline Reference reference_same_precision(const TestProblem& p, const void* in) {
  const std::vector<double> x = decode_inputs(p, in);
  auto at = [&x](int64_t index) { return static_cast<float>(x[static_cast<size_t>(index)]); };
  const int64_t d = p.head_dim, dv = p.dim_v();
  const auto scale = static_cast<float>(effective_scale(p));
  Reference r;
  r.o.assign(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q), -kInf);
  std::vector<float> s(static_cast<size_t>(p.seqlen_k));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t g = h / (p.heads_q / p.heads_kv);
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const int64_t n = visible_keys(p, i);
        if (n == 0) {
          continue;
        }
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0.0f;
          for (int64_t c = 0; c < d; ++c) {
            dot += at(elem_index(p.q, b, i, h, c)) * at(elem_index(p.k, b, j, g, c));
          }
          s[static_cast<size_t>(j)] = scale * dot;
          m = std::max(m, s[static_cast<size_t>(j)]);
        }
        float l = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          const float e = std::exp(s[static_cast<size_t>(j)] - m);
          l += e;
          s[static_cast<size_t>(j)] = static_cast<float>(round_to_dtype(p.dtype, e));
        }
        for (int64_t c = 0; c < dv; ++c) {
          float acc = 0.0f;
          for (int64_t j = 0; j < n; ++j) {
            acc += s[static_cast<size_t>(j)] * at(elem_index(p.v, b, j, g, c));
          }
          r.o[static_cast<size_t>(ref_o_index(p, b, i, h, c))] = round_to_dtype(p.dtype, acc / l);
        }
        r.lse[static_cast<size_t>(ref_lse_index(p, b, h, i))] = m + std::log(l);
      }
    }
  }
  return r;
}

// ---- Error metrics ------------------------------------------------------------------------------

// An element passes when |got - ref| <= atol + rtol |ref| + ulps * dtype_ulp(dtype, ref).
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  double ulps = 0.0;
};

struct ErrorStats {
  double max_abs = 0.0;       // max |got - ref| over elements where both are finite
  int64_t n_bad = 0;          // elements outside the tolerance, non-finite ones included
  bool non_finite = false;    // some element is NaN/inf where the reference is finite
  int64_t worst = -1;         // reference index of the element with the largest excess
  double worst_excess = -kInf;  // |got - ref| - tolerance there (inf: non-finite or wrong inf)
  double worst_got = 0.0;
  double worst_ref = 0.0;
};

// Folds one element into the stats. An infinite reference (LSE -inf of an empty row) needs the
// same infinity; a finite reference needs a finite value within `tol`.
inline void accumulate_error(ErrorStats& e, int64_t index, double got, double ref, double tol) {
  double excess = -kInf;
  if (!std::isfinite(ref)) {
    excess = got == ref ? -kInf : kInf;
  } else if (!std::isfinite(got)) {
    e.non_finite = true;
    excess = kInf;
  } else {
    const double err = std::fabs(got - ref);
    e.max_abs = std::max(e.max_abs, err);
    excess = err - tol;
  }
  if (excess > 0.0) {
    ++e.n_bad;
  }
  if (e.worst < 0 || excess > e.worst_excess) {
    e.worst = index;
    e.worst_excess = excess;
    e.worst_got = got;
    e.worst_ref = ref;
  }
}

inline double tolerance_at(int dtype, const Tolerance& tol, double ref) {
  return tol.atol + tol.rtol * std::fabs(ref) + tol.ulps * dtype_ulp(dtype, ref);
}

// Compares o (the base of the output buffer, HostBuffers::out, laid out as p.o says) with a
// reference's o. Tolerance ulps are of p.dtype.
inline ErrorStats compare_output(const TestProblem& p, const void* out,
                                 const std::vector<double>& ref_o, const Tolerance& tol) {
  ErrorStats e;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      for (int64_t h = 0; h < p.heads_q; ++h) {
        for (int64_t c = 0; c < p.dim_v(); ++c) {
          const int64_t r = ref_o_index(p, b, i, h, c);
          const double ref = ref_o[static_cast<size_t>(r)];
          const double got = load_elem(p.dtype, out, elem_index(p.o, b, i, h, c));
          accumulate_error(e, r, got, ref, tolerance_at(p.dtype, tol, ref));
        }
      }
    }
  }
  return e;
}

// Compares a float32 LSE ([batch, heads_q, seqlen_q], ref_lse.size() elements) with a reference's
// lse. Tolerance ulps are of fp32.
inline ErrorStats compare_lse(const float* lse, const std::vector<double>& ref_lse,
                              const Tolerance& tol) {
  ErrorStats e;
  for (size_t r = 0; r < ref_lse.size(); ++r) {
    const double ref = ref_lse[r];
    accumulate_error(e, static_cast<int64_t>(r), lse[r], ref,
                     tolerance_at(FA_DTYPE_FP32, tol, ref));
  }
  return e;
}

// Max |a - b| over two references of the same problem (equal infinities count as 0): for example
// the error of reference_same_precision against reference_f64.
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] != b[i]) {
      m = std::max(m, std::fabs(a[i] - b[i]));
    }
  }
  return a.size() == b.size() ? m : kInf;
}

// Whether every element of the output buffer outside o's view still holds the poison() pattern.
inline bool output_padding_intact(const TestProblem& p, const void* out) {
  std::vector<unsigned char> in_view(static_cast<size_t>(p.out_elems), 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const int64_t first = elem_index(p.o, b, i, h, 0);
        std::fill_n(in_view.begin() + first, p.dim_v(), 1);
      }
    }
  }
  const size_t bytes = dtype_bytes(p.dtype);
  std::vector<unsigned char> nan(bytes);
  poison(p.dtype, nan.data(), 1);
  const auto* data = static_cast<const unsigned char*>(out);
  for (size_t i = 0; i < in_view.size(); ++i) {
    if (in_view[i] == 0 && std::memcmp(data + i * bytes, nan.data(), bytes) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace fa_test
