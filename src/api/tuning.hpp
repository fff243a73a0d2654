// The tuning file's text, apart from files and contexts: fa_context_save_tuning() and
// fa_context_load_tuning() wrap these, and fuzz/fuzz_tuning_file.cpp drives them without a GPU.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "api/context.hpp"
#include "core/kernel_config.hpp"
#include "core/problem.hpp"
#include "cuda/kernel_entry.hpp"
#include "flashattn.h"

namespace fa {

// Tuning results by shape, as a context keeps them.
using TunedKernels = std::map<ChoiceKey, cuda::KernelEntry const*>;

// The kernel entry that runs `kernel` on problems shaped like `p` (on a context: find_pinned()).
// On failure it returns the status and leaves the reason as this thread's detail message.
using KernelLookup =
    std::function<fa_status(KernelConfig const& kernel, Problem const& p,
                            cuda::KernelEntry const** out)>;

// Parses the text of a tuning file for a device of compute capability `arch` (major * 10 +
// minor); `source` names the file in messages. Entries that do not fit (malformed, another arch,
// a kernel `lookup` refuses) are skipped.
// Returns FA_STATUS_SUCCESS (detail cleared) or FA_STATUS_TUNING_ENTRIES_IGNORED (detail: how many
// were skipped and the first reason), with the entries in `out`; or FA_STATUS_PARSE_ERROR (not a
// tuning file of this version), leaving `out` untouched.
fa_status parse_tuning(std::string_view text, char const* source, int arch,
                       KernelLookup const& lookup, TunedKernels* out);

// The text fa_context_save_tuning() writes for `tuned` on a device of compute capability `arch`.
std::string format_tuning(int arch, TunedKernels const& tuned);

}  // namespace fa
