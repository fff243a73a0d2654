// libFuzzer target: fa_config validation and the CPU backend's forward (fa_forward_ex), with the
// 0.3 inference features: layouts (dense, varlen, KV cache, paged KV cache), sliding window,
// softcap, ALiBi, attention sinks, num_splits, and the run's index tensors whose contents come
// from the input. The input's bytes become an fa_config (built with fa_config_init(), fields set
// by name; the layout is below) and an fa_run_args. Properties checked on every input:
//   - fa_config_validate() and fa_config_extents() agree; an accepted config keeps the header's
//     bounds (the LSE, a varlen batch's (sequence, row, head) work list and each run-time
//     array it uses hold at most 2^60 entries, computed here in 128 bits, so the library's
//     int64 products of the same sizes cannot wrap: a paged batch x max_pages_per_seq, a varlen
//     batch + 1 and a varlen batch x heads_q did); a refusal has a detail message, and
//     fa_forward(), fa_forward_ex() and fa_plan_create() refuse the config with the same status
//     without touching the tensors;
//   - a valid config that is small enough to run in milliseconds runs on a CPU context with q, k,
//     v, o and lse, and every index tensor (cu_seqlens_q/k, cache_seqlens, block_table), slope
//     and sink array, in heap buffers of exactly their sizes, so AddressSanitizer sees any access
//     past them;
//   - fa_forward_ex() accepts exactly when the run arguments are well formed (fa_run_args of the
//     right size, no NULL pointer the config needs, cu_seqlens starting at 0, non-decreasing by
//     at most seqlen_q/k per sequence and ending at total_q/k, cache lengths in [0, seqlen_k],
//     the block_table pages a sequence reads in [0, num_pages)); a refusal is
//     INVALID_ARGUMENT/BAD_STRUCT_SIZE/UNSUPPORTED with a detail message and leaves o and lse
//     byte for byte as they were;
//   - after a success every element of o's view is written (the rows of every sequence: total_q
//     rows for varlen), and nothing else in o's buffer is; with finite inputs in (-2, 2), scores
//     that cannot overflow, slopes in [0, 1], softcap in (0, 50] and sinks in [-10, 10], o is
//     finite and within (-2, 2) (a convex combination of v's rows, scaled down by a sink), a row
//     that sees no key has o = 0 and lse = -inf (or lse = its head's sink), and every other row
//     has a finite lse.
//
// Input layout (little-endian; bytes past the end read as 0, so short inputs are the defaults;
// the fields after the seed were appended in 0.3, so older inputs keep their meaning):
//   u8 dtype      < 0xF0: FP16, BF16, FP32 by value % 3; else the raw value - 0xF8 (-8..7)
//   u8 causal     < 0xF0: value & 1; else the raw value - 0xF8
//   u8 flags      bit 0: pass lse; bit 1: sizes are i64 (else u8); bit 2: a struct_size byte
//                 follows the scale; bit 3: an i32 reserved0 follows the scale
//   sizes         batch, seqlen_q, seqlen_k, heads_kv, heads_q / heads_kv (heads_q itself when
//                 i64), head_dim
//   u8 scale      0: the default; 0xFF: an f32 follows; else (value - 128) / 16
//   [i32 reserved0] [u8 struct_size: < 0x80: that value; else sizeof(fa_config) + (value & 0x3F),
//                 the extra bytes following]
//   u8 layouts    two bits per tensor, q in the lowest: 0 packed; 1 padded (u8 pads after each
//                 head row, seq row and batch entry follow); 2 u16 strides; 3 i64 strides
//                 (batch, seq, head each)
//   u64           the seed of the input data
//   u8 layout     < 0xF0: DENSE, VARLEN, KV_CACHE, PAGED_KV by value % 4; else the raw value - 0xF8
//   u8 window     < 0xF0: bit 0 the window flag, bits 1-2 how window_left and window_right follow
//                 (0: not, both 0; 1: i8 each; 2: i64 each; 3: i16 each); else the raw flag
//                 value - 0xF8 and i8 bounds
//   u8 softcap    0: off; 0xFF: an f32 follows; else value * 50 / 254, in (0, 50]
//   u8 alibi      < 0xF0: NONE, PER_HEAD, PER_BATCH by value % 3; else the raw value - 0xF8
//   u8 sinks      < 0xF0: value & 1; else the raw value - 0xF8
//   u8 num_splits < 0xF0: that value; else an i32 follows
//   u8 fields     bit 0: the fields below are i64 (else u8); bit 1: all five follow (else only
//                 those the layout uses, the others 0); bit 2: total_q and total_k are set to
//                 cu_seqlens_q/k[batch] (after they are read)
//   fields        total_q, total_k (VARLEN), num_pages, page_size, max_pages_per_seq (PAGED_KV)
//   u8 short size 0: keep struct_size; else (when flags bit 2 is clear) struct_size =
//                 offsetof(fa_config, layout) + (value - 1) % (the 0.3 fields' bytes + 1): a 0.2
//                 caller, or one cut mid-field (the config is then passed in a heap buffer of
//                 exactly struct_size bytes, and the fields past it count as 0)
//   u8 args       bits 0-1: 0 fa_run_args as the config needs; 1 args = NULL; 2 a struct_size
//                 8 bytes short; 3 one pointer the config needs is NULL (a u8 picks which);
//                 bit 2: cu_seqlens are raw i32 (else u8 lengths % (seqlen + 1), summed);
//                 bit 3: cache_seqlens raw i32 (else u8 % (seqlen_k + 1)); bit 4: block_table
//                 raw i32 (else u8 % num_pages); bit 5: slopes and sinks raw f32 (else u8 / 255
//                 and (u8 - 128) / 12.8; raw ones turn the value checks off)
//   [u8 which NULL]
//   contents      in this order, each only when the config uses it and it has at most 4096
//                 entries: cu_seqlens_q, cu_seqlens_k, cache_seqlens, block_table
//                 (batch x max_pages_per_seq), alibi_slopes (heads_q or batch x heads_q), sinks
//   u8 head_dim_v < 0xF0: that value (0: head_dim); 0xFF: an i64 follows; else the raw value
//                 - 0xF8 (appended with the field: inputs without it keep head_dim_v = 0)
//   u8 fp8        (appended with the FP8 fields: inputs without it keep them 0; dtype's raw
//                 value 0xFC is FA_DTYPE_E4M3) bits 0-2: kv_dtype (raw 0-7); bits 3-5:
//                 out_dtype (raw 0-7); bit 6: descale = FA_DESCALE_PER_HEAD_KV; bit 7:
//                 descales follow for the e4m3 tensors (q; k and v), each 1 or batch x heads_kv
//                 u8 / 255 (in [0, 1], so o stays a convex combination of v's rows scaled down)
//   [descales]
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "element.hpp"
#include "flashattn.h"

