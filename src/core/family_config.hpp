// What the family-independent kernel-config code (core/kernel_config.cpp) asks a kernel family
// about its configs: its rules, its shared memory, its canonical form and its knobs' tokens in a
// kernel name. Each family answers in its folder (src/cuda/<family>/config.hpp and config.cpp,
// host only, so the CPU-only build validates and names every family's configs too); the families
// are listed once, in tools/generate_kernels.py, which emits family_configs().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/kernel_config.hpp"

namespace fa {

// What one token of a kernel name is to a family (FamilyConfig::parse_token).
enum class Token {
  kNotMine,    // not one of the family's tokens
  kKnob,       // one of its knobs, read into the config
  kRequired,   // its required token (FamilyConfig::required_token), read into the config
  kMalformed,  // its token, malformed: the error says how
};

struct FamilyConfig {
  int32_t id;        // KernelConfig::family (FA_FAMILY_*)
  char const* name;  // in messages: "mma.sync", "sm90"
  // The token naming the family in a kernel name ("sm90"), or nullptr for the one family whose
  // names carry none (mma.sync: the seed's names predate families). A config of no family the
  // library knows is named in that family's form, with a "family_<N>" token.
  char const* tag;
  // How messages call one of the family's kernels ("an sm90 kernel").
  char const* a_kernel;
  // The family's knob tokens, listed for a name that mixes them into another family's.
  char const* knob_tokens;
  // The token every name of the family carries, for the error that misses it; nullptr if none.
  char const* required_token;

  // The first of the family's own rules that `c` (of the family, within the common rules)
  // breaks, worded for a user; empty when it keeps them all.
  std::string (*validate)(KernelConfig const& c);
  // Empty when the family's knobs are at their defaults in `c`, a config of the family named
  // `owner`; else the rule that they be, worded for a user.
  std::string (*knobs_unset)(KernelConfig const& c, char const* owner);
  // Shared memory of one block of `c`, a config of the family; int64 because the rules
  // evaluate it on unvalidated configs.
  int64_t (*smem_bytes)(KernelConfig const& c);
  // The config of the family that compiles to the same code as `c` (KernelConfig's canonical()).
  KernelConfig (*canonical)(KernelConfig c);
  // The seed's autotune filter for the family's configs: empty when it keeps `c`.
  std::string (*autotune_filter)(KernelConfig const& c);
  // Appends the tokens of the family's knobs in `c` to `out`: all of them when `c` is of the
  // family (own), only those away from their defaults otherwise (a name shows every knob set).
  void (*name_tokens)(KernelConfig const& c, bool own, std::vector<std::string>& out);
  // Reads `token` into `c` if it is one of the family's knob tokens.
  Token (*parse_token)(std::string_view token, KernelConfig* c, std::string* error);
};

// A knob that is on when its token is in the name.
struct FlagToken {
  using Field = bool KernelConfig::*;
  char const* token;
  Field field;
};

// Turns on the flag that `token` names, if one of `flags` does.
inline bool set_flag(std::span<FlagToken const> flags, std::string_view token, KernelConfig* c) {
  for (FlagToken const& f : flags) {
    if (token == f.token) {
      c->*f.field = true;
      return true;
    }
  }
  return false;
}

// Every family, in KernelConfig::family order (generated: family_configs_generated.cpp).
std::span<FamilyConfig const* const> family_configs();

// The family with this KernelConfig::family value, or nullptr when there is none.
FamilyConfig const* find_family_config(int32_t family);

}  // namespace fa
