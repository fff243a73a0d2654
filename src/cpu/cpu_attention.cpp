// FlashAttention-2 forward on the CPU: each work unit is one (batch, query head, query tile); it
// walks the visible key tiles with an online softmax, so no seqlen_q x seqlen_k matrix is stored.
#include "cpu/cpu_attention.hpp"

#include "core/status.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <new>
#include <thread>
#include <vector>

namespace fa::cpu {
namespace {

// Query rows per work unit. Each converted K/V tile serves 64 rows, so conversion is ~1/64 of the
// dot-product work, and 2048 rows x 8 heads still give 256 units to balance over the threads.
constexpr int64_t kBlockQ = 64;
// Keys per tile: the 64 x 64 fp32 score tile (16 KiB) and, at d = 128, the K and V tiles (32 KiB
// each) stay in L2 next to the Q tile and the accumulator.
constexpr int64_t kBlockK = 64;
// Output columns per P.V step: 16 fp32 (four SSE vectors) with a trip count known at compile
// time, so GCC's -O2 "very cheap" vectoriser needs no epilogue; head_dim and head_dim_v are
// padded to it.
constexpr int64_t kLanes = 16;
// Query rows per score step: each K^T row loaded from L1 feeds 2 rows. Measured (1 x 8 x 2048^2,
// d = 128, one core): 1 row 0.97 s, 2 rows 0.87 s, 4 rows 0.85 s.
constexpr int64_t kScoreRows = 2;
// Query rows per P.V step. GCC keeps the accumulators on the stack, so each update waits for the
// previous store (~5 cycles); 8 rows x 4 vectors give 32 independent chains to hide that. Measured
// as above: 2 rows 0.87 s, 4 rows 0.80 s, 8 rows 0.72 s, 16 rows 0.78 s.
constexpr int64_t kPvRows = 8;

// Largest head_dim + head_dim_v whose workspace (a [64][dp] Q tile and a [dp][64] K tile, a
// [64][dpv] V tile and accumulator, a 64 x 64 score tile, 2 x 64 row statistics; dp and dpv each
// at most kLanes - 1 columns past their dim) has a byte count that fits int64_t: larger ones
// could never be allocated, and std::vector would throw std::length_error instead of
// std::bad_alloc. Both dims are below 2^60 (checked extents), so their sum cannot overflow.
constexpr int64_t kMaxDimSum =
    (std::numeric_limits<int64_t>::max() / 4 - kBlockQ * kBlockK - 2 * kBlockQ) /
        (kBlockQ + kBlockK) -
    2 * kLanes;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- Element conversions (round to nearest even; inf, NaN and subnormals kept) ------------------

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits = sign;
  if (exponent == 0x1Fu) {
    bits |= 0x7F800000u | (mantissa << 13);  // inf, or NaN with its payload
  } else if (exponent != 0) {
    bits |= ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa != 0) {
    // Subnormal mantissa * 2^-24: shift the leading 1 up to bit 10 (the implicit bit), starting
    // from 2^-14's binary32 exponent 113 and lowering it once per shift.
    uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits |= (e << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) {
    return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));  // quiet NaN
  }
  // 0x477FF000 is 65520, halfway between the largest half 65504 (odd mantissa) and 2^16: a tie
  // rounds to even, which is infinity.
  if (ax >= 0x477FF000u) {
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (ax >= 0x38800000u) {  // >= 2^-14: a normal half
    const uint32_t r = ax - (112u << 23);  // rebias 127 -> 15
    return static_cast<uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (ax < 0x33000000u) {  // < 2^-25, under half the smallest subnormal 2^-24
    return sign;
  }
  // Subnormal result: round |f| * 2^24 = mantissa * 2^(e - 126) to an integer; e is in [102, 112].
  const uint32_t mantissa = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - (ax >> 23);
  uint32_t r = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (r & 1u) != 0)) {
    ++r;  // may carry into 0x400, the smallest normal: still the right encoding
  }
  return static_cast<uint16_t>(sign | r);
}