namespace {

// Work and memory per input, so one runs in milliseconds under ASan (about 6 ms on average, 10^4
// inputs a minute on a 2-core machine; caps 4x larger gave a third of that): multiply-adds of the
// scores or of P.V (batch * heads_q * seqlen_q * seqlen_k * the larger of head_dim and
// head_dim_v), elements per buffer, and head_dim and head_dim_v (the CPU backend keeps two
// 64-row tiles of each per thread).
constexpr double kMaxWork = 1 << 18;
constexpr int64_t kMaxElems = 1 << 16;
constexpr int64_t kMaxHeadDim = 1024;
// Entries per index tensor, slope or sink array that the input fills.
constexpr int64_t kMaxEntries = 4096;
// Inputs are below 2 in magnitude, so a score is below 4 * head_dim * |scale|; beyond this the
// scores may overflow fp32 and o may be NaN.
constexpr double kMaxScore = 1e30;
// fa_config as published in 0.2.0 ended with the o strides.
constexpr size_t kConfigSize02 = offsetof(fa_config, layout);

struct Reader {
  uint8_t const* p;
  size_t n;
  uint64_t take(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && n > 0; ++i, --n) v |= uint64_t{*p++} << (8 * i);
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(take(1)); }
  int64_t i8() { return static_cast<int8_t>(take(1)); }
  int64_t i16() { return static_cast<int16_t>(take(2)); }
  int32_t i32() { return static_cast<int32_t>(take(4)); }
  int64_t i64() { return static_cast<int64_t>(take(8)); }
  float f32() { return std::bit_cast<float>(static_cast<uint32_t>(take(4))); }
};

// FA_FUZZ_TRACE=1 in the environment prints each input's outcome (to check what seeds reach).
void trace(char const* what, int status) {
  static bool const on = std::getenv("FA_FUZZ_TRACE") != nullptr;
  if (on) std::fprintf(stderr, "fuzz_config_forward: %s: status %d %s\n", what, status, fa_last_error_detail());
}

[[noreturn]] void finding(char const* what) {
  std::fprintf(stderr, "fuzz_config_forward: %s\n  detail: %s\n", what, fa_last_error_detail());
  std::abort();
}

// Wrapping arithmetic, for strides made from fuzzed sizes (validation then judges the result).
int64_t wrap_mul_add(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b) +
                              static_cast<uint64_t>(c));
}

void read_strides(Reader& in, int mode, int64_t seq, int64_t heads, int64_t head_dim,
                  int64_t* batch_stride, int64_t* seq_stride, int64_t* head_stride) {
  switch (mode) {
    case 0:
      *batch_stride = *seq_stride = *head_stride = 0;
      return;
    case 1:
      *head_stride = wrap_mul_add(head_dim, 1, in.u8());
      *seq_stride = wrap_mul_add(heads, *head_stride, in.u8());
      *batch_stride = wrap_mul_add(seq, *seq_stride, in.u8());
      return;
    case 2:
      *batch_stride = static_cast<int64_t>(in.take(2));
      *seq_stride = static_cast<int64_t>(in.take(2));
      *head_stride = static_cast<int64_t>(in.take(2));
      return;
    default:
      *batch_stride = in.i64();
      *seq_stride = in.i64();
      *head_stride = in.i64();
  }
}

