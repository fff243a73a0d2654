#include "core/status.hpp"

#include <cstdarg>
#include <cstdio>

namespace fa {

namespace {
// Fixed-size so that recording a failure can never itself fail; the longest message (a kernel
// name plus a reason) is under 300 bytes.
thread_local char t_detail[512];
}  // namespace

fa_status fail(fa_status status, char const* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_detail, sizeof t_detail, format, args);
  va_end(args);
  return status;
}

void clear_detail() { t_detail[0] = '\0'; }

char const* detail_message() { return t_detail; }

}  // namespace fa
