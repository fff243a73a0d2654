// libFuzzer target: fa_merge_config validation and the CPU backend's fa_merge_states.
// The input's bytes become an fa_merge_config (built with fa_merge_config_init(), fields set by
// name) and a choice of how the six tensors alias. Properties checked on every input:
//   - a config the manual refuses (struct_size, dtype, reserved0, sizes < 1, negative strides,
//     elements of o that share memory) is refused with BAD_STRUCT_SIZE / INVALID_ARGUMENT and a
//     detail message, and a valid one is accepted (the model below decides independently:
//     overlap within o by marking every element);
//   - the pointers: o may be exactly o_a or o_b and lse exactly lse_a or lse_b (in place); any
//     other overlap of an output with another tensor, a NULL pointer, one not aligned to its
//     elements, a NULL context or a stream on a CPU context is refused, and a refused call leaves every buffer byte for byte as it was;
//   - a valid config runs with every tensor in a heap buffer of exactly its size (a shared one
//     for the aliasing cases), so AddressSanitizer sees any access past them;
//   - after a success each element of o's view and each lse is the merge of its two inputs
//     (LSE = log(e^LSE_a + e^LSE_b), O = the weighted mean; both -inf give O = 0, LSE = -inf)
//     within the dtype's rounding, and nothing outside o's view changed.
//
// Input layout (little-endian; bytes past the end read as 0, so short inputs are the defaults):
//   u8 dtype      < 0xF0: FP16, BF16, FP32 by value % 3; else the raw value - 0xF8 (-8..7)
//   u8 flags      bit 0: sizes are i64 (else u8); bit 1: an i32 reserved0 follows the sizes;
//                 bit 2: a struct_size byte follows (< 0x80: value % (sizeof + 1); else
//                 sizeof(fa_merge_config) + (value & 0x3F), the extra bytes following);
//                 bit 3: the LSEs are raw f32 bit patterns (inf, NaN: value checks off)
//   sizes         batch, seqlen, heads, head_dim
//   [i32 reserved0] [u8 struct_size [extra bytes]]
//   u8 strides    0 packed; 1 padded (u8 pads after each head row, seq row and batch entry);
//                 2 u16 strides; 3 i64 strides (batch, seq, head each)
//   u8 aliasing   % 17: see enum Alias
//   u8 argument   the aliasing's offset or pointer choice
//   u64           the seed of the data (o_a, o_b in (-2, 2); LSEs in [-30, 30], 1 in 8 -inf)
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "element.hpp"
#include "flashattn.h"

namespace {

// Elements per tensor, so one input runs in well under a millisecond.
constexpr int64_t kMaxElems = 1 << 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Reader {
  uint8_t const* p;
  size_t n;
  uint64_t take(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && n > 0; ++i, --n) v |= uint64_t{*p++} << (8 * i);
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(take(1)); }
  int64_t i64() { return static_cast<int64_t>(take(8)); }
};

[[noreturn]] void finding(char const* what) {
  std::fprintf(stderr, "fuzz_merge_states: %s\n  detail: %s\n", what, fa_last_error_detail());
  std::abort();
}

fa_context_t* cpu_context() {
  static fa_context_t* const ctx = [] {
    fa_context_t* c = nullptr;
    if (fa_context_create(FA_DEVICE_CPU, &c) != FA_STATUS_SUCCESS) finding("no CPU context");
    return c;
  }();
  return ctx;
}

