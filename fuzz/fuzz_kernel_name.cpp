// libFuzzer target: the kernel-name parser, through the public API.
// Properties checked on every input (text up to its first NUL, as a C caller passes it):
//   - fa_kernel_config_parse() succeeds or returns FA_STATUS_PARSE_ERROR with a detail message;
//   - a parsed config has a name (fa_kernel_config_name(), written into a buffer of exactly the
//     size it asks for), and that name parses back to the same config and prints the same;
//   - a parsed config that validates has a name under 128 bytes (the header's promise), and its
//     canonical config validates, is its own canonical config, and is registered iff it is.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flashattn.h"

namespace {

[[noreturn]] void finding(char const* what, std::string const& input) {
  std::fprintf(stderr, "fuzz_kernel_name: %s\n  input: \"%s\"\n  detail: %s\n", what,
               input.c_str(), fa_last_error_detail());
  std::abort();
}

bool same(fa_kernel_config const& a, fa_kernel_config const& b) {
  return a.dtype == b.dtype && a.d_head == b.d_head && a.B_r == b.B_r && a.B_c == b.B_c &&
         a.n_warps == b.n_warps && a.async_copy == b.async_copy &&
         a.eager_load_blocks == b.eager_load_blocks && a.swizzled == b.swizzled &&
         a.Q_mma_load_K_tiles == b.Q_mma_load_K_tiles &&
         a.K_mma_load_K_tiles == b.K_mma_load_K_tiles &&
         a.V_mma_load_K_tiles == b.V_mma_load_K_tiles &&
         a.mma_double_buffer_loads == b.mma_double_buffer_loads &&
         a.optimized_softmax == b.optimized_softmax;
}

fa_kernel_config fresh() {
  fa_kernel_config c;
  fa_kernel_config_init(&c);
  return c;
}

// The config's name, in a heap buffer of exactly the size fa_kernel_config_name() asks for, so
// AddressSanitizer sees any write past it.
std::string name_of(fa_kernel_config const& c, std::string const& input) {
  size_t needed = 0;
  if (fa_kernel_config_name(&c, nullptr, 0, &needed) != FA_STATUS_INVALID_ARGUMENT || needed < 2) {
    finding("fa_kernel_config_name(NULL, 0) did not report the size needed", input);
  }
  std::vector<char> buf(needed);
  if (fa_kernel_config_name(&c, buf.data(), buf.size(), nullptr) != FA_STATUS_SUCCESS) {
    finding("a parsed config has no name", input);
  }
  if (std::strlen(buf.data()) + 1 != needed) finding("the name's length is not needed - 1", input);
  return buf.data();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(uint8_t const* data, size_t size) {
  std::string const input(reinterpret_cast<char const*>(data), size);
  fa_kernel_config parsed = fresh();
  fa_status s = fa_kernel_config_parse(input.c_str(), &parsed);
  if (s == FA_STATUS_PARSE_ERROR) {
    if (fa_last_error_detail()[0] == '\0') finding("a parse error without a detail message", input);
    return 0;
  }
  if (s != FA_STATUS_SUCCESS) finding("a status other than SUCCESS and PARSE_ERROR", input);

  std::string const name = name_of(parsed, input);
  fa_kernel_config again = fresh();
  if (fa_kernel_config_parse(name.c_str(), &again) != FA_STATUS_SUCCESS) {
    finding("the printed name does not parse", name);
  }
  if (!same(parsed, again)) finding("name -> parse gives another config", name);
  if (name_of(again, input) != name) finding("parse -> name is not a fixed point", name);

  int keep = -1;
  if (fa_kernel_config_autotune_filter(&parsed, &keep) != FA_STATUS_SUCCESS ||
      (keep != 0 && keep != 1)) {
    finding("fa_kernel_config_autotune_filter failed on a parsed config", name);
  }
  if (fa_kernel_config_validate(&parsed) != FA_STATUS_SUCCESS) return 0;
  if (name.size() + 1 > 128) finding("a valid config's name needs 128 bytes or more", name);
  fa_kernel_config canon = fresh(), canon2 = fresh();
  if (fa_kernel_config_canonical(&parsed, &canon) != FA_STATUS_SUCCESS ||
      fa_kernel_config_canonical(&canon, &canon2) != FA_STATUS_SUCCESS) {
    finding("fa_kernel_config_canonical failed", name);
  }
  if (!same(canon, canon2)) finding("the canonical config is not canonical", name);
  if (fa_kernel_config_validate(&canon) != FA_STATUS_SUCCESS) {
    finding("a valid config's canonical config is invalid", name);
  }
  int registered = -1, canon_registered = -1;
  if (fa_kernel_is_registered(&parsed, &registered) != FA_STATUS_SUCCESS ||
      fa_kernel_is_registered(&canon, &canon_registered) != FA_STATUS_SUCCESS ||
      registered != canon_registered) {
    finding("a config and its canonical config differ in fa_kernel_is_registered", name);
  }
  return 0;
}