float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN (truncation could make it inf)
  }
  // Cannot overflow 32 bits: the largest magnitude 0xFF7FFFFF + 0x8000 < 2^32. Carries into the
  // exponent are the correct rounding, up to infinity.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// FP8 E4M3 (e4m3fn): exponent bias 7, no infinities, NaN only at magnitude 0x7f. Every value is
// exact in float32, so the decode is exact.
float e4m3_to_float(uint8_t x) {
  const uint32_t sign = static_cast<uint32_t>(x & 0x80u) << 24;
  const uint32_t exponent = (x >> 3) & 0xFu;
  const uint32_t mantissa = x & 0x7u;
  if (exponent == 0xFu && mantissa == 0x7u) {
    return std::bit_cast<float>(sign | 0x7FC00000u);
  }
  if (exponent == 0) {
    // Subnormal mantissa * 2^-9 (0 included), exact as a float product.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-9f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));  // 7 -> 127
}

struct Fp16 {
  using Storage = uint16_t;
  static float load(Storage x) { return fp16_to_float(x); }
  static Storage store(float x) { return float_to_fp16(x); }
};

struct Bf16 {
  using Storage = uint16_t;
  static float load(Storage x) { return bf16_to_float(x); }
  static Storage store(float x) { return float_to_bf16(x); }
};

struct Fp32 {
  using Storage = float;
  static float load(Storage x) { return x; }
  static Storage store(float x) { return x; }
};

// An input type only: o is never e4m3, so there is no store.
struct E4m3 {
  using Storage = uint8_t;
  static float load(Storage x) { return e4m3_to_float(x); }
};

// ---- Per-thread tiles ---------------------------------------------------------------------------

// A head dim rounded up to kLanes; the padding columns of V and the accumulator stay 0.
int64_t padded_dim(int64_t d) { return (d + kLanes - 1) / kLanes * kLanes; }

struct Workspace {
  // `padded`: head_dim (q and k columns), `padded_v`: head_dim_v (v and o columns), each rounded
  // up by padded_dim.
  Workspace(int64_t padded, int64_t padded_v)
      : dp(padded),
        dpv(padded_v),
        q(static_cast<size_t>(kBlockQ * padded)),
        kt(static_cast<size_t>(padded * kBlockK)),
        v(static_cast<size_t>(kBlockK * padded_v)),
        acc(static_cast<size_t>(kBlockQ * padded_v)),
        s(static_cast<size_t>(kBlockQ * kBlockK)),
        m(static_cast<size_t>(kBlockQ)),
        l(static_cast<size_t>(kBlockQ)) {}

  int64_t dp;
  int64_t dpv;
  std::vector<float> q;    // [kBlockQ][dp] query rows
  std::vector<float> kt;   // [dp][kBlockK] key tile, transposed so score loops run over keys
  std::vector<float> v;    // [kBlockK][dpv] value tile
  std::vector<float> acc;  // [kBlockQ][dpv] unnormalised output rows
  std::vector<float> s;    // [kBlockQ][kBlockK] scaled scores, then probabilities
  std::vector<float> m;    // running row maxima
  std::vector<float> l;    // running row sums of exp(score - m)
};

struct Tensors {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  RunPointers run;
};

int64_t offset(const TensorStrides& st, int64_t b, int64_t s, int64_t h) {
  return b * st.batch + s * st.seq + h * st.head;
}

// Where one sequence's rows live, whatever the layout: its lengths, and the element offsets of
// its query/output rows and of its key/value rows (a paged cache looks each row's page up).
struct Sequence {
  const Problem& p;
  const Tensors& t;
  int64_t b;
  int64_t sq;       // query rows
  int64_t sk;       // visible key rows
  int64_t q_first;  // varlen: first row in the packed q/o; else 0
  int64_t k_first;  // varlen: first row in the packed k/v; else 0

  Sequence(const Problem& problem, const Tensors& tensors, int64_t batch)
      : p(problem), t(tensors), b(batch), sq(p.seqlen_q), sk(p.seqlen_k), q_first(0), k_first(0) {
    const RunPointers& r = t.run;
    if (p.layout == Layout::kVarlen) {
      q_first = r.cu_seqlens_q[b];
      k_first = r.cu_seqlens_k[b];
      sq = r.cu_seqlens_q[b + 1] - q_first;
      sk = r.cu_seqlens_k[b + 1] - k_first;
    } else if (p.needs_cache_seqlens()) {
      sk = r.cache_seqlens[b];
    }
  }
  int64_t q_offset(const TensorStrides& st, int64_t i, int64_t h) const {
    return p.layout == Layout::kVarlen ? (q_first + i) * st.seq + h * st.head : offset(st, b, i, h);
  }
  int64_t k_offset(const TensorStrides& st, int64_t j, int64_t g) const {
    switch (p.layout) {
      case Layout::kVarlen:
        return (k_first + j) * st.seq + g * st.head;
      case Layout::kPagedKv: {
        const int64_t page = t.run.block_table[b * p.max_pages_per_seq + j / p.page_size];
        return offset(st, page, j % p.page_size, g);
      }
      default:
        return offset(st, b, j, g);
    }
  }
  int64_t lse_offset(int64_t h, int64_t i) const {
    return p.layout == Layout::kVarlen ? h * p.total_q + q_first + i
                                       : (b * p.heads_q + h) * p.seqlen_q + i;
  }
  float alibi_slope(int64_t h) const {
    switch (p.alibi) {
      case Alibi::kPerHead:
        return t.run.alibi_slopes[h];
      case Alibi::kPerBatch:
        return t.run.alibi_slopes[b * p.heads_q + h];
      default:
        return 0.0f;
    }
  }
};

// Scores of rows [i, i + R) against the whole key tile (columns past the tile's keys hold stale
// keys; nothing reads their scores). The accumulators are a local array, so the compiler knows they
// alias neither tile, and the 64-key inner loop keeps 16 SSE vectors in flight per row: each
// accumulator is stored and reloaded only every 16th vector, so the store-to-load latency (~5
// cycles) never stalls the loop.
template <int64_t R>
void score_rows(Workspace& w, int64_t i, int64_t d, float scale) {
  float a[R][kBlockK] = {};
  for (int64_t c = 0; c < d; ++c) {
    const float* kr = w.kt.data() + c * kBlockK;
    for (int64_t r = 0; r < R; ++r) {
      const float qc = w.q[static_cast<size_t>((i + r) * w.dp + c)];
      for (int64_t j = 0; j < kBlockK; ++j) {
        a[r][j] += qc * kr[j];
      }
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    float* sr = w.s.data() + (i + r) * kBlockK;
    for (int64_t j = 0; j < kBlockK; ++j) {
      sr[j] = a[r][j] * scale;
    }
  }
}

// acc[i + r] += P[i + r, :n_keys] . V[:n_keys] for r < R.
template <int64_t R>
void accumulate_rows(Workspace& w, int64_t i, int64_t n_keys) {
  for (int64_t c0 = 0; c0 < w.dpv; c0 += kLanes) {
    float a[R][kLanes];
    for (int64_t r = 0; r < R; ++r) {
      const float* ar = w.acc.data() + (i + r) * w.dpv + c0;
      for (int64_t t = 0; t < kLanes; ++t) {
        a[r][t] = ar[t];
      }
    }
    for (int64_t j = 0; j < n_keys; ++j) {
      const float* vr = w.v.data() + j * w.dpv + c0;
      for (int64_t r = 0; r < R; ++r) {
        const float pj = w.s[static_cast<size_t>((i + r) * kBlockK + j)];
        for (int64_t t = 0; t < kLanes; ++t) {
          a[r][t] += pj * vr[t];
        }
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      float* ar = w.acc.data() + (i + r) * w.dpv + c0;
      for (int64_t t = 0; t < kLanes; ++t) {
        ar[t] = a[r][t];
      }
    }
  }
}

// Online-softmax update of row i with the tile's scores: turns them into exp(score - m_new) and
// rescales the row's accumulator and sum by exp(m_old - m_new).
void softmax_row(Workspace& w, int64_t i, int64_t n_keys) {
  float* sr = w.s.data() + i * kBlockK;
  // The maxima carry a NaN score along (std::max drops it: in a tile before the row's first
  // finite score the row then read as empty, o = 0 and lse = -inf, where the header makes it
  // NaN), so the row's weights, sum and output all become NaN.
  float tile_max = kNegInf;
  for (int64_t j = 0; j < n_keys; ++j) {
    tile_max = sr[j] > tile_max || std::isnan(sr[j]) ? sr[j] : tile_max;
  }
  const float m_old = w.m[static_cast<size_t>(i)];
  const float m_new = std::isnan(tile_max) ? tile_max : std::max(m_old, tile_max);
  if (m_new == kNegInf) {
    // Nothing visible yet: exp(-inf - -inf) would be NaN. Masked scores become weight 0.
    std::fill(sr, sr + n_keys, 0.0f);
    return;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n_keys; ++j) {
    sr[j] = std::exp(sr[j] - m_new);
    sum += sr[j];
  }
  const float alpha = std::exp(m_old - m_new);  // 0 on the first visible tile (m_old = -inf)
  if (alpha != 1.0f) {
    float* ar = w.acc.data() + i * w.dpv;
    for (int64_t c = 0; c < w.dpv; ++c) {
      ar[c] *= alpha;
    }
  }
  w.l[static_cast<size_t>(i)] = w.l[static_cast<size_t>(i)] * alpha + sum;
  w.m[static_cast<size_t>(i)] = m_new;
}

// A descale factor for sequence b's K/V head g (fa_run_args): null means 1.
float descale(const Problem& p, const float* factors, int64_t b, int64_t g) {
  if (factors == nullptr) return 1.0f;
  return p.descale_per_head ? factors[b * p.heads_kv + g] : factors[0];
}

// One work unit: query rows [i0, i0 + kBlockQ) of head h in batch b. Q, KV and O are the
// element types of q, of k and v, and of o.
template <class Q, class KV, class O>
void run_unit(const Problem& p, const Tensors& t, int64_t b, int64_t h, int64_t i0, Workspace& w) {
  const Sequence seq(p, t, b);
  if (i0 >= seq.sq) {
    return;  // a varlen sequence shorter than the longest: this tile has no rows
  }
  const int64_t d = p.head_dim, dv = p.head_dim_v;
  const int64_t dp = w.dp, dpv = w.dpv;
  const int64_t nq = std::min(kBlockQ, seq.sq - i0);
  const int64_t g = h / (p.heads_q / p.heads_kv);
  // The visible ranges move right with the row, so the tile's keys are those from the first
  // row's lower bound to the last row's upper bound: nothing outside is loaded.
  const int64_t j_begin = std::max<int64_t>(0, visible_keys(p, i0, seq.sq, seq.sk).lo);
  const int64_t j_end = std::min(seq.sk, visible_keys(p, i0 + nq - 1, seq.sq, seq.sk).hi + 1);
  const float slope = seq.alibi_slope(h);
  const int64_t diag = seq.sk - seq.sq;
  // The header's score = softmax_scale * q_descale * k_descale * (q . k): the factors are formed
  // once in float32 and scale the float32 dot products as softmax_scale alone does otherwise.
  const float score_scale = p.softmax_scale * descale(p, t.run.q_descale, b, g) *
                            descale(p, t.run.k_descale, b, g);
  const float v_scale = descale(p, t.run.v_descale, b, g);

  const auto* q = static_cast<const typename Q::Storage*>(t.q);
  for (int64_t i = 0; i < nq; ++i) {
    const auto* src = q + seq.q_offset(p.q, i0 + i, h);
    float* dst = w.q.data() + i * dp;
    for (int64_t c = 0; c < d; ++c) {
      dst[c] = Q::load(src[c]);
    }
  }
  std::fill(w.acc.begin(), w.acc.begin() + nq * dpv, 0.0f);
  std::fill(w.m.begin(), w.m.begin() + nq, kNegInf);
  std::fill(w.l.begin(), w.l.begin() + nq, 0.0f);

  const auto* k = static_cast<const typename KV::Storage*>(t.k);
  const auto* v = static_cast<const typename KV::Storage*>(t.v);
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, j_end - j0);
    for (int64_t j = 0; j < nk; ++j) {
      const auto* ks = k + seq.k_offset(p.k, j0 + j, g);
      const auto* vs = v + seq.k_offset(p.v, j0 + j, g);
      for (int64_t c = 0; c < d; ++c) {
        w.kt[static_cast<size_t>(c * kBlockK + j)] = KV::load(ks[c]);
      }
      float* vd = w.v.data() + j * dpv;
      for (int64_t c = 0; c < dv; ++c) {
        vd[c] = KV::load(vs[c]);
      }
    }

    int64_t i = 0;
    for (; i + kScoreRows <= nq; i += kScoreRows) {
      score_rows<kScoreRows>(w, i, d, score_scale);
    }
    for (; i < nq; ++i) {
      score_rows<1>(w, i, d, score_scale);
    }

    for (i = 0; i < nq; ++i) {
      const KeyRange r = visible_keys(p, i0 + i, seq.sq, seq.sk);
      float* sr = w.s.data() + i * kBlockK;
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t key = j0 + j;
        if (key < r.lo || key > r.hi) {
          sr[j] = kNegInf;
          continue;
        }
        if (p.softcap > 0.0f) {
          sr[j] = p.softcap * std::tanh(sr[j] / p.softcap);
        }
        if (p.alibi != Alibi::kNone) {
          sr[j] -= slope * static_cast<float>(std::llabs(i0 + i + diag - key));
        }
      }
      softmax_row(w, i, nk);
    }

    for (i = 0; i + kPvRows <= nq; i += kPvRows) {
      accumulate_rows<kPvRows>(w, i, nk);
    }
    for (; i < nq; ++i) {
      accumulate_rows<1>(w, i, nk);
    }
  }

  auto* o = static_cast<typename O::Storage*>(t.o);
  const float sink = p.sinks ? t.run.sinks[h] : kNegInf;
  for (int64_t i = 0; i < nq; ++i) {
    float l = w.l[static_cast<size_t>(i)];
    float m = w.m[static_cast<size_t>(i)];
    float out_scale = 1.0f;
    if (p.sinks) {
      // The sink joins the denominator: l' = l e^(m - M) + e^(sink - M) with M = max(m, sink).
      const float top = std::max(m, sink);
      out_scale = m == kNegInf ? 0.0f : std::exp(m - top);
      l = l * out_scale + (sink == kNegInf ? 0.0f : std::exp(sink - top));  // -inf: no sink
      m = top;
    }
    const float* ar = w.acc.data() + i * dpv;
    auto* dst = o + seq.q_offset(p.o, i0 + i, h);
    // l == 0 only when the row saw no key (every visible key adds exp(0) = 1 at its maximum)
    // and has no sink; with a sink, such a row (or one whose keys the sink outweighs past
    // float's range) has out_scale 0. Then O = 0 whatever v_descale is (0 * inf would be NaN),
    // but for a sink of +inf or NaN, whose l is NaN. v_descale scales P V, so it joins the
    // normalisation.
    const float inv =
        l == 0.0f || (out_scale == 0.0f && !std::isnan(l)) ? 0.0f : out_scale / l * v_scale;
    for (int64_t c = 0; c < dv; ++c) {
      dst[c] = O::store(ar[c] * inv);
    }
    if (t.lse != nullptr) {
      t.lse[seq.lse_offset(h, i0 + i)] = l == 0.0f ? kNegInf : m + std::log(l);
    }
  }
}

