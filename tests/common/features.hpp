// Test cases for the inference features (masks and biases, varlen batches, KV caches, paged KV,
// split-KV): a case description, its host data, a float64 reference written from the features'
// definitions in flashattn.h, and the comparison. Shared by the CPU and GPU tests. Only the public
// header and reference.hpp's dtype helpers are used, so the library's own addressing cannot hide
// in the yardstick.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "flashattn.h"

namespace fa_test {

struct FeatureCase {
  int dtype = FA_DTYPE_BF16;
  int layout = FA_LAYOUT_DENSE;
  int64_t heads_q = 4;
  int64_t heads_kv = 2;
  int64_t head_dim = 64;
  int64_t head_dim_v = 0;  // 0: head_dim (as fa_config)
  int kv_dtype = 0;   // 0: dtype (as fa_config)
  int out_dtype = 0;  // 0: as fa_config (dtype, or BF16 for e4m3 queries)
  // Descale factors (fa_run_args) for the e4m3 tensors: -1 none (NULL), else the fa_descale
  // granularity of random factors.
  int descale = -1;
  // Per sequence. Dense: every entry equal; caches: every sq equal. Caches: sk is the visible
  // length (cache_seqlens);
  // the capacity is the longest plus capacity_extra rows that must never be read.
  std::vector<int64_t> sq{17};
  std::vector<int64_t> sk{33};
  int64_t capacity_extra = 5;
  bool causal = false;
  bool window = false;
  int64_t left = -1;
  int64_t right = -1;
  float softcap = 0.0f;
  int alibi = FA_ALIBI_NONE;
  bool sinks = false;
  int64_t page_size = 0;  // paged layout
  // Caches only: K and V head-major, each K/V head's rows together: (batch, heads_kv, capacity,
  // d) as Hugging Face's static cache, pages (num_pages, heads_kv, page_size, d) as FlashInfer's
  // HND layout; else row-major, all heads of a key row together (vLLM's).
  bool head_major = false;
  int num_splits = 0;
  float scale = 0.0f;

  int64_t batch() const { return static_cast<int64_t>(sq.size()); }
  int64_t max_sq() const { return *std::max_element(sq.begin(), sq.end()); }
  int64_t max_sk() const { return *std::max_element(sk.begin(), sk.end()); }
  bool cache() const { return layout == FA_LAYOUT_KV_CACHE || layout == FA_LAYOUT_PAGED_KV; }
  int64_t capacity() const { return cache() ? max_sk() + capacity_extra : max_sk(); }
  int64_t dim_v() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
  int kv_type() const { return kv_dtype != 0 ? kv_dtype : dtype; }
  int o_type() const {
    return dtype != FA_DTYPE_E4M3 ? dtype : out_dtype != 0 ? out_dtype : FA_DTYPE_BF16;
  }
  // o's head stride: packed, or with a head_dim_v that differs, kOutPad poisoned columns after
  // each head's row that the library must never write.
  int64_t o_cols() const { return dim_v() + (dim_v() != head_dim ? kOutPad : 0); }
  static constexpr int64_t kOutPad = 8;
  int64_t total_q() const { return std::accumulate(sq.begin(), sq.end(), int64_t{0}); }
  int64_t total_k() const { return std::accumulate(sk.begin(), sk.end(), int64_t{0}); }
  double effective_scale() const {
    return scale != 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  }
};

inline std::string describe(const FeatureCase& c) {
  std::ostringstream s;
  s << "dtype " << c.dtype << " layout " << c.layout << " heads " << c.heads_q << '/' << c.heads_kv
    << " d " << c.head_dim << '/' << c.dim_v() << " sq [";
  for (int64_t x : c.sq) s << x << ' ';
  s << "] sk [";
  for (int64_t x : c.sk) s << x << ' ';
  s << "] causal " << c.causal << " window " << c.window << " (" << c.left << ", " << c.right
    << ") softcap " << c.softcap << " alibi " << c.alibi << " sinks " << c.sinks << " page "
    << c.page_size << " splits " << c.num_splits << " scale " << c.scale << " kv_dtype "
    << c.kv_type() << " out_dtype " << c.o_type() << " descale " << c.descale
    << (c.head_major ? " head-major" : "");
  return s.str();
}

// Host data of one case: packed tensors (q, o by the layout's rows; k, v as the layout stores
// them), index tensors, slopes, sinks, and the config.
struct FeatureData {
  FeatureCase c;
  fa_config config{};
  std::vector<unsigned char> q, k, v, o;
  std::vector<float> lse;
  std::vector<int32_t> cu_q, cu_k, cache_seqlens, block_table;
  std::vector<float> slopes, sinks;
  std::vector<float> q_descale, k_descale, v_descale;  // empty: NULL (1.0)
  int64_t q_rows = 0;  // rows of q/o (batch * max_sq, or total_q)
  int64_t k_rows = 0;  // rows of k/v (batch * capacity, total_k, or num_pages * page_size)