// A random element of magnitude below 2, finite: fp16, bf16 and e4m3 patterns with a biased
// exponent below the one of 2.0 (15, 127 and 8), fp32 from the bf16 pattern.
void fill_inputs(int dtype, unsigned char* buf, int64_t n, std::mt19937_64& rng) {
  for (int64_t i = 0; i < n; ++i) {
    auto bits = static_cast<uint16_t>(rng());
    if (dtype == FA_DTYPE_E4M3) {
      buf[i] = static_cast<unsigned char>((bits & 0x87u) | ((bits >> 3) % 8u) << 3);
      continue;
    }
    if (dtype == FA_DTYPE_FP16) {
      bits = static_cast<uint16_t>((bits & 0x83FFu) | ((bits >> 10) % 15u) << 10);
    } else {
      bits = static_cast<uint16_t>((bits & 0x807Fu) | ((bits >> 7) % 127u) << 7);
    }
    if (dtype == FA_DTYPE_FP32) {
      uint32_t wide = uint32_t{bits} << 16;
      std::memcpy(buf + 4 * i, &wide, 4);
    } else {
      std::memcpy(buf + 2 * i, &bits, 2);
    }
  }
}

// Signalling-NaN patterns, so an element the library forgot to write, or wrote outside o's view,
// shows. Signalling, because no result can be one: arithmetic quiets a NaN and the library's
// conversions set the quiet bit, while a quiet NaN's payload survives both (raw-float sinks of
// 0x7FFFFFFF once came out as exactly the quiet poison 0x7FFFFFFF, and 0x7FFF in bf16).
constexpr uint32_t kPoison32 = 0x7FBFFFFF;
constexpr uint16_t poison16(int dtype) { return dtype == FA_DTYPE_FP16 ? 0x7DFF : 0x7FBF; }

size_t element_bytes(int dtype) {
  return dtype == FA_DTYPE_FP32 ? 4 : dtype == FA_DTYPE_E4M3 ? 1 : 2;
}

double element(int dtype, unsigned char const* buf, int64_t i, bool* poisoned) {
  if (dtype == FA_DTYPE_FP32) {
    uint32_t bits;
    std::memcpy(&bits, buf + 4 * i, 4);
    *poisoned = bits == kPoison32;
  } else {
    uint16_t bits;
    std::memcpy(&bits, buf + 2 * i, 2);
    *poisoned = bits == poison16(dtype);
  }
  return decode_element(dtype, buf, i);
}

using Buffer = std::unique_ptr<unsigned char[]>;

Buffer allocate(int64_t elems, size_t elem_bytes) {
  // Exactly the extent: ASan poisons the bytes after it.
  return Buffer(new unsigned char[static_cast<size_t>(elems) * elem_bytes]);
}

fa_context_t* cpu_context() {
  static fa_context_t* const ctx = [] {
    fa_context_t* c = nullptr;
    if (fa_context_create(FA_DEVICE_CPU, &c) != FA_STATUS_SUCCESS) finding("no CPU context");
    return c;
  }();
  return ctx;
}

// The run's index tensors, slopes and sinks, each in a heap buffer of exactly its entries (or
// NULL when the config does not use it), and how fa_run_args is passed.
struct RunInputs {
  std::unique_ptr<int32_t[]> cu_q, cu_k, cache, table;
  std::unique_ptr<float[]> slopes, sinks;
  std::unique_ptr<float[]> q_descale, k_descale, v_descale;
  int args_mode = 0;     // 0: as needed; 1: args = NULL; 2: struct_size short; 3: one NULL
  int null_pick = 0;     // mode 3: which needed pointer is NULL
  bool raw_floats = false;
  bool complete = true;  // false when a tensor the config uses had too many entries to build
};

// x % (bound + 1) for a fuzzed bound that may be out of range: the lengths and page indices of a
// friendly input.
int64_t below_or_at(uint8_t x, int64_t bound) {
  return bound >= 0 && bound < 255 ? x % (bound + 1) : x;
}

