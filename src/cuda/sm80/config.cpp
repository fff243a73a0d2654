// The mma.sync family's answers to core/family_config.hpp: the reasons for its rules
// (config.hpp), the seed's autotune filter, and its knobs' tokens in a kernel name.
#include "cuda/sm80/config.hpp"

#include "core/family_config.hpp"
#include "core/kernel_config_text.hpp"
#include "core/text.hpp"

namespace fa::cuda::sm80 {

namespace {

std::string load_tiles_reason(char const* which, int n, int extent, char const* extent_name,
                              bool double_buffer) {
  if (!rules::load_tiles_pow2(n))
    return fmt("%s_mma_load_K_tiles = %d must be 0 or a power of two other than 1", which, n);
  if (!rules::load_tiles_fit(n, extent, double_buffer))
    return fmt("%s_mma_load_K_tiles = %d exceeds %d, the most 8-column fragments of %s = %d%s", which,
               n, (double_buffer ? extent / 2 : extent) / 8, extent_name, extent,
               double_buffer ? " that leave room for a second buffer" : "");
  return fmt("%s_mma_load_K_tiles = %d does not divide the %d fragments of %s = %d", which, n,
             extent / 8, extent_name, extent);
}

std::string validate(KernelConfig const& c) {
  if (!rules::dtype_ok(c))
    return fmt("dtype = %d must be FP16 or BF16 in the mma.sync family (E4M3 kernels are sm90 "
               "ones)", int(c.dtype));
  if (!rules::n_warps_ok(c)) return fmt("n_warps = %d must be 4 or 8", c.n_warps);
  if (!rules::B_r_ok(c))
    return fmt("B_r = %d must be a positive multiple of 16 * n_warps = %d (whole m16 tiles per warp)",
               c.B_r, 16 * c.n_warps);
  if (!rules::B_c_ok(c)) return fmt("B_c = %d must be a positive multiple of 16", c.B_c);
  if (!rules::copy_rows_ok(c))
    return fmt("B_r = %d and B_c = %d must be multiples of threads / 8 = %d (rows per copy pass)",
               c.B_r, c.B_c, static_cast<int>(c.threads() / 8));
  if (!rules::Q_tiles_ok(c))
    return load_tiles_reason("Q", c.Q_mma_load_K_tiles, c.d_head, "d_head", c.mma_double_buffer_loads);
  if (!rules::K_tiles_ok(c))
    return load_tiles_reason("K", c.K_mma_load_K_tiles, c.d_head, "d_head", c.mma_double_buffer_loads);
  if (!rules::V_tiles_ok(c))
    return load_tiles_reason("V", c.V_mma_load_K_tiles, c.B_c, "B_c", c.mma_double_buffer_loads);
  if (!rules::QK_tiles_match(c))
    return fmt("Q_mma_load_K_tiles = %d must be 0 or equal K_mma_load_K_tiles = %d",
               c.Q_mma_load_K_tiles, c.K_mma_load_K_tiles);
  if (!rules::smem_ok(c))
    return fmt("shared memory (B_r + 2 * B_c) * d_head * 2 = %lld bytes exceeds %d",
               static_cast<long long>(smem_bytes(c)), kMaxSmemBytesAnyArch);
  return {};
}

std::string knobs_unset(KernelConfig const& c, char const* owner) {
  if (rules::knobs_unset(c)) return {};
  return fmt("the mma.sync knobs (async_copy, eager_load_blocks, swizzled, the load tiles, "
             "mma_double_buffer_loads, optimized_softmax) must be 0 in the %s family", owner);
}

int64_t smem(KernelConfig const& c) { return smem_bytes(c); }

KernelConfig canonical_of(KernelConfig c) { return sm80::canonical(c); }

// The seed's should_autotune_config.
std::string autotune_filter(KernelConfig const& c) {
  if (!c.async_copy && c.eager_load_blocks)
    return "eager_load_blocks without async_copy: synchronous copies cannot prefetch";
  if (c.Q_mma_load_K_tiles != c.K_mma_load_K_tiles && c.Q_mma_load_K_tiles != 0)
    return "Q_mma_load_K_tiles differs from K_mma_load_K_tiles and is not 0";
  if (c.B_r == 64) {
    if (c.n_warps == 8) return "B_r = 64 with 8 warps";
    if (c.B_c == 32 && c.Q_mma_load_K_tiles == 0)
      return "B_r = 64, B_c = 32 with Q held in registers: over the register budget for 3 blocks/SM";
    if (c.B_c == 64 && c.Q_mma_load_K_tiles != 0) return "B_r = 64, B_c = 64 with Q streamed";
  }
  if (c.B_r == 128 && c.Q_mma_load_K_tiles == 0) return "B_r = 128 with Q held in registers";
  return {};
}

// The seed's tokens, the load token always: mma.sync's names are the untagged form
// (core/family_config.hpp), asked for its own tokens alone.
void name_tokens(KernelConfig const& c, bool, std::vector<std::string>& out) {
  if (c.async_copy) out.push_back("async");
  if (c.eager_load_blocks) out.push_back("eager");
  if (c.swizzled) out.push_back("swizzled");
  out.push_back(fmt("load_%d_%d_%d_tiles", c.Q_mma_load_K_tiles, c.K_mma_load_K_tiles,
                    c.V_mma_load_K_tiles));
  if (c.mma_double_buffer_loads) out.push_back("buffer");
  if (c.optimized_softmax) out.push_back("opt_softmax");
}

Token parse_token(std::string_view token, KernelConfig* c, std::string* error) {
  static constexpr FlagToken kFlags[] = {{"async", &KernelConfig::async_copy},
                                         {"eager", &KernelConfig::eager_load_blocks},
                                         {"swizzled", &KernelConfig::swizzled},
                                         {"buffer", &KernelConfig::mma_double_buffer_loads},
                                         {"opt_softmax", &KernelConfig::optimized_softmax}};
  if (set_flag(kFlags, token, c)) return Token::kKnob;
  if (!token.starts_with("load_") || !token.ends_with("_tiles")) return Token::kNotMine;
  std::vector<std::string_view> qkv = split(token.substr(5, token.size() - 11), '_');
  if (qkv.size() != 3 || !parse_int(qkv[0], &c->Q_mma_load_K_tiles) ||
      !parse_int(qkv[1], &c->K_mma_load_K_tiles) || !parse_int(qkv[2], &c->V_mma_load_K_tiles)) {
    *error = "malformed load token \"" + std::string(token) + "\" (expected load_<Q>_<K>_<V>_tiles)";
    return Token::kMalformed;
  }
  return Token::kRequired;
}

}  // namespace

FamilyConfig const kConfig{kId,
                           "mma.sync",
                           nullptr,
                           "an mma.sync kernel",
                           "async, eager, swizzled, load_*, buffer, opt_softmax",
                           "load_<Q>_<K>_<V>_tiles",
                           &validate,
                           &knobs_unset,
                           &smem,
                           &canonical_of,
                           &autotune_filter,
                           &name_tokens,
                           &parse_token};

}  // namespace fa::cuda::sm80