template <class Q, class KV, class O>
void run(const Problem& p, const Tensors& t, int n_threads) {
  const int64_t n_tiles = (p.seqlen_q + kBlockQ - 1) / kBlockQ;
  const int64_t n_heads = p.batch * p.heads_q;
  const int64_t n_units = n_heads * n_tiles;
  if (p.head_dim + p.head_dim_v > kMaxDimSum) {
    throw std::bad_alloc();
  }
  const int64_t dp = padded_dim(p.head_dim), dpv = padded_dim(p.head_dim_v);
  const auto n_workers = static_cast<int>(std::clamp<int64_t>(n_threads, 1, n_units));

  // Allocated here, so an allocation failure throws before any thread starts or output is written.
  std::vector<Workspace> workspaces;
  workspaces.reserve(static_cast<size_t>(n_workers));
  for (int i = 0; i < n_workers; ++i) {
    workspaces.emplace_back(dp, dpv);
  }

  std::atomic<int64_t> next{0};
  auto work = [&](Workspace& w) {
    for (int64_t u = next.fetch_add(1, std::memory_order_relaxed); u < n_units;
         u = next.fetch_add(1, std::memory_order_relaxed)) {
      // The last query tiles go first: under a causal mask they see the most keys, and starting
      // the longest units first keeps threads from idling at the end.
      const int64_t tile = n_tiles - 1 - u / n_heads;
      const int64_t bh = u % n_heads;
      run_unit<Q, KV, O>(p, t, bh / p.heads_q, bh % p.heads_q, tile * kBlockQ, w);
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n_workers - 1));
  for (int i = 1; i < n_workers; ++i) {
    try {
      threads.emplace_back(work, std::ref(workspaces[static_cast<size_t>(i)]));
    } catch (const std::exception&) {
      break;  // no more threads available: the ones running (and this one) share all the units
    }
  }
  work(workspaces[0]);
  for (std::thread& th : threads) {
    th.join();
  }
}

}  // namespace