// Reads the contents the config (as the fuzzer set it) uses, in the layout's order.
void read_run_inputs(Reader& in, fa_config const& c, uint8_t args_byte, RunInputs* r) {
  bool const raw_cu = args_byte & 4, raw_cache = args_byte & 8, raw_table = args_byte & 16;
  r->raw_floats = args_byte & 32;
  auto countable = [&](int64_t n) {
    if (n >= 1 && n <= kMaxEntries) return true;
    r->complete = false;
    return false;
  };
  auto ints = [](int64_t n) { return std::make_unique<int32_t[]>(static_cast<size_t>(n)); };
  auto floats = [](int64_t n) { return std::make_unique<float[]>(static_cast<size_t>(n)); };
  if (c.layout == FA_LAYOUT_VARLEN && countable(c.batch)) {
    for (auto [cu, seqlen] : {std::pair{&r->cu_q, c.seqlen_q}, std::pair{&r->cu_k, c.seqlen_k}}) {
      *cu = ints(c.batch + 1);
      int32_t* p = cu->get();
      if (raw_cu) {
        for (int64_t b = 0; b <= c.batch; ++b) p[b] = in.i32();
      } else {
        p[0] = 0;  // at most 4096 x 255: no overflow
        for (int64_t b = 0; b < c.batch; ++b) {
          p[b + 1] = p[b] + static_cast<int32_t>(below_or_at(in.u8(), seqlen));
        }
      }
    }
  }
  bool const paged = c.layout == FA_LAYOUT_PAGED_KV;
  if ((c.layout == FA_LAYOUT_KV_CACHE || paged) && countable(c.batch)) {
    r->cache = ints(c.batch);
    for (int64_t b = 0; b < c.batch; ++b) {
      r->cache[b] = raw_cache ? in.i32() : static_cast<int32_t>(below_or_at(in.u8(), c.seqlen_k));
    }
  }
  int64_t table_entries = 0;
  if (paged && !__builtin_mul_overflow(c.batch, c.max_pages_per_seq, &table_entries) &&
      countable(table_entries)) {
    r->table = ints(table_entries);
    for (int64_t i = 0; i < table_entries; ++i) {
      r->table[i] = raw_table ? in.i32()
                              : static_cast<int32_t>(below_or_at(in.u8(), c.num_pages - 1));
    }
  } else if (paged) {
    r->complete = false;
  }
  int64_t slopes = c.alibi == FA_ALIBI_PER_HEAD ? c.heads_q : 0;
  if (c.alibi == FA_ALIBI_PER_BATCH && __builtin_mul_overflow(c.batch, c.heads_q, &slopes)) {
    slopes = -1;
  }
  if ((c.alibi == FA_ALIBI_PER_HEAD || c.alibi == FA_ALIBI_PER_BATCH) && countable(slopes)) {
    r->slopes = floats(slopes);
    for (int64_t i = 0; i < slopes; ++i) {
      r->slopes[i] = r->raw_floats ? in.f32() : in.u8() / 255.0f;
    }
  }
  if (c.sinks == 1 && countable(c.heads_q)) {
    r->sinks = floats(c.heads_q);
    for (int64_t i = 0; i < c.heads_q; ++i) {
      r->sinks[i] = r->raw_floats ? in.f32() : (in.u8() - 128) / 12.8f;
    }
  }
}

// Builds the fa_run_args the input asks for; returns NULL for args mode 1.
fa_run_args const* make_args(RunInputs const& r, fa_config const& e, fa_run_args* args) {
  fa_run_args_init(args);
  if (r.args_mode == 1) return nullptr;
  args->cu_seqlens_q = r.cu_q.get();
  args->cu_seqlens_k = r.cu_k.get();
  args->cache_seqlens = r.cache.get();
  args->block_table = r.table.get();
  args->alibi_slopes = r.slopes.get();
  args->sinks = r.sinks.get();
  args->q_descale = r.q_descale.get();
  args->k_descale = r.k_descale.get();
  args->v_descale = r.v_descale.get();
  // Shorter than the oldest fa_run_args the library takes (it ended with workspace_size).
  if (r.args_mode == 2) args->struct_size = offsetof(fa_run_args, q_descale) - 8;
  if (r.args_mode == 3) {
    // The pointers the effective config needs, in fa_run_args' order.
    std::vector<void const**> needed;
    if (e.layout == FA_LAYOUT_VARLEN) {
      needed.push_back(reinterpret_cast<void const**>(&args->cu_seqlens_q));
      needed.push_back(reinterpret_cast<void const**>(&args->cu_seqlens_k));
    }
    if (e.layout == FA_LAYOUT_KV_CACHE || e.layout == FA_LAYOUT_PAGED_KV) {
      needed.push_back(reinterpret_cast<void const**>(&args->cache_seqlens));
    }
    if (e.layout == FA_LAYOUT_PAGED_KV) {
      needed.push_back(reinterpret_cast<void const**>(&args->block_table));
    }
    if (e.alibi != FA_ALIBI_NONE) needed.push_back(reinterpret_cast<void const**>(&args->alibi_slopes));
    if (e.sinks) needed.push_back(reinterpret_cast<void const**>(&args->sinks));
    if (!needed.empty()) *needed[static_cast<size_t>(r.null_pick) % needed.size()] = nullptr;
  }
  return args;
}

enum class Expect { kSuccess, kInvalid, kEither, kBadStructSize };

