#include "core/kernel_config.hpp"

#include <charconv>
#include <cstdio>
#include <vector>

namespace fa {

namespace {

std::string fmt(char const* format, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

bool parse_int(std::string_view s, int32_t* out) {
  s = trim(s);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'a' && a[i] <= 'z' ? char(a[i] - 32) : a[i];
    char y = b[i] >= 'a' && b[i] <= 'z' ? char(b[i] - 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

}  // namespace

char const* dtype_name(DType t) {
  switch (t) {
    case DType::kFP16: return "FP16";
    case DType::kBF16: return "BF16";
    case DType::kFP32: return "FP32";
  }
  return "?";
}

namespace {

std::string validate_sm90(KernelConfig const& c) {
  if (!rules::sm90_no_mma_sync_knobs(c))
    return "the mma.sync knobs (async_copy, eager_load_blocks, swizzled, the load tiles, "
           "mma_double_buffer_loads, optimized_softmax) must be 0 in the sm90 family";
  if (!rules::sm90_warps_ok(c))
    return fmt("n_warps = %d must be 8, 12 or 16 (a producer warpgroup and 1 to 3 consumer "
               "warpgroups) in the sm90 family", c.n_warps);
  if (!rules::sm90_B_r_ok(c))
    return fmt("B_r = %d must be 64 per consumer warpgroup, %d with n_warps = %d", c.B_r,
               16 * (c.n_warps - 4), c.n_warps);
  if (!rules::sm90_B_c_ok(c))
    return fmt("B_c = %d must be a multiple of 16 in [64, 256] (a wgmma N) in the sm90 family",
               c.B_c);
  if (!rules::sm90_stages_ok(c)) return fmt("stages = %d must be 2, 3 or 4", c.stages);
  if (!rules::sm90_pingpong_ok(c))
    return fmt("pingpong needs two consumer warpgroups (n_warps = 12), not n_warps = %d", c.n_warps);
  if (!rules::sm90_registers_ok(c))
    return fmt("B_c = %d and d_head = %d need %d accumulator registers per thread (3 B_c / 4 + "
               "d_head / 2), over the %d of a consumer with n_warps = %d",
               c.B_c, c.d_head, c.B_c * 3 / 4 + c.d_head / 2, rules::sm90_consumer_regs(c) - 24,
               c.n_warps);
  if (!rules::smem_ok(c))
    return fmt("shared memory 1024 + (B_r + 2 * stages * B_c) * d_head * 2 + barriers = %lld "
               "bytes exceeds %d", static_cast<long long>(c.smem_bytes()), kMaxSmemBytesAnyArch);
  return {};
}

}  // namespace

std::string validate(KernelConfig const& c) {
  if (!rules::fields_in_range(c)) {
    return fmt("d_head = %d, B_r = %d, B_c = %d, n_warps = %d, stages = %d and the load tiles "
               "(%d, %d, %d) must each lie in [0, 65536]",
               c.d_head, c.B_r, c.B_c, c.n_warps, c.stages, c.Q_mma_load_K_tiles,
               c.K_mma_load_K_tiles, c.V_mma_load_K_tiles);
  }
  if (!rules::family_ok(c))
    return fmt("family = %d must be 0 (mma.sync) or 1 (sm90)", c.family);
  if (!rules::dtype_ok(c))
    return fmt("dtype = %d must be FP16 (%d) or BF16 (%d)", int(c.dtype), int(DType::kFP16),
               int(DType::kBF16));
  if (!rules::d_head_ok(c))
    return fmt("d_head = %d must be a multiple of 64 (the swizzle tile width) in [64, 256]", c.d_head);
  if (c.family == kSm90) return validate_sm90(c);
  if (!rules::mma_sync_stages_ok(c))
    return fmt("stages = %d, overlap = %d, pingpong = %d and persistent = %d must be 0 in the "
               "mma.sync family (sm90 knobs)",
               c.stages, int(c.overlap), int(c.pingpong), int(c.persistent));
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
               static_cast<long long>(c.smem_bytes()), kMaxSmemBytesAnyArch);
  return {};
}

std::string autotune_filter(KernelConfig const& c) {
  if (c.family == kSm90) return {};  // the seed's filter describes the mma.sync space only
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

std::string short_name(KernelConfig const& c) {
  std::string s = fmt("(%s, %d, %d, %d, %d): ", dtype_name(c.dtype), c.d_head, c.B_r, c.B_c, c.n_warps);
  if (c.family == kSm90) {
    return s + fmt("sm90+stages_%d", c.stages) + (c.overlap ? "+overlap" : "") +
           (c.pingpong ? "+pingpong" : "") + (c.persistent ? "+persistent" : "");
  }
  if (c.family != kMmaSync) s += fmt("family_%d+", c.family);
  if (c.stages != 0) s += fmt("stages_%d+", c.stages);
  if (c.overlap) s += "overlap+";
  if (c.pingpong) s += "pingpong+";
  if (c.persistent) s += "persistent+";
  if (c.async_copy) s += "async+";
  if (c.eager_load_blocks) s += "eager+";
  if (c.swizzled) s += "swizzled+";
  s += fmt("load_%d_%d_%d_tiles", c.Q_mma_load_K_tiles, c.K_mma_load_K_tiles, c.V_mma_load_K_tiles);
  if (c.mma_double_buffer_loads) s += "+buffer";
  if (c.optimized_softmax) s += "+opt_softmax";
  return s;
}

bool parse_short_name(std::string_view text, KernelConfig* out, std::string* error) {
  // A Markdown table row ("| (BF16, ...): ... | 512.3 |") parses from its first non-empty cell.
  for (std::string_view cell : split(text, '|')) {
    if (!trim(cell).empty()) {
      text = trim(cell);
      break;
    }
  }
  size_t open = text.find('(');
  size_t close = text.find("):");
  if (open != 0 || close == std::string_view::npos) {
    *error = "expected \"(<dtype>, <d_head>, <B_r>, <B_c>, <n_warps>): <features>\", got \"" +
             std::string(text) + "\"";
    return false;
  }
  std::vector<std::string_view> head = split(text.substr(1, close - 1), ',');
  if (head.size() != 5) {
    *error = fmt("expected 5 comma-separated values in parentheses, got %zu", head.size());
    return false;
  }
  KernelConfig c{};
  std::string_view dt = trim(head[0]);
  if (iequals(dt, "FP16") || dt == "5") {  // 5 and 15: the seed's torch::ScalarType codes
    c.dtype = DType::kFP16;
  } else if (iequals(dt, "BF16") || dt == "15") {
    c.dtype = DType::kBF16;
  } else {
    *error = "unknown dtype \"" + std::string(dt) + "\" (expected FP16 or BF16)";
    return false;
  }
  int32_t* ints[4] = {&c.d_head, &c.B_r, &c.B_c, &c.n_warps};
  char const* int_names[4] = {"d_head", "B_r", "B_c", "n_warps"};
  for (int i = 0; i < 4; ++i) {
    if (!parse_int(head[i + 1], ints[i])) {
      *error = std::string(int_names[i]) + " is not an integer: \"" + std::string(trim(head[i + 1])) +
               "\"";
      return false;
    }
  }
  bool have_load = false;
  for (std::string_view token : split(text.substr(close + 2), '+')) {
    token = trim(token);
    if (token == "sm90") {
      c.family = kSm90;
    } else if (token == "overlap") {
      c.overlap = true;
    } else if (token == "pingpong") {
      c.pingpong = true;
    } else if (token == "persistent") {
      c.persistent = true;
    } else if (token.starts_with("stages_")) {
      if (!parse_int(token.substr(7), &c.stages)) {
        *error = "malformed stages token \"" + std::string(token) + "\" (expected stages_<N>)";
        return false;
      }
    } else if (token.starts_with("family_")) {
      if (!parse_int(token.substr(7), &c.family)) {
        *error = "malformed family token \"" + std::string(token) + "\" (expected family_<N>)";
        return false;
      }
    } else if (token == "async") {
      c.async_copy = true;
    } else if (token == "eager") {
      c.eager_load_blocks = true;
    } else if (token == "swizzled") {
      c.swizzled = true;
    } else if (token == "buffer") {
      c.mma_double_buffer_loads = true;
    } else if (token == "opt_softmax") {
      c.optimized_softmax = true;
    } else if (token.starts_with("load_") && token.ends_with("_tiles")) {
      std::vector<std::string_view> qkv = split(token.substr(5, token.size() - 11), '_');
      if (qkv.size() != 3 || !parse_int(qkv[0], &c.Q_mma_load_K_tiles) ||
          !parse_int(qkv[1], &c.K_mma_load_K_tiles) || !parse_int(qkv[2], &c.V_mma_load_K_tiles)) {
        *error = "malformed load token \"" + std::string(token) + "\" (expected load_<Q>_<K>_<V>_tiles)";
        return false;
      }
      have_load = true;
    } else {
      *error = "unknown feature \"" + std::string(token) + "\"";
      return false;
    }
  }
  if (c.family == kSm90) {
    if (have_load || c.async_copy || c.eager_load_blocks || c.swizzled || c.mma_double_buffer_loads ||
        c.optimized_softmax) {
      *error = "an sm90 kernel has no mma.sync features (async, eager, swizzled, load_*, buffer, "
               "opt_softmax)";
      return false;
    }
  } else if (!have_load) {
    *error = "missing the load_<Q>_<K>_<V>_tiles feature";
    return false;
  }
  *out = c;
  return true;
}

}  // namespace fa