void forward(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse,
             const RunPointers& run_pointers, int n_threads) {
  const Tensors t{q, k, v, o, lse, run_pointers};
  // The type combinations to_problem allows: one type throughout, 16-bit queries against an
  // e4m3 cache (o in q's type), e4m3 queries and cache with a 16-bit o.
  const bool fp8_cache = p.kv_dtype == DType::kE4M3;
  switch (p.dtype) {
    case DType::kFP16:
      fp8_cache ? run<Fp16, E4m3, Fp16>(p, t, n_threads) : run<Fp16, Fp16, Fp16>(p, t, n_threads);
      break;
    case DType::kBF16:
      fp8_cache ? run<Bf16, E4m3, Bf16>(p, t, n_threads) : run<Bf16, Bf16, Bf16>(p, t, n_threads);
      break;
    case DType::kFP32:
      run<Fp32, Fp32, Fp32>(p, t, n_threads);
      break;
    case DType::kE4M3:
      p.out_dtype == DType::kFP16 ? run<E4m3, E4m3, Fp16>(p, t, n_threads)
                                  : run<E4m3, E4m3, Bf16>(p, t, n_threads);
      break;
  }
}

fa_status check_run_pointers(const Problem& p, const RunPointers& run) {
  const bool paged = p.layout == Layout::kPagedKv;
  if (p.needs_cu_seqlens()) {
    struct Offsets {
      const char* name;
      const int32_t* cu;
      int64_t total;
      int64_t max_len;
      const char* max_name;
    };
    for (Offsets o : {Offsets{"cu_seqlens_q", run.cu_seqlens_q, p.total_q, p.seqlen_q, "seqlen_q"},
                      Offsets{"cu_seqlens_k", run.cu_seqlens_k, p.total_k, p.seqlen_k, "seqlen_k"}}) {
      if (o.cu[0] != 0) {
        return fail(FA_STATUS_INVALID_ARGUMENT, "%s[0] = %d must be 0", o.name, o.cu[0]);
      }
      for (int64_t b = 0; b < p.batch; ++b) {
        const int64_t len = int64_t{o.cu[b + 1]} - o.cu[b];
        if (len < 0 || len > o.max_len) {
          return fail(FA_STATUS_INVALID_ARGUMENT,
                      "%s[%lld] = %d and [%lld] = %d give a sequence of length %lld outside "
                      "[0, %s = %lld]",
                      o.name, static_cast<long long>(b), o.cu[b], static_cast<long long>(b + 1),
                      o.cu[b + 1], static_cast<long long>(len), o.max_name,
                      static_cast<long long>(o.max_len));
        }
      }
      if (o.cu[p.batch] != o.total) {
        return fail(FA_STATUS_INVALID_ARGUMENT, "%s[%lld] = %d must equal the total rows %lld",
                    o.name, static_cast<long long>(p.batch), o.cu[p.batch],
                    static_cast<long long>(o.total));
      }
    }
  }
  if (p.needs_cache_seqlens()) {
    for (int64_t b = 0; b < p.batch; ++b) {
      const int32_t len = run.cache_seqlens[b];
      if (len < 0 || len > p.seqlen_k) {
        return fail(FA_STATUS_INVALID_ARGUMENT,
                    "cache_seqlens[%lld] = %d is outside [0, seqlen_k = %lld]",
                    static_cast<long long>(b), len, static_cast<long long>(p.seqlen_k));
      }
      if (!paged) continue;
      // Only the pages holding visible rows are read; the rest of a row may be padding.
      // Rounded up without len + page_size - 1, which overflows for a page_size near INT64_MAX.
      const int64_t pages = len / p.page_size + (len % p.page_size != 0 ? 1 : 0);
      for (int64_t i = 0; i < pages; ++i) {
        const int32_t page = run.block_table[b * p.max_pages_per_seq + i];
        if (page < 0 || page >= p.num_pages) {
          return fail(FA_STATUS_INVALID_ARGUMENT,
                      "block_table[%lld][%lld] = %d is outside [0, num_pages = %lld)",
                      static_cast<long long>(b), static_cast<long long>(i), page,
                      static_cast<long long>(p.num_pages));
        }
      }
    }
  }
  return FA_STATUS_SUCCESS;
}