enum Alias {
  kSeparate,       // six buffers
  kInPlaceA,       // o = o_a, lse = lse_a
  kInPlaceB,       // o = o_b, lse = lse_b
  kOIsOa,          // o = o_a only
  kLseIsLseB,      // lse = lse_b only
  kAllShared,      // o = o_a = o_b, lse = lse_a = lse_b
  kInputsShared,   // o_a = o_b, lse_a = lse_b (inputs may overlap)
  kOOverlapsOa,    // o starts inside o_a (a shared buffer): refused
  kLseOverlapsLseA,
  kLseInsideO,     // lse starts inside o's bytes: refused
  kLseIsOa,        // lse == o_a (the same address): refused
  kOIsLseB,        // o == lse_b: refused
  kOIsLse,         // o == lse: refused
  kNullPointer,    // the argument picks which
  kStream,         // a stream on a CPU context
  kNullContext,
  kMisaligned,     // the argument picks a pointer and 1 to 3 bytes off its alignment: refused
};

// The model's verdict on the config.
enum class Verdict { kValid, kBadStructSize, kInvalid, kTooLarge };

struct Shape {
  int dtype;
  int64_t batch, seqlen, heads, head_dim;
  int64_t sb, ss, sh;  // resolved strides
  int64_t o_extent;    // elements
  int64_t lse_elems;
  // The library may refuse a view whose elements interleave without sharing memory (its check
  // is the usual sufficient one: sorted by stride, each dimension steps past the smaller ones).
  bool may_refuse;
};

Verdict judge(fa_merge_config const& c, unsigned char const* extra, size_t extra_bytes, Shape* s) {
  if (c.struct_size < sizeof c) return Verdict::kBadStructSize;
  for (size_t i = 0; i < extra_bytes; ++i) {
    if (extra[i] != 0) return Verdict::kBadStructSize;
  }
  if (c.dtype != FA_DTYPE_FP16 && c.dtype != FA_DTYPE_BF16 && c.dtype != FA_DTYPE_FP32) {
    return Verdict::kInvalid;
  }
  if (c.reserved0 != 0) return Verdict::kInvalid;
  if (c.batch < 1 || c.seqlen < 1 || c.heads < 1 || c.head_dim < 1) return Verdict::kInvalid;
  // Larger sizes cannot be allocated here (and keep the products below within __int128).
  if (c.batch > kMaxElems || c.seqlen > kMaxElems || c.heads > kMaxElems ||
      c.head_dim > kMaxElems) {
    return Verdict::kTooLarge;
  }
  __int128 sb = c.o_batch_stride, ss = c.o_seq_stride, sh = c.o_head_stride;
  if (sb == 0 && ss == 0 && sh == 0) {
    sh = c.head_dim;
    ss = sh * c.heads;
    sb = ss * c.seqlen;
  } else if (sb < 0 || ss < 0 || sh < 0) {
    return Verdict::kInvalid;
  }
  __int128 const extent = (c.batch - 1) * sb + (c.seqlen - 1) * ss + (c.heads - 1) * sh +
                          c.head_dim;
  __int128 const lse = __int128{c.batch} * c.seqlen * c.heads;
  // Larger ones cannot be allocated here (the library refuses some of them: spans past 2^63).
  if (extent > kMaxElems || lse > kMaxElems) return Verdict::kTooLarge;
  *s = Shape{c.dtype, c.batch, c.seqlen, c.heads, c.head_dim, static_cast<int64_t>(sb),
             static_cast<int64_t>(ss), static_cast<int64_t>(sh), static_cast<int64_t>(extent),
             static_cast<int64_t>(lse), false};
  {
    struct Dim {
      int64_t n, stride;
    };
    Dim dims[4] = {{c.batch, s->sb}, {c.seqlen, s->ss}, {c.heads, s->sh}, {c.head_dim, 1}};
    std::sort(dims, dims + 4, [](Dim x, Dim y) { return x.stride < y.stride; });
    int64_t span = 1;
    for (Dim const& d : dims) {
      if (d.n == 1) continue;
      if (d.stride < span) s->may_refuse = true;
      span += d.stride * (d.n - 1);
    }
  }
  // Elements of o sharing memory: mark each one (the view has at most 2^16 elements when it
  // does not overlap, so stop at the first element marked twice).
  std::vector<bool> seen(static_cast<size_t>(extent));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.seqlen; ++i) {
      for (int64_t h = 0; h < c.heads; ++h) {
        for (int64_t d = 0; d < c.head_dim; ++d) {
          auto const at = static_cast<size_t>(b * s->sb + i * s->ss + h * s->sh + d);
          if (seen[at]) return Verdict::kInvalid;
          seen[at] = true;
        }
      }
    }
  }
  return Verdict::kValid;
}

