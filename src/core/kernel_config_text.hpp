// A kernel config in words: the reasons its rules give, and its short-form name both ways.
// Host code only (the kernel files include core/kernel_config.hpp alone, see there).
#pragma once

#include <string>
#include <string_view>

#include "core/kernel_config.hpp"

namespace fa {

// The first broken rule, worded for a user; empty when the config is valid.
std::string validate(KernelConfig const& c);

// The seed's should_autotune_config, as the family words it: empty when the filter keeps the
// config, else the rule that dropped it.
std::string autotune_filter(KernelConfig const& c);

// "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles+buffer" (mma.sync) or
// "(BF16, 128, 128, 128, 12): sm90+stages_2" (sm90)
std::string short_name(KernelConfig const& c);

// Parses short_name()'s format. On failure returns false and sets *error to what failed.
bool parse_short_name(std::string_view text, KernelConfig* out, std::string* error);

}  // namespace fa