  // Row of q/o for query i of sequence b.
  int64_t q_row(int64_t b, int64_t i) const {
    return c.layout == FA_LAYOUT_VARLEN ? cu_q[static_cast<size_t>(b)] + i : b * c.max_sq() + i;
  }
  // Element index of q row (b, i), head h, column 0.
  int64_t q_index(int64_t b, int64_t i, int64_t h) const {
    return (q_row(b, i) * c.heads_q + h) * c.head_dim;
  }
  // Element index of o row (b, i), head h, column 0.
  int64_t o_index(int64_t b, int64_t i, int64_t h) const {
    return (q_row(b, i) * c.heads_q + h) * c.o_cols();
  }
  // Element index of key row j of sequence b, K/V head g, column 0 of k (dim head_dim) or, with
  // `dim` = head_dim_v, of v.
  int64_t k_index(int64_t b, int64_t j, int64_t g) const { return kv_index(b, j, g, c.head_dim); }
  int64_t v_index(int64_t b, int64_t j, int64_t g) const { return kv_index(b, j, g, c.dim_v()); }
  int64_t kv_index(int64_t b, int64_t j, int64_t g, int64_t dim) const {
    int64_t row = 0;
    switch (c.layout) {
      case FA_LAYOUT_VARLEN:
        row = cu_k[static_cast<size_t>(b)] + j;
        break;
      case FA_LAYOUT_PAGED_KV: {
        const int64_t pages = config.max_pages_per_seq;
        const int32_t page = block_table[static_cast<size_t>(b * pages + j / c.page_size)];
        if (c.head_major) return ((page * c.heads_kv + g) * c.page_size + j % c.page_size) * dim;
        row = page * c.page_size + j % c.page_size;
        break;
      }
      default:
        if (c.cache() && c.head_major) return ((b * c.heads_kv + g) * c.capacity() + j) * dim;
        row = b * c.capacity() + j;
    }
    return (row * c.heads_kv + g) * dim;
  }
  int64_t lse_index(int64_t b, int64_t h, int64_t i) const {
    return c.layout == FA_LAYOUT_VARLEN ? h * c.total_q() + cu_q[static_cast<size_t>(b)] + i
                                        : (b * c.heads_q + h) * c.max_sq() + i;
  }
  fa_run_args args(const void* cu_q_p, const void* cu_k_p, const void* cache_p, const void* table_p,
                   const void* slopes_p, const void* sinks_p) const {
    fa_run_args a;
    fa_run_args_init(&a);
    a.cu_seqlens_q = static_cast<const int32_t*>(cu_q_p);
    a.cu_seqlens_k = static_cast<const int32_t*>(cu_k_p);
    a.cache_seqlens = static_cast<const int32_t*>(cache_p);
    a.block_table = static_cast<const int32_t*>(table_p);
    a.alibi_slopes = static_cast<const float*>(slopes_p);
    a.sinks = static_cast<const float*>(sinks_p);
    return a;
  }
  // fa_run_args pointing at the host vectors (NULL where empty).
  fa_run_args host_args() const {
    auto ptr = [](const auto& v) -> const void* { return v.empty() ? nullptr : v.data(); };
    fa_run_args a =
        args(ptr(cu_q), ptr(cu_k), ptr(cache_seqlens), ptr(block_table), ptr(slopes), ptr(sinks));
    a.q_descale = static_cast<const float*>(ptr(q_descale));
    a.k_descale = static_cast<const float*>(ptr(k_descale));
    a.v_descale = static_cast<const float*>(ptr(v_descale));
    return a;
  }
  // The descale factor of sequence b's K/V head g (1 where none is given), as the header defines.
  double descale_of(const std::vector<float>& f, int64_t b, int64_t g) const {
    if (f.empty()) return 1.0;
    return c.descale == FA_DESCALE_PER_HEAD_KV ? f[static_cast<size_t>(b * c.heads_kv + g)] : f[0];
  }
};

inline std::vector<unsigned char> random_bytes(int dtype, int64_t n, uint64_t seed) {
  std::vector<unsigned char> buf(static_cast<size_t>(n) * dtype_bytes(dtype));
  fill_random(dtype, buf.data(), n, seed);
  return buf;
}

inline FeatureData make_feature_data(const FeatureCase& c, uint64_t seed) {
  FeatureData d;
  d.c = c;
  const int64_t B = c.batch(), D = c.head_dim, Dv = c.dim_v(), Do = c.o_cols();
  std::mt19937_64 rng(seed);
  fa_config& f = d.config;
  fa_config_init(&f);
  f.dtype = c.dtype;
  f.layout = c.layout;
  f.causal = c.causal ? 1 : 0;
  f.batch = B;
  f.seqlen_q = c.max_sq();
  f.seqlen_k = c.capacity();
  f.heads_q = c.heads_q;
  f.heads_kv = c.heads_kv;
  f.head_dim = D;
  f.head_dim_v = c.head_dim_v;
  f.softmax_scale = c.scale;
  f.window = c.window ? 1 : 0;
  f.window_left = c.window ? c.left : 0;
  f.window_right = c.window ? c.right : 0;
  f.softcap = c.softcap;
  f.alibi = c.alibi;
  f.sinks = c.sinks ? 1 : 0;
  f.num_splits = c.num_splits;
  f.kv_dtype = c.kv_dtype;
  f.out_dtype = c.out_dtype;
  f.descale = c.descale > 0 ? c.descale : FA_DESCALE_PER_TENSOR;

  if (c.layout == FA_LAYOUT_VARLEN) {
    d.cu_q.assign(1, 0);
    d.cu_k.assign(1, 0);
    for (int64_t b = 0; b < B; ++b) {
      d.cu_q.push_back(static_cast<int32_t>(d.cu_q.back() + c.sq[static_cast<size_t>(b)]));
      d.cu_k.push_back(static_cast<int32_t>(d.cu_k.back() + c.sk[static_cast<size_t>(b)]));
    }
    d.q_rows = std::max<int64_t>(c.total_q(), 1);
    d.k_rows = std::max<int64_t>(c.total_k(), 1);
    f.total_q = d.q_rows;
    f.total_k = d.k_rows;
  } else {
    d.q_rows = B * c.max_sq();
    d.k_rows = B * c.capacity();
  }
  if (c.cache()) {
    for (int64_t x : c.sk) d.cache_seqlens.push_back(static_cast<int32_t>(x));
  }
  if (c.layout == FA_LAYOUT_PAGED_KV) {
    const int64_t per_seq = (c.capacity() + c.page_size - 1) / c.page_size;
    const int64_t pages = B * per_seq + 2;  // two pages no sequence owns
    std::vector<int32_t> order(static_cast<size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    d.block_table.resize(static_cast<size_t>(B * per_seq));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t used = (c.sk[static_cast<size_t>(b)] + c.page_size - 1) / c.page_size;
      for (int64_t i = 0; i < per_seq; ++i) {
        // Entries past the visible rows are padding a kernel must not follow.
        d.block_table[static_cast<size_t>(b * per_seq + i)] =
            i < used ? order[static_cast<size_t>(b * per_seq + i)] : -1;
      }
    }
    f.num_pages = pages;
    f.page_size = c.page_size;
    f.max_pages_per_seq = per_seq;
    d.k_rows = pages * c.page_size;
    f.k_batch_stride = c.page_size * c.heads_kv * D;
    f.v_batch_stride = c.page_size * c.heads_kv * Dv;
    f.k_seq_stride = c.heads_kv * D;
    f.v_seq_stride = c.heads_kv * Dv;
    f.k_head_stride = D;
    f.v_head_stride = Dv;
    if (c.head_major) {
      f.k_seq_stride = D;
      f.v_seq_stride = Dv;
      f.k_head_stride = c.page_size * D;
      f.v_head_stride = c.page_size * Dv;
    }
  } else if (c.cache() && c.head_major) {
    f.k_batch_stride = c.heads_kv * c.capacity() * D;
    f.v_batch_stride = c.heads_kv * c.capacity() * Dv;
    f.k_seq_stride = D;
    f.v_seq_stride = Dv;
    f.k_head_stride = c.capacity() * D;
    f.v_head_stride = c.capacity() * Dv;
  }
  if (c.layout == FA_LAYOUT_VARLEN) {
    f.q_seq_stride = c.heads_q * D;
    f.o_seq_stride = c.heads_q * Do;
    f.k_seq_stride = c.heads_kv * D;
    f.v_seq_stride = c.heads_kv * Dv;
    f.q_head_stride = f.k_head_stride = D;
    f.v_head_stride = Dv;
    f.o_head_stride = Do;
  } else if (Do != Dv) {
    f.o_batch_stride = c.max_sq() * c.heads_q * Do;
    f.o_seq_stride = c.heads_q * Do;
    f.o_head_stride = Do;
  }
  d.q = random_bytes(c.dtype, d.q_rows * c.heads_q * D, seed + 1);
  d.k = random_bytes(c.kv_type(), d.k_rows * c.heads_kv * D, seed + 2);
  d.v = random_bytes(c.kv_type(), d.k_rows * c.heads_kv * Dv, seed + 3);
  d.o.resize(static_cast<size_t>(d.q_rows * c.heads_q * Do) * dtype_bytes(c.o_type()));
  poison(c.o_type(), d.o.data(), d.q_rows * c.heads_q * Do);
  if (c.descale >= 0) {
    // Factors away from 1 (and different per head), so a dropped or misindexed one shows.
    std::uniform_real_distribution<float> factor(0.25f, 4.0f);
    const size_t n = static_cast<size_t>(c.descale == FA_DESCALE_PER_HEAD_KV ? B * c.heads_kv : 1);
    auto make = [&](std::vector<float>& f) {
      f.resize(n);
      for (float& x : f) x = factor(rng);
    };
    if (c.dtype == FA_DTYPE_E4M3) make(d.q_descale);
    if (c.kv_type() == FA_DTYPE_E4M3) {
      make(d.k_descale);
      make(d.v_descale);
    }
  }
  d.lse.resize(static_cast<size_t>(d.q_rows * c.heads_q));
  poison_lse(d.lse.data(), static_cast<int64_t>(d.lse.size()));
  std::uniform_real_distribution<float> slope(0.01f, 0.3f), sink(-1.0f, 2.0f);
  if (c.alibi != FA_ALIBI_NONE) {
    d.slopes.resize(static_cast<size_t>(c.alibi == FA_ALIBI_PER_BATCH ? B * c.heads_q : c.heads_q));
    for (float& x : d.slopes) x = slope(rng);
  }
  if (c.sinks) {
    d.sinks.resize(static_cast<size_t>(c.heads_q));
    for (float& x : d.sinks) x = sink(rng);
  }
  return d;
}

struct FeatureReference {
  std::vector<double> o;    // [q_rows, heads_q, o_cols()] like the output
  std::vector<double> lse;  // like the lse output
};

// Attention in float64 from the definitions in flashattn.h. With `e4m3_p`, also (in the same
// pass) a naive FP8 reference there: each normalised probability rounded to e4m3 (subnormals
// kept) before P V, the yardstick of the FP8 kernels' error (they also round P to e4m3, scaled:
// src/cuda/sm90/softmax.cuh).
inline FeatureReference feature_reference(const FeatureData& d,
                                          FeatureReference* e4m3_p = nullptr) {
  const FeatureCase& c = d.c;
  const int64_t D = c.head_dim, Dv = c.dim_v(), group = c.heads_q / c.heads_kv;
  const double scale = c.effective_scale();
  FeatureReference r;
  r.o.assign(static_cast<size_t>(d.q_rows * c.heads_q * c.o_cols()), 0.0);
  r.lse.assign(d.lse.size(), -kInf);
  if (e4m3_p != nullptr) *e4m3_p = r;
  auto decode = [&](int dtype, const std::vector<unsigned char>& buf) {
    std::vector<double> out(buf.size() / dtype_bytes(dtype));
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_elem(dtype, buf.data(), static_cast<int64_t>(i));
    return out;
  };
  const std::vector<double> q = decode(c.dtype, d.q), k = decode(c.kv_type(), d.k),
                            v = decode(c.kv_type(), d.v);
  std::vector<double> p;
  for (int64_t b = 0; b < c.batch(); ++b) {
    const int64_t sq = c.sq[static_cast<size_t>(b)], sk = c.sk[static_cast<size_t>(b)];
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t diag = i + sk - sq;
        const int64_t qi = d.q_index(b, i, h);
        p.assign(static_cast<size_t>(sk), -kInf);
        double top = c.sinks ? d.sinks[static_cast<size_t>(h)] : -kInf;
        for (int64_t j = 0; j < sk; ++j) {
          bool visible = !c.causal || j <= diag;
          if (c.window && c.left >= 0 && j < diag - c.left) visible = false;
          if (c.window && c.right >= 0 && j > diag + c.right) visible = false;
          if (!visible) continue;
          const int64_t kj = d.k_index(b, j, g);
          double s = 0.0;
          for (int64_t x = 0; x < D; ++x) {
            s += q[static_cast<size_t>(qi + x)] * k[static_cast<size_t>(kj + x)];
          }
          s *= scale * d.descale_of(d.q_descale, b, g) * d.descale_of(d.k_descale, b, g);
          if (c.softcap > 0.0f) s = c.softcap * std::tanh(s / c.softcap);
          if (c.alibi != FA_ALIBI_NONE) {
            const double m = d.slopes[static_cast<size_t>(
                c.alibi == FA_ALIBI_PER_BATCH ? b * c.heads_q + h : h)];
            s -= m * static_cast<double>(std::llabs(diag - j));
          }
          p[static_cast<size_t>(j)] = s;
          if (s > top || std::isnan(s)) top = s;  // a NaN score makes the row NaN (the header)
        }
        const int64_t oi = d.o_index(b, i, h);
        if (top == -kInf) continue;  // nothing visible, no sink: O = 0, LSE = -inf
        double sum = c.sinks ? std::exp(d.sinks[static_cast<size_t>(h)] - top) : 0.0;
        for (double& x : p) {
          x = x == -kInf ? 0.0 : std::exp(x - top);
          sum += x;
        }
        for (int64_t j = 0; j < sk; ++j) {
          // A key of weight 0 adds nothing, whatever v_descale is (0 * inf would be NaN).
          const double pw = p[static_cast<size_t>(j)] / sum;
          if (pw == 0.0) continue;
          const double w = pw * d.descale_of(d.v_descale, b, g);
          const int64_t vj = d.v_index(b, j, g);
          for (int64_t x = 0; x < Dv; ++x) {
            r.o[static_cast<size_t>(oi + x)] += w * v[static_cast<size_t>(vj + x)];
          }
          if (e4m3_p != nullptr) {
            // pw rounded to e4m3 (3 mantissa bits, subnormals from 2^-6; pw <= 1).
            const double w8 = round_binary(pw, 4, -6, 448.0) * d.descale_of(d.v_descale, b, g);
            for (int64_t x = 0; x < Dv; ++x) {
              e4m3_p->o[static_cast<size_t>(oi + x)] += w8 * v[static_cast<size_t>(vj + x)];
            }
          }
        }
        r.lse[static_cast<size_t>(d.lse_index(b, h, i))] = top + std::log(sum);
        if (e4m3_p != nullptr) e4m3_p->lse[static_cast<size_t>(d.lse_index(b, h, i))] = top + std::log(sum);
      }
    }
  }
  return r;
}

