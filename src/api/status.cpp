// The C API's version and status functions.
#include "core/status.hpp"

extern "C" {

FA_API unsigned fa_version_number(void) { return FA_VERSION_NUMBER; }

FA_API char const* fa_version_string(void) { return FA_VERSION_STRING; }

FA_API char const* fa_last_error_detail(void) { return fa::detail_message(); }

FA_API char const* fa_status_string(fa_status status) {
  switch (status) {
    case FA_STATUS_SUCCESS: return "FA_STATUS_SUCCESS: no error";
    case FA_STATUS_INVALID_ARGUMENT: return "FA_STATUS_INVALID_ARGUMENT: an argument is invalid";
    case FA_STATUS_BAD_STRUCT_SIZE:
      return "FA_STATUS_BAD_STRUCT_SIZE: a struct's struct_size field is wrong";
    case FA_STATUS_UNSUPPORTED: return "FA_STATUS_UNSUPPORTED: no kernel can run this problem";
    case FA_STATUS_INVALID_KERNEL_CONFIG:
      return "FA_STATUS_INVALID_KERNEL_CONFIG: the kernel config breaks a rule";
    case FA_STATUS_KERNEL_NOT_AVAILABLE:
      return "FA_STATUS_KERNEL_NOT_AVAILABLE: the kernel is not compiled in or cannot run this problem";
    case FA_STATUS_PARSE_ERROR: return "FA_STATUS_PARSE_ERROR: the kernel name could not be parsed";
    case FA_STATUS_NO_DEVICE: return "FA_STATUS_NO_DEVICE: no such CUDA device";
    case FA_STATUS_ARCH_MISMATCH:
      return "FA_STATUS_ARCH_MISMATCH: no compiled kernel runs on this device";
    case FA_STATUS_CUDA_ERROR: return "FA_STATUS_CUDA_ERROR: a CUDA call failed";
    case FA_STATUS_OUT_OF_MEMORY: return "FA_STATUS_OUT_OF_MEMORY: a host allocation failed";
    case FA_STATUS_WORKSPACE_TOO_SMALL:
      return "FA_STATUS_WORKSPACE_TOO_SMALL: the workspace is smaller than the plan needs";
    case FA_STATUS_WRONG_CONTEXT:
      return "FA_STATUS_WRONG_CONTEXT: the call does not fit the context's device";
    case FA_STATUS_INTERNAL_ERROR: return "FA_STATUS_INTERNAL_ERROR: internal error";
    case FA_STATUS_IO_ERROR: return "FA_STATUS_IO_ERROR: a file could not be read or written";
    case FA_STATUS_TUNING_ENTRIES_IGNORED:
      return "FA_STATUS_TUNING_ENTRIES_IGNORED: some tuning entries were skipped (a warning)";
  }
  return "FA_STATUS_UNKNOWN";
}

}  // extern "C"