// What fa_forward_ex must answer for a valid config `e` and these run arguments, per the manual.
Expect expected_status(fa_config const& e, RunInputs const& r, fa_run_args const* args) {
  if (args != nullptr && args->struct_size < offsetof(fa_run_args, q_descale)) {
    return Expect::kBadStructSize;
  }
  bool const varlen = e.layout == FA_LAYOUT_VARLEN, paged = e.layout == FA_LAYOUT_PAGED_KV;
  bool const cache = e.layout == FA_LAYOUT_KV_CACHE || paged;
  fa_run_args none;
  fa_run_args_init(&none);
  fa_run_args const& a = args != nullptr ? *args : none;
  if ((varlen && (a.cu_seqlens_q == nullptr || a.cu_seqlens_k == nullptr)) ||
      (cache && a.cache_seqlens == nullptr) || (paged && a.block_table == nullptr) ||
      (e.alibi != FA_ALIBI_NONE && a.alibi_slopes == nullptr) ||
      (e.sinks && a.sinks == nullptr)) {
    return Expect::kInvalid;
  }
  // Descales are read as the fuzzer's config asked; a struct cut before the FP8 fields makes
  // every tensor 16-bit or fp32 again, and a descale of such a tensor is refused.
  bool const q_fp8 = e.dtype == FA_DTYPE_E4M3;
  bool const kv_fp8 = (e.kv_dtype != 0 ? e.kv_dtype : e.dtype) == FA_DTYPE_E4M3;
  if ((a.q_descale != nullptr && !q_fp8) ||
      ((a.k_descale != nullptr || a.v_descale != nullptr) && !kv_fp8)) {
    return Expect::kInvalid;
  }
  if (varlen) {
    for (auto [cu, seqlen, total] : {std::tuple{r.cu_q.get(), e.seqlen_q, e.total_q},
                                     std::tuple{r.cu_k.get(), e.seqlen_k, e.total_k}}) {
      if (cu[0] != 0 || cu[e.batch] != total) return Expect::kInvalid;
      for (int64_t b = 0; b < e.batch; ++b) {
        int64_t const len = int64_t{cu[b + 1]} - cu[b];
        if (len < 0 || len > seqlen) return Expect::kInvalid;
      }
    }
  }
  bool unused_bad_page = false;
  if (cache) {
    for (int64_t b = 0; b < e.batch; ++b) {
      int32_t const len = r.cache[b];
      if (len < 0 || len > e.seqlen_k) return Expect::kInvalid;
      if (!paged) continue;
      for (int64_t i = 0; i < e.max_pages_per_seq; ++i) {
        int32_t const page = r.table[b * e.max_pages_per_seq + i];
        if (page >= 0 && page < e.num_pages) continue;
        // A page that holds none of the sequence's rows is never read: refusing it is allowed.
        if (i < len / e.page_size + (len % e.page_size != 0 ? 1 : 0)) return Expect::kInvalid;
        unused_bad_page = true;
      }
    }
  }
  return unused_bad_page ? Expect::kEither : Expect::kSuccess;
}

// The keys row i of a sequence with sq queries and sk keys sees, as the manual defines them:
// the number visible (0 when none). Bounds past 2^40 are as good as unbounded.
int64_t visible_keys(fa_config const& e, int64_t i, int64_t sq, int64_t sk) {
  int64_t const diag = i + sk - sq;
  int64_t lo = 0, hi = sk - 1;
  if (e.causal) hi = std::min(hi, diag);
  constexpr int64_t kFar = int64_t{1} << 40;
  if (e.window && e.window_right >= 0 && e.window_right < kFar) {
    hi = std::min(hi, diag + e.window_right);
  }
  if (e.window && e.window_left >= 0 && e.window_left < kFar) {
    lo = std::max(lo, diag - e.window_left);
  }
  return std::max<int64_t>(0, hi - lo + 1);
}

// The bounds fa_config_validate documents for an accepted config `e`, in 128-bit arithmetic.
void check_bounds(fa_config const& e) {
  using Wide = __int128;
  Wide const limit = Wide{1} << 60, batch = e.batch;
  bool const varlen = e.layout == FA_LAYOUT_VARLEN;
  Wide const lse = (varlen ? Wide{e.total_q} : batch * e.seqlen_q) * e.heads_q;
  if (lse > limit) finding("an accepted config has an LSE of more than 2^60 entries");
  if (varlen && batch + 1 > limit) finding("an accepted varlen config has over 2^60 offsets");
  if (e.layout == FA_LAYOUT_PAGED_KV && batch * e.max_pages_per_seq > limit) {
    finding("an accepted paged config has a block_table of more than 2^60 entries");
  }
  if (e.alibi == FA_ALIBI_PER_BATCH && batch * e.heads_q > limit) {
    finding("an accepted config has more than 2^60 per-batch ALiBi slopes");
  }
  if (e.descale == FA_DESCALE_PER_HEAD_KV && batch * e.heads_kv > limit) {
    finding("an accepted config has more than 2^60 per-head descales");
  }
  // A varlen batch's (sequence, query row, head) work list: its LSE does not hold batch.
  if (varlen && batch * std::min(e.seqlen_q, e.total_q) * Wide{e.heads_q} > limit) {
    finding("an accepted varlen config has a work list of more than 2^60 entries");
  }
}