struct FeatureErrors {
  double o_max = 0.0;     // largest |o - ref| over the rows the case defines
  double lse_max = 0.0;   // largest |lse - ref| (matching infinities and NaNs count 0)
  int64_t bad = 0;        // elements where a NaN or an infinity does not match the reference's
  int64_t written_past = 0;  // o columns past head_dim_v (o_cols() > dim_v()) not left poisoned
};

// Compares o and lse (host copies laid out as in `d`) with the reference over every row of
// every sequence, and counts the columns past head_dim_v that were written.
inline FeatureErrors compare_features(const FeatureData& d, const void* o, const float* lse,
                                      const FeatureReference& r) {
  const FeatureCase& c = d.c;
  FeatureErrors e;
  for (int64_t b = 0; b < c.batch(); ++b) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      for (int64_t i = 0; i < c.sq[static_cast<size_t>(b)]; ++i) {
        const int64_t oi = d.o_index(b, i, h);
        for (int64_t x = 0; x < c.dim_v(); ++x) {
          const double got = load_elem(c.o_type(), o, oi + x), want = r.o[static_cast<size_t>(oi + x)];
          // A NaN on one side only is wrong (std::max would drop |got - NaN|); o starts
          // poisoned with NaN, so an element never written is one.
          if (std::isnan(got) || std::isnan(want)) {
            if (!(std::isnan(got) && std::isnan(want))) ++e.bad;
            continue;
          }
          e.o_max = std::max(e.o_max, std::fabs(got - want));
        }
        for (int64_t x = c.dim_v(); x < c.o_cols(); ++x) {
          if (!std::isnan(load_elem(c.o_type(), o, oi + x))) ++e.written_past;
        }
        const auto li = static_cast<size_t>(d.lse_index(b, h, i));
        const double got = lse[li], want = r.lse[li];
        if (std::isnan(got) || std::isnan(want)) {
          if (!(std::isnan(got) && std::isnan(want))) ++e.bad;
        } else if (std::isinf(want) || std::isinf(got)) {
          if (got != want) ++e.bad;
        } else {
          e.lse_max = std::max(e.lse_max, std::fabs(got - want));
        }
      }
    }
  }
  return e;
}

}  // namespace fa_test