namespace {

template <class E>
void merge(int64_t batch, int64_t seqlen, int64_t heads, int64_t head_dim, const TensorStrides& st,
           const void* o_a, const float* lse_a, const void* o_b, const float* lse_b, void* o,
           float* lse) {
  using S = typename E::Storage;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < seqlen; ++i) {
        const int64_t li = (b * heads + h) * seqlen + i;
        const int64_t oi = offset(st, b, i, h);
        const float la = lse_a[li], lb = lse_b[li];
        // A NaN on either side makes the row NaN (the header's contract): std::max(-inf, NaN)
        // is -inf, which would have read as two empty sides (o = 0, lse = -inf).
        const float top = std::isnan(la) || std::isnan(lb) ? la + lb : std::max(la, lb);
        // Both sides empty (-inf): the union is empty too.
        const float wa = top == kNegInf ? 0.0f : std::exp(la - top);
        const float wb = top == kNegInf ? 0.0f : std::exp(lb - top);
        const float sum = wa + wb;
        const S* a = static_cast<const S*>(o_a) + oi;
        const S* bb = static_cast<const S*>(o_b) + oi;
        S* out = static_cast<S*>(o) + oi;
        // Element by element, with no scratch row (which could fail to allocate): an output
        // overlaps an input only exactly in place (fa_merge_states refuses any other overlap),
        // so out[c] depends on a[c] and bb[c] alone, both read before it is written.
        // A side of weight 0 (lse -inf: no key) contributes nothing, whatever its o holds (a
        // shard with no key may have left it unwritten): selected out, never multiplied.
        for (int64_t c = 0; c < head_dim; ++c) {
          const float x = (wa == 0.0f ? 0.0f : wa * E::load(a[c])) +
                          (wb == 0.0f ? 0.0f : wb * E::load(bb[c]));
          out[c] = E::store(sum == 0.0f ? 0.0f : x / sum);
        }
        lse[li] = sum == 0.0f ? kNegInf : top + std::log(sum);
      }
    }
  }
}

}  // namespace

void merge_states(DType dtype, int64_t batch, int64_t seqlen, int64_t heads, int64_t head_dim,
                  const TensorStrides& o_strides, const void* o_a, const float* lse_a,
                  const void* o_b, const float* lse_b, void* o, float* lse) {
  switch (dtype) {
    case DType::kFP16:
      merge<Fp16>(batch, seqlen, heads, head_dim, o_strides, o_a, lse_a, o_b, lse_b, o, lse);
      break;
    case DType::kBF16:
      merge<Bf16>(batch, seqlen, heads, head_dim, o_strides, o_a, lse_a, o_b, lse_b, o, lse);
      break;
    case DType::kFP32:
      merge<Fp32>(batch, seqlen, heads, head_dim, o_strides, o_a, lse_a, o_b, lse_b, o, lse);
      break;
    case DType::kE4M3:
      break;  // to_merge_shape refuses it: merged outputs are never e4m3
  }
}

}  // namespace fa::cpu
