// libFuzzer target: the tuning-file reader (fa::parse_tuning, what fa_context_load_tuning() runs
// on a file's text), on an sm_90 device whose kernels are those the measured choice tables name
// (the default build's registry), without a GPU: kernels are looked up with find_pinned() on a
// context that lists them, as on a real one.
// Properties checked on every input:
//   - the status is SUCCESS (no detail message), TUNING_ENTRIES_IGNORED (a detail message) or
//     PARSE_ERROR (a detail message, nothing returned);
//   - every loaded entry is one of the device's kernels, of the entry's dtype, at its head
//     dim or above it (an entry below a kernel's own: a multiple of 8);
//   - what was loaded, written back by format_tuning() (fa_context_save_tuning()'s text), reads
//     back to the same entries with SUCCESS.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "api/context.hpp"
#include "api/tuning.hpp"
#include "cuda/heuristic.hpp"
#include "flashattn.h"

namespace {

constexpr int kArch = 90;

struct Device {
  std::vector<fa::cuda::KernelEntry> entries;
  fa_context_s ctx;
};

Device const& device() {
  static Device* const d = [] {
    std::set<fa::KernelConfig> configs;
    auto add = [&](fa::KernelConfig k) {
      for (fa::DType t : {fa::DType::kFP16, fa::DType::kBF16}) {
        k.dtype = t;
        configs.insert(fa::canonical(k));
      }
    };
    for (auto const& pick : fa::cuda::choice_picks()) add(pick.config);
    for (auto const& candidate : fa::cuda::choice_candidates()) add(candidate.config);
    auto* dev = new Device;  // lives for the process, as a context would
    for (fa::KernelConfig const& k : configs) {
      fa::cuda::KernelEntry entry{};  // no launch functions: nothing runs on this device
      entry.config = k;
      dev->entries.push_back(entry);
    }
    dev->ctx.device = 0;
    dev->ctx.gpu.cc_major = kArch / 10;
    dev->ctx.gpu.cc_minor = kArch % 10;
    for (auto const& e : dev->entries) dev->ctx.gpu.kernels.push_back(&e);
    return dev;
  }();
  return *d;
}

[[noreturn]] void finding(char const* what, std::string const& text) {
  std::fprintf(stderr, "fuzz_tuning_file: %s\n  detail: %s\n  text:\n%s\n", what,
               fa_last_error_detail(), text.c_str());
  std::abort();
}

fa_status parse(std::string const& text, fa::TunedKernels* out) {
  auto lookup = [](fa::KernelConfig const& k, fa::Problem const& p,
                   fa::cuda::KernelEntry const** e) {
    return fa::find_pinned(&device().ctx, k, p, e);
  };
  return fa::parse_tuning(text, "fuzz input", kArch, lookup, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(uint8_t const* data, size_t size) {
  std::string const text(reinterpret_cast<char const*>(data), size);
  fa::TunedKernels loaded;
  fa_status s = parse(text, &loaded);
  bool const has_detail = fa_last_error_detail()[0] != '\0';
  if (s == FA_STATUS_PARSE_ERROR) {
    if (!has_detail || !loaded.empty()) finding("PARSE_ERROR without detail or with entries", text);
    return 0;
  }
  if (s == FA_STATUS_SUCCESS && has_detail) finding("SUCCESS with a detail message", text);
  if (s == FA_STATUS_TUNING_ENTRIES_IGNORED && !has_detail) {
    finding("TUNING_ENTRIES_IGNORED without a detail message", text);
  }
  if (s != FA_STATUS_SUCCESS && s != FA_STATUS_TUNING_ENTRIES_IGNORED) {
    finding("an unexpected status", text);
  }

  auto const& kernels = device().ctx.gpu.kernels;
  for (auto const& [key, entry] : loaded) {
    auto const& [dtype, causal, head_dim, seqlen_q, seqlen_k, head_dim_v] = key;
    bool known = false;
    for (auto const* k : kernels) known = known || k == entry;
    if (!known) finding("an entry is not one of the device's kernels", text);
    // A kernel runs its own head dim and every multiple of 8 below it (zero columns).
    int const d = entry->config.d_head;
    if (static_cast<int>(entry->config.dtype) != dtype || d < head_dim ||
        (d != head_dim && (head_dim % 8 != 0 || head_dim < 8)) || seqlen_q < 1 || seqlen_k < 1 ||
        head_dim_v < 1 || head_dim_v > head_dim) {
      finding("an entry's kernel does not fit its shape", text);
    }
  }

  std::string const written = fa::format_tuning(kArch, loaded);
  fa::TunedKernels reread;
  if (parse(written, &reread) != FA_STATUS_SUCCESS) {
    finding("the written file does not read back", written);
  }
  if (reread != loaded) finding("the written file reads back other entries", written);
  return 0;
}
