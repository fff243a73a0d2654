// The sm90 family's answers to core/family_config.hpp: the reasons for its rules (config.hpp) and
// its knobs' tokens in a kernel name ("sm90+stages_<N>" and the knobs that are on).
#include "cuda/sm90/config.hpp"

#include "core/family_config.hpp"
#include "core/kernel_config_text.hpp"
#include "core/text.hpp"

namespace fa::cuda::sm90 {

namespace {

std::string validate(KernelConfig const& c) {
  if (!rules::warps_ok(c))
    return fmt("n_warps = %d must be 8, 12 or 16 (a producer warpgroup and 1 to 3 consumer "
               "warpgroups) in the sm90 family", c.n_warps);
  if (!rules::B_r_ok(c))
    return fmt("B_r = %d must be 64 per consumer warpgroup, %d with n_warps = %d", c.B_r,
               16 * (c.n_warps - 4), c.n_warps);
  if (!rules::B_c_ok(c))
    return fmt("B_c = %d must be a multiple of 16 in [64, 256] (a wgmma N) in the sm90 family",
               c.B_c);
  if (!rules::stages_ok(c)) return fmt("stages = %d must be 2, 3 or 4", c.stages);
  if (!rules::pingpong_ok(c))
    return fmt("pingpong needs two consumer warpgroups (n_warps = 12), not n_warps = %d", c.n_warps);
  if (!rules::e4m3_ok(c))
    return fmt("an E4M3 kernel needs n_warps = 12, d_head = 128 or 256, B_c = 64, 128, 192 "
               "or 256 and room for two raw V slots, or none where S, P and O take over 176 "
               "registers (V copied from its images) (got n_warps = %d, d_head = %d, B_c = %d, "
               "%lld slot(s))",
               c.n_warps, c.d_head, c.B_c, static_cast<long long>(e4m3_v_slots(c)));
  if (!rules::registers_ok(c))
    return fmt("B_c = %d and d_head = %d need %lld accumulator registers per thread (B_c / 2 for "
               "S, B_c / 4 for P (B_c / 8 in E4M3), v_cols / 2 for O; v_cols = %lld), over the "
               "%lld a tile with n_warps = %d may hold (its consumer's %d less 24, at most 200 in "
               "a 16-bit tile of two consumer warpgroups)",
               c.B_c, c.d_head, static_cast<long long>(rules::accumulator_regs(c)),
               static_cast<long long>(v_cols(c)),
               static_cast<long long>(rules::accumulator_limit(c)), c.n_warps,
               rules::consumer_regs(c));
  if (c.dtype == DType::kE4M3 && !rules::smem_ok(c))
    return fmt("shared memory of the E4M3 layout (Q, stages of K and of V transposed, V's TMA "
               "slots) = %lld bytes exceeds %d", static_cast<long long>(smem_bytes(c)),
               kMaxSmemBytesAnyArch);
  if (!rules::smem_ok(c))
    return fmt("shared memory 1024 + (B_r * d_head + stages * B_c * (d_head + v_cols)) * 2 + "
               "barriers = %lld bytes exceeds %d (v_cols = %lld: d_head, or 128 where that "
               "alone fits)",
               static_cast<long long>(smem_bytes(c)), kMaxSmemBytesAnyArch,
               static_cast<long long>(v_cols(c)));
  return {};
}

std::string knobs_unset(KernelConfig const& c, char const* owner) {
  if (rules::knobs_unset(c)) return {};
  return fmt("stages = %d, overlap = %d, pingpong = %d and persistent = %d must be 0 in the "
             "%s family (sm90 knobs)",
             c.stages, int(c.overlap), int(c.pingpong), int(c.persistent), owner);
}

int64_t smem(KernelConfig const& c) { return smem_bytes(c); }

// Every knob changes the code.
KernelConfig canonical(KernelConfig c) { return c; }

// The seed's filter describes the mma.sync space only: it keeps every sm90 config.
std::string autotune_filter(KernelConfig const&) { return {}; }

// stages_<N> always in an sm90 name; in another family's, where stages is not 0.
void name_tokens(KernelConfig const& c, bool own, std::vector<std::string>& out) {
  if (own || c.stages != 0) out.push_back(fmt("stages_%d", c.stages));
  if (c.overlap) out.push_back("overlap");
  if (c.pingpong) out.push_back("pingpong");
  if (c.persistent) out.push_back("persistent");
}

Token parse_token(std::string_view token, KernelConfig* c, std::string* error) {
  static constexpr FlagToken kFlags[] = {{"overlap", &KernelConfig::overlap},
                                         {"pingpong", &KernelConfig::pingpong},
                                         {"persistent", &KernelConfig::persistent}};
  if (set_flag(kFlags, token, c)) return Token::kKnob;
  if (!token.starts_with("stages_")) return Token::kNotMine;
  if (!parse_int(token.substr(7), &c->stages)) {
    *error = "malformed stages token \"" + std::string(token) + "\" (expected stages_<N>)";
    return Token::kMalformed;
  }
  return Token::kKnob;
}

}  // namespace

FamilyConfig const kConfig{kId,
                           "sm90",
                           "sm90",
                           "an sm90 kernel",
                           "stages_<N>, overlap, pingpong, persistent",
                           nullptr,
                           &validate,
                           &knobs_unset,
                           &smem,
                           &canonical,
                           &autotune_filter,
                           &name_tokens,
                           &parse_token};

}  // namespace fa::cuda::sm90