// `e` is the config as the library sees it (fields past struct_size are 0), `cfg` what it is
// given.
void run_and_check(fa_config const& e, fa_config const* cfg, bool with_lse, uint64_t seed,
                   RunInputs const& r) {
  int64_t ext_q, ext_k, ext_v, ext_o, ext_lse;
  if (fa_config_extents(cfg, &ext_q, &ext_k, &ext_v, &ext_o, &ext_lse) != FA_STATUS_SUCCESS) {
    finding("fa_config_extents refuses a config fa_config_validate accepts");
  }
  for (int64_t x : {ext_q, ext_k, ext_v, ext_o, ext_lse}) {
    if (x < 1) finding("an extent below 1 for a valid config");
    if (x > kMaxElems) return trace("too large", 0);
  }
  int64_t const dv = e.head_dim_v != 0 ? e.head_dim_v : e.head_dim;  // o's columns
  double const work = static_cast<double>(e.batch) * static_cast<double>(e.heads_q) *
                      static_cast<double>(e.seqlen_q) * static_cast<double>(e.seqlen_k) *
                      static_cast<double>(std::max(e.head_dim, dv));
  if (work > kMaxWork || e.head_dim > kMaxHeadDim || dv > kMaxHeadDim || !r.complete) {
    return trace("too much work", 0);
  }

  // The element types as fa_config resolves them: k and v kv_dtype (0: dtype), o out_dtype for
  // e4m3 queries (0: bf16), else dtype.
  int const kv_type = e.kv_dtype != 0 ? e.kv_dtype : e.dtype;
  int const o_type = e.dtype != FA_DTYPE_E4M3 ? e.dtype
                     : e.out_dtype != 0       ? e.out_dtype
                                              : FA_DTYPE_BF16;
  Buffer q = allocate(ext_q, element_bytes(e.dtype)), k = allocate(ext_k, element_bytes(kv_type));
  Buffer v = allocate(ext_v, element_bytes(kv_type)), o = allocate(ext_o, element_bytes(o_type));
  std::unique_ptr<float[]> lse(with_lse ? new float[static_cast<size_t>(ext_lse)] : nullptr);
  std::mt19937_64 rng(seed);
  fill_inputs(e.dtype, q.get(), ext_q, rng);
  fill_inputs(kv_type, k.get(), ext_k, rng);
  fill_inputs(kv_type, v.get(), ext_v, rng);
  for (int64_t i = 0; i < ext_o; ++i) {
    if (o_type == FA_DTYPE_FP32) {
      std::memcpy(o.get() + 4 * i, &kPoison32, 4);
    } else {
      uint16_t const poison = poison16(o_type);
      std::memcpy(o.get() + 2 * i, &poison, 2);
    }
  }
  if (with_lse) std::fill(lse.get(), lse.get() + ext_lse, std::bit_cast<float>(kPoison32));

  fa_run_args storage;
  fa_run_args const* args = make_args(r, e, &storage);
  Expect const expect = expected_status(e, r, args);
  fa_status const s = fa_forward_ex(cpu_context(), cfg, q.get(), k.get(), v.get(), o.get(),
                                    lse.get(), args, nullptr);
  trace("ran", s);
  if (s != FA_STATUS_SUCCESS) {
    if (expect == Expect::kSuccess) finding("fa_forward_ex refuses a valid config and run arguments");
    if (expect == Expect::kBadStructSize && s != FA_STATUS_BAD_STRUCT_SIZE) {
      finding("fa_forward_ex: a short fa_run_args.struct_size is not BAD_STRUCT_SIZE");
    }
    if (s != FA_STATUS_INVALID_ARGUMENT && s != FA_STATUS_BAD_STRUCT_SIZE &&
        s != FA_STATUS_UNSUPPORTED) {
      finding("fa_forward_ex refuses run arguments with an unexpected status");
    }
    if (fa_last_error_detail()[0] == '\0') finding("a refused run without a detail message");
    for (int64_t i = 0; i < ext_o; ++i) {
      bool poisoned = false;
      element(o_type, o.get(), i, &poisoned);
      if (!poisoned) finding("a refused run wrote o");
    }
    for (int64_t i = 0; with_lse && i < ext_lse; ++i) {
      if (std::bit_cast<uint32_t>(lse[static_cast<size_t>(i)]) != kPoison32) {
        finding("a refused run wrote lse");
      }
    }
    return;
  }
  if (expect != Expect::kSuccess && expect != Expect::kEither) {
    finding("fa_forward_ex accepts malformed run arguments");
  }

  // Strides as the library resolves them: three zeros mean packed (varlen: no batch stride).
  bool const varlen = e.layout == FA_LAYOUT_VARLEN;
  int64_t ob = e.o_batch_stride, os = e.o_seq_stride, oh = e.o_head_stride;
  if (ob == 0 && os == 0 && oh == 0) {
    oh = dv;
    os = e.heads_q * oh;
    ob = varlen ? 0 : e.seqlen_q * os;
  }
  double const scale = e.softmax_scale != 0.f ? std::fabs(e.softmax_scale)
                                              : 1.0 / std::sqrt(static_cast<double>(e.head_dim));
  bool const bounded = 4.0 * static_cast<double>(e.head_dim) * scale < kMaxScore && !r.raw_floats;
  std::vector<bool> in_view(static_cast<size_t>(ext_o));
  for (int64_t b = 0; b < e.batch; ++b) {
    // The sequence's rows: its first row in q/o, its query and key counts.
    int64_t first = 0, sq = e.seqlen_q, sk = e.seqlen_k;
    if (varlen) {
      first = r.cu_q[b];
      sq = r.cu_q[b + 1] - first;
      sk = r.cu_k[b + 1] - r.cu_k[b];
    } else if (e.layout != FA_LAYOUT_DENSE) {
      sk = r.cache[b];
    }
    for (int64_t i = 0; i < sq; ++i) {
      int64_t const visible = visible_keys(e, i, sq, sk);
      for (int64_t h = 0; h < e.heads_q; ++h) {
        int64_t const row = varlen ? (first + i) * os : b * ob + i * os;
        for (int64_t d = 0; d < dv; ++d) {
          int64_t const at = row + h * oh + d;
          in_view[static_cast<size_t>(at)] = true;
          bool poisoned = false;
          double const x = element(o_type, o.get(), at, &poisoned);
          if (poisoned) finding("an element of o was not written");
          if (bounded && !(std::fabs(x) < 2.0)) finding("o is not finite and within (-2, 2)");
          if (visible == 0 && x != 0.0 && !r.raw_floats) finding("a row that sees no key has o != 0");
        }
        if (!with_lse) continue;
        int64_t const li = varlen ? h * e.total_q + first + i : (b * e.heads_q + h) * e.seqlen_q + i;
        float const l = lse[static_cast<size_t>(li)];
        if (std::bit_cast<uint32_t>(l) == kPoison32) finding("an lse element was not written");
        if (visible == 0 && !r.raw_floats) {
          float const want = e.sinks ? r.sinks[h] : -std::numeric_limits<float>::infinity();
          if (l != want) finding("a row that sees no key has lse != -inf (or its sink)");
        }
        if (visible > 0 && bounded && !std::isfinite(l)) finding("lse is not finite");
      }
    }
  }
  for (int64_t i = 0; i < ext_o; ++i) {
    bool poisoned = false;
    element(o_type, o.get(), i, &poisoned);
    if (!in_view[static_cast<size_t>(i)] && !poisoned) finding("a write outside o's view");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(uint8_t const* data, size_t size) {
  Reader in{data, size};
  fa_config c;
  fa_config_init(&c);
  uint8_t const dtype = in.u8(), causal = in.u8(), flags = in.u8();
  c.dtype = dtype < 0xF0 ? FA_DTYPE_FP16 + dtype % 3 : int32_t{dtype} - 0xF8;
  c.causal = causal < 0xF0 ? causal & 1 : int32_t{causal} - 0xF8;
  bool const with_lse = flags & 1;
  bool const wide_sizes = flags & 2;
  auto size_field = [&] { return wide_sizes ? in.i64() : int64_t{in.u8()}; };
  c.batch = size_field();
  c.seqlen_q = size_field();
  c.seqlen_k = size_field();
  c.heads_kv = size_field();
  int64_t const group = size_field();
  c.heads_q = wide_sizes ? group : c.heads_kv * group;
  c.head_dim = size_field();
  uint8_t const scale = in.u8();
  if (scale == 0xFF) {
    c.softmax_scale = in.f32();
  } else if (scale != 0) {
    c.softmax_scale = (scale - 128) / 16.0f;
  }
  if (flags & 8) c.reserved0 = in.i32();

  // A caller of a newer header passes a larger struct (its extra bytes must be 0), an
  // uninitialised one a smaller struct_size; the library must read exactly struct_size bytes.
  std::vector<unsigned char> larger;
  if (flags & 4) {
    uint8_t const s = in.u8();
    if (s < 0x80) {
      c.struct_size = s;
    } else {
      c.struct_size = sizeof c + (s & 0x3F);
      larger.resize(c.struct_size);
      for (size_t i = sizeof c; i < larger.size(); ++i) larger[i] = in.u8();
    }
  }
  uint8_t const layouts = in.u8();
  read_strides(in, layouts & 3, c.seqlen_q, c.heads_q, c.head_dim, &c.q_batch_stride,
               &c.q_seq_stride, &c.q_head_stride);
  read_strides(in, (layouts >> 2) & 3, c.seqlen_k, c.heads_kv, c.head_dim, &c.k_batch_stride,
               &c.k_seq_stride, &c.k_head_stride);
  read_strides(in, (layouts >> 4) & 3, c.seqlen_k, c.heads_kv, c.head_dim, &c.v_batch_stride,
               &c.v_seq_stride, &c.v_head_stride);
  read_strides(in, (layouts >> 6) & 3, c.seqlen_q, c.heads_q, c.head_dim, &c.o_batch_stride,
               &c.o_seq_stride, &c.o_head_stride);
  uint64_t const seed = in.take(8);

  // ---- The 0.3 fields ----
  uint8_t const layout = in.u8();
  c.layout = layout < 0xF0 ? layout % 4 : int32_t{layout} - 0xF8;
  uint8_t const window = in.u8();
  int bounds = 1;
  if (window < 0xF0) {
    c.window = window & 1;
    bounds = (window >> 1) & 3;
  } else {
    c.window = int32_t{window} - 0xF8;
  }
  switch (bounds) {
    case 1:
      c.window_left = in.i8();
      c.window_right = in.i8();
      break;
    case 2:
      c.window_left = in.i64();
      c.window_right = in.i64();
      break;
    case 3:
      c.window_left = in.i16();
      c.window_right = in.i16();
      break;
    default:
      break;
  }
  uint8_t const softcap = in.u8();
  if (softcap == 0xFF) {
    c.softcap = in.f32();
  } else if (softcap != 0) {
    c.softcap = softcap * (50.0f / 254.0f);
  }
  uint8_t const alibi = in.u8();
  c.alibi = alibi < 0xF0 ? alibi % 3 : int32_t{alibi} - 0xF8;
  uint8_t const sinks = in.u8();
  c.sinks = sinks < 0xF0 ? sinks & 1 : int32_t{sinks} - 0xF8;
  uint8_t const splits = in.u8();
  c.num_splits = splits < 0xF0 ? splits : in.i32();
  uint8_t const fields = in.u8();
  auto field = [&] { return (fields & 1) ? in.i64() : int64_t{in.u8()}; };
  bool const all_fields = fields & 2, derive_totals = fields & 4;
  if (all_fields || c.layout == FA_LAYOUT_VARLEN) {
    c.total_q = field();
    c.total_k = field();
  }
  if (all_fields || c.layout == FA_LAYOUT_PAGED_KV) {
    c.num_pages = field();
    c.page_size = field();
    c.max_pages_per_seq = field();
  }
  uint8_t const short_size = in.u8();
  if (short_size != 0 && !(flags & 4)) {
    c.struct_size = kConfigSize02 + (short_size - 1u) % (sizeof c - kConfigSize02 + 1);
  }
  uint8_t const args_byte = in.u8();
  RunInputs run;
  run.args_mode = args_byte & 3;
  if (run.args_mode == 3) run.null_pick = in.u8();
  read_run_inputs(in, c, args_byte, &run);
  if (derive_totals && run.cu_q) {
    c.total_q = run.cu_q[c.batch];
    c.total_k = run.cu_k[c.batch];
  }
  uint8_t const dim_v = in.u8();
  c.head_dim_v = dim_v == 0xFF ? in.i64() : dim_v < 0xF0 ? int64_t{dim_v} : int64_t{dim_v} - 0xF8;
  uint8_t const fp8 = in.u8();
  c.kv_dtype = fp8 & 7;
  c.out_dtype = (fp8 >> 3) & 7;
  c.descale = (fp8 & 64) ? FA_DESCALE_PER_HEAD_KV : FA_DESCALE_PER_TENSOR;
  if (fp8 & 128) {
    // Only for the e4m3 tensors: a descale of another is refused, which the args modes cover.
    int64_t n = 1;
    if (c.descale == FA_DESCALE_PER_HEAD_KV && __builtin_mul_overflow(c.batch, c.heads_kv, &n)) {
      n = -1;
    }
    auto factors = [&](std::unique_ptr<float[]>* out) {
      if (n < 1 || n > kMaxEntries) {
        run.complete = false;
        return;
      }
      out->reset(new float[static_cast<size_t>(n)]);
      for (int64_t i = 0; i < n; ++i) (*out)[i] = in.u8() / 255.0f;
    };
    if (c.dtype == FA_DTYPE_E4M3) factors(&run.q_descale);
    if (c.kv_dtype == FA_DTYPE_E4M3 || (c.kv_dtype == 0 && c.dtype == FA_DTYPE_E4M3)) {
      factors(&run.k_descale);
      factors(&run.v_descale);
    }
  }

  // The config as the library is to see it: a shorter struct in a buffer of exactly its size
  // (its missing fields count as 0), a larger one with its extra bytes.
  fa_config e = c;
  std::unique_ptr<unsigned char[]> shorter;
  fa_config const* cfg = &c;
  if (!larger.empty()) {
    std::memcpy(larger.data(), &c, sizeof c);
    cfg = reinterpret_cast<fa_config const*>(larger.data());
  } else if (c.struct_size >= kConfigSize02 && c.struct_size < sizeof c) {
    shorter.reset(new unsigned char[c.struct_size]);
    std::memcpy(shorter.get(), &c, c.struct_size);
    cfg = reinterpret_cast<fa_config const*>(shorter.get());
    std::memset(reinterpret_cast<unsigned char*>(&e) + c.struct_size, 0, sizeof e - c.struct_size);
  }

  fa_status const valid = fa_config_validate(cfg);
  if (fa_config_extents(cfg, nullptr, nullptr, nullptr, nullptr, nullptr) != valid) {
    finding("fa_config_extents and fa_config_validate disagree");
  }
  if (valid == FA_STATUS_SUCCESS) {
    check_bounds(e);
    run_and_check(e, cfg, with_lse, seed, run);
    return 0;
  }
  if (valid != FA_STATUS_INVALID_ARGUMENT && valid != FA_STATUS_BAD_STRUCT_SIZE) {
    finding("fa_config_validate returned an unexpected status");
  }
  if (fa_last_error_detail()[0] == '\0') finding("a refused config without a detail message");
  trace("refused config", valid);
  // One-element tensors: a refused config must not touch them (ASan sees any access past one).
  auto one = std::make_unique<float[]>(1);
  auto out = std::make_unique<float[]>(1);
  auto out_lse = std::make_unique<float[]>(1);
  out[0] = out_lse[0] = 42.0f;
  if (fa_forward(cpu_context(), cfg, one.get(), one.get(), one.get(), out.get(), nullptr,
                 nullptr) != valid) {
    finding("fa_forward's status differs from fa_config_validate's");
  }
  fa_run_args storage;
  fa_run_args const* args = make_args(run, e, &storage);
  if (fa_forward_ex(cpu_context(), cfg, one.get(), one.get(), one.get(), out.get(),
                    with_lse ? out_lse.get() : nullptr, args, nullptr) != valid) {
    finding("fa_forward_ex's status differs from fa_config_validate's");
  }
  if (fa_last_error_detail()[0] == '\0') finding("fa_forward_ex refused without a detail message");
  if (out[0] != 42.0f || out_lse[0] != 42.0f) finding("a refused config wrote o or lse");
  fa_plan_t* plan = nullptr;
  if (fa_plan_create(cpu_context(), cfg, &plan) != valid || plan != nullptr) {
    finding("fa_plan_create's status differs from fa_config_validate's, or it made a plan");
  }
  return 0;
}