// A random element of magnitude below 2 (see fuzz_config_forward.cpp).
void fill_o(int dtype, unsigned char* buf, int64_t n, std::mt19937_64& rng) {
  for (int64_t i = 0; i < n; ++i) {
    auto bits = static_cast<uint16_t>(rng());
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

void fill_lse(float* lse, int64_t n, bool raw, std::mt19937_64& rng) {
  for (int64_t i = 0; i < n; ++i) {
    uint64_t const r = rng();
    if (raw) {
      lse[i] = std::bit_cast<float>(static_cast<uint32_t>(r));
    } else if (r % 8 == 0) {
      lse[i] = kNegInf;
    } else {
      lse[i] = static_cast<float>(static_cast<double>(r >> 11) * 0x1p-53 * 60.0 - 30.0);
    }
  }
}

using Bytes = std::unique_ptr<unsigned char[]>;
Bytes bytes(size_t n) {
  Bytes b(new unsigned char[std::max<size_t>(n, 1)]);
  std::memset(b.get(), 0x5A, std::max<size_t>(n, 1));
  return b;
}

// One buffer the call sees, with a snapshot to compare against.
struct Region {
  unsigned char* base;
  size_t size;
  std::vector<unsigned char> before;
};

void run(fa_merge_config const* cfg, Shape const& s, int alias, uint8_t arg, bool raw,
         uint64_t seed) {
  size_t const elem = s.dtype == FA_DTYPE_FP32 ? 4 : 2;
  size_t const ob = static_cast<size_t>(s.o_extent) * elem;
  size_t const lb = static_cast<size_t>(s.lse_elems) * 4;
  std::mt19937_64 rng(seed);
  // Separate buffers by default; the aliasing modes repoint some of them.
  Bytes oa_buf = bytes(ob), ob_buf = bytes(ob), o_buf = bytes(ob);
  Bytes la_buf = bytes(lb), lb_buf = bytes(lb), l_buf = bytes(lb);
  Bytes shared;  // the overlap modes' one buffer
  unsigned char *oa = oa_buf.get(), *o_b = ob_buf.get(), *o = o_buf.get();
  unsigned char *la = la_buf.get(), *lbp = lb_buf.get(), *l = l_buf.get();
  bool refuse = false;
  fa_status want_refusal = FA_STATUS_INVALID_ARGUMENT;
  switch (alias) {
    case kInPlaceA: o = oa; l = la; break;
    case kInPlaceB: o = o_b; l = lbp; break;
    case kOIsOa: o = oa; break;
    case kLseIsLseB: l = lbp; break;
    case kAllShared: o_b = o = oa; lbp = l = la; break;
    case kInputsShared: o_b = oa; lbp = la; break;
    case kOOverlapsOa: {
      // o starts at element k of o_a: k in [1, extent - 1] overlaps (with extent 1, k = 1 is
      // right after it, which is fine).
      size_t const k = 1 + arg % static_cast<size_t>(std::max<int64_t>(s.o_extent - 1, 1));
      shared = bytes(ob + k * elem);
      oa = shared.get();
      o = shared.get() + k * elem;
      refuse = k < static_cast<size_t>(s.o_extent);
      break;
    }
    case kLseOverlapsLseA: {
      size_t const k = 1 + arg % static_cast<size_t>(std::max<int64_t>(s.lse_elems - 1, 1));
      shared = bytes(lb + k * 4);
      la = shared.get();
      l = shared.get() + k * 4;
      refuse = k < static_cast<size_t>(s.lse_elems);
      break;
    }
    case kLseInsideO: {
      size_t const k = (arg * size_t{4}) % ((ob + 3) / 4 * 4);  // 4-byte aligned, inside o
      shared = bytes(std::max(ob, k + lb));
      o = shared.get();
      l = shared.get() + k;
      refuse = true;
      break;
    }
    case kLseIsOa:
      shared = bytes(std::max(ob, lb));
      oa = l = shared.get();
      refuse = true;
      break;
    case kOIsLseB:
      shared = bytes(std::max(ob, lb));
      o = lbp = shared.get();
      refuse = true;
      break;
    case kOIsLse:
      shared = bytes(std::max(ob, lb));
      o = l = shared.get();
      refuse = true;
      break;
    case kNullPointer: {
      unsigned char** ptrs[6] = {&oa, &la, &o_b, &lbp, &o, &l};
      *ptrs[arg % 6] = nullptr;
      refuse = true;
      break;
    }
    case kStream:
      refuse = true;
      want_refusal = FA_STATUS_WRONG_CONTEXT;
      break;
    case kNullContext:
      refuse = true;
      break;
    case kMisaligned:
      // Repointed after the inputs are filled: the harness itself never stores through it.
      shared = bytes(std::max(ob, lb) + 4);
      refuse = true;
      break;
    default:
      break;
  }
  // Fill the inputs and poison the separate outputs; a shared buffer keeps what the inputs put
  // there. Every buffer the call sees is snapshot.
  std::vector<Region> regions;
  auto track = [&](unsigned char* base, size_t size) {
    if (base == nullptr) return;
    for (Region const& r : regions) {
      if (r.base == base && r.size == size) return;
    }
    regions.push_back(Region{base, size, {}});
  };
  for (auto [buf, size] : {std::pair{o_buf.get(), ob}, std::pair{l_buf.get(), lb}}) {
    std::memset(buf, 0xFF, size);  // NaN patterns (0xFFFF, 0xFFFFFFFF)
  }
  if (oa != nullptr) fill_o(s.dtype, oa, s.o_extent, rng);
  if (o_b != nullptr && o_b != oa) fill_o(s.dtype, o_b, s.o_extent, rng);
  if (la != nullptr) fill_lse(reinterpret_cast<float*>(la), s.lse_elems, raw, rng);
  if (lbp != nullptr && lbp != la) fill_lse(reinterpret_cast<float*>(lbp), s.lse_elems, raw, rng);
  if (alias == kMisaligned) {
    unsigned char** ptrs[6] = {&oa, &la, &o_b, &lbp, &o, &l};
    size_t const align = arg % 2 == 0 ? elem : 4;  // o tensors at even indices
    *ptrs[arg % 6] = shared.get() + 1 + (arg / 6) % (align - 1);
  }
  track(oa, ob);
  track(o_b, ob);
  track(la, lb);
  track(lbp, lb);
  track(o, ob);
  track(l, lb);
  for (Region& r : regions) r.before.assign(r.base, r.base + r.size);
  // The inputs as they were, for the expected results (in place overwrites them).
  std::vector<double> a(static_cast<size_t>(s.o_extent)), b(a.size());
  std::vector<float> lse_a(static_cast<size_t>(s.lse_elems)), lse_b(lse_a.size());
  if (!refuse) {
    for (int64_t i = 0; i < s.o_extent; ++i) {
      a[static_cast<size_t>(i)] = decode_element(s.dtype, oa, i);
      b[static_cast<size_t>(i)] = decode_element(s.dtype, o_b, i);
    }
    std::memcpy(lse_a.data(), la, lb);
    std::memcpy(lse_b.data(), lbp, lb);
  }

  fa_context_t* ctx = alias == kNullContext ? nullptr : cpu_context();
  auto* stream = alias == kStream ? reinterpret_cast<fa_stream_t>(&rng) : nullptr;
  fa_status const status =
      fa_merge_states(ctx, cfg, oa, reinterpret_cast<float const*>(la), o_b,
                      reinterpret_cast<float const*>(lbp), o, reinterpret_cast<float*>(l), stream);
  if (refuse) {
    if (status == FA_STATUS_SUCCESS) finding("fa_merge_states accepts overlapping or NULL pointers");
    // A conservatively refused config (may_refuse) is refused before the pointers are judged.
    if (status != want_refusal && !(s.may_refuse && status == FA_STATUS_INVALID_ARGUMENT)) {
      finding("fa_merge_states refuses with an unexpected status");
    }
    if (fa_last_error_detail()[0] == '\0') finding("a refused merge without a detail message");
    for (Region const& r : regions) {
      if (std::memcmp(r.base, r.before.data(), r.size) != 0) finding("a refused merge wrote memory");
    }
    return;
  }
  if (status != FA_STATUS_SUCCESS) {
    if (!s.may_refuse || status != FA_STATUS_INVALID_ARGUMENT) {
      finding("fa_merge_states refuses a valid merge");
    }
    for (Region const& r : regions) {
      if (std::memcmp(r.base, r.before.data(), r.size) != 0) finding("a refused merge wrote memory");
    }
    return;
  }
  if (raw) return;  // NaN and inf LSEs: only memory safety is checked

  double const tol = s.dtype == FA_DTYPE_FP32 ? 1e-5 : s.dtype == FA_DTYPE_BF16 ? 0x1p-7 : 0x1p-10;
  std::vector<bool> in_view(static_cast<size_t>(s.o_extent));
  auto const* lse = reinterpret_cast<float const*>(l);
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.seqlen; ++i) {
        auto const li = static_cast<size_t>((bi * s.heads + h) * s.seqlen + i);
        double const x = lse_a[li], y = lse_b[li];
        double const top = std::max(x, y);
        double const wa = top == -INFINITY ? 0.0 : std::exp(x - top);
        double const wb = top == -INFINITY ? 0.0 : std::exp(y - top);
        double const sum = wa + wb;
        double const want_lse = sum == 0.0 ? -INFINITY : top + std::log(sum);
        if (sum == 0.0 ? lse[li] != kNegInf
                       : !(std::fabs(lse[li] - want_lse) <= 1e-5 * (1.0 + std::fabs(want_lse)))) {
          finding("lse is not log(exp(lse_a) + exp(lse_b))");
        }
        for (int64_t d = 0; d < s.head_dim; ++d) {
          auto const at = static_cast<size_t>(bi * s.sb + i * s.ss + h * s.sh + d);
          in_view[at] = true;
          double const want = sum == 0.0 ? 0.0 : (wa * a[at] + wb * b[at]) / sum;
          double const got = decode_element(s.dtype, o, static_cast<int64_t>(at));
          if (sum == 0.0 ? got != 0.0 : !(std::fabs(got - want) <= tol)) {
            finding("o is not the LSE-weighted mean of o_a and o_b");
          }
        }
      }
    }
  }
  // Outside its view, o's buffer is as it was (poison, or o_a's / o_b's elements in place).
  Region const* out = nullptr;
  for (Region const& r : regions) {
    if (r.base == o) out = &r;
  }
  for (int64_t i = 0; i < s.o_extent; ++i) {
    if (in_view[static_cast<size_t>(i)]) continue;
    if (std::memcmp(o + i * elem, out->before.data() + i * elem, elem) != 0) {
      finding("a write outside o's view");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(uint8_t const* data, size_t size) {
  Reader in{data, size};
  fa_merge_config c;
  fa_merge_config_init(&c);
  uint8_t const dtype = in.u8(), flags = in.u8();
  c.dtype = dtype < 0xF0 ? FA_DTYPE_FP16 + dtype % 3 : int32_t{dtype} - 0xF8;
  auto size_field = [&] { return (flags & 1) ? in.i64() : int64_t{in.u8()}; };
  c.batch = size_field();
  c.seqlen = size_field();
  c.heads = size_field();
  c.head_dim = size_field();
  if (flags & 2) c.reserved0 = static_cast<int32_t>(in.take(4));
  std::vector<unsigned char> larger;
  if (flags & 4) {
    uint8_t const s = in.u8();
    if (s < 0x80) {
      c.struct_size = s % (sizeof c + 1);
    } else {
      c.struct_size = sizeof c + (s & 0x3F);
      larger.resize(c.struct_size);
      for (size_t i = sizeof c; i < larger.size(); ++i) larger[i] = in.u8();
    }
  }
  bool const raw = flags & 8;
  switch (in.u8() & 3) {
    case 0:
      break;
    case 1:
      c.o_head_stride = c.head_dim + in.u8();
      c.o_seq_stride = static_cast<int64_t>(static_cast<uint64_t>(c.heads) *
                                            static_cast<uint64_t>(c.o_head_stride) + in.u8());
      c.o_batch_stride = static_cast<int64_t>(static_cast<uint64_t>(c.seqlen) *
                                              static_cast<uint64_t>(c.o_seq_stride) + in.u8());
      break;
    case 2:
      c.o_batch_stride = static_cast<int64_t>(in.take(2));
      c.o_seq_stride = static_cast<int64_t>(in.take(2));
      c.o_head_stride = static_cast<int64_t>(in.take(2));
      break;
    default:
      c.o_batch_stride = in.i64();
      c.o_seq_stride = in.i64();
      c.o_head_stride = in.i64();
  }
  int const alias = in.u8() % 17;
  uint8_t const arg = in.u8();
  uint64_t const seed = in.take(8);

  fa_merge_config const* cfg = &c;
  if (!larger.empty()) {
    std::memcpy(larger.data(), &c, sizeof c);
    cfg = reinterpret_cast<fa_merge_config const*>(larger.data());
  }
  Shape shape{};
  Verdict const verdict = judge(c, larger.empty() ? nullptr : larger.data() + sizeof c,
                                larger.empty() ? 0 : larger.size() - sizeof c, &shape);
  if (verdict == Verdict::kValid) {
    run(cfg, shape, alias, arg, raw, seed);
    return 0;
  }
  // A refused (or, too large to allocate, unchecked) config: one-element buffers, which a
  // refusal must not touch.
  auto buf = [] {
    auto p = std::make_unique<float[]>(1);
    p[0] = 42.0f;
    return p;
  };
  auto oa = buf(), la = buf(), o_b = buf(), lb = buf(), o = buf(), l = buf();
  if (verdict == Verdict::kTooLarge) {
    // Only the config can be judged: NULL outputs, so an accepted config is refused for them.
    if (fa_merge_states(cpu_context(), cfg, oa.get(), la.get(), o_b.get(), lb.get(), nullptr,
                        nullptr, nullptr) == FA_STATUS_SUCCESS) {
      finding("fa_merge_states accepts NULL outputs");
    }
    return 0;
  }
  fa_status const status = fa_merge_states(cpu_context(), cfg, oa.get(), la.get(), o_b.get(),
                                            lb.get(), o.get(), l.get(), nullptr);
  fa_status const want =
      verdict == Verdict::kBadStructSize ? FA_STATUS_BAD_STRUCT_SIZE : FA_STATUS_INVALID_ARGUMENT;
  if (status != want) finding("fa_merge_states does not refuse an invalid config as the manual says");
  if (fa_last_error_detail()[0] == '\0') finding("a refused config without a detail message");
  for (auto const* p : {&oa, &la, &o_b, &lb, &o, &l}) {
    if ((*p)[0] != 42.0f) finding("a refused config wrote a tensor");
  }
  return 0;
}
