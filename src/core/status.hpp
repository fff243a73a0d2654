// Failure reporting shared by every layer: a status plus this thread's detail message, which
// fa_last_error_detail() returns at the C boundary (src/api/status.cpp).
#pragma once

#include "flashattn.h"

namespace fa {

// Sets this thread's detail message (printf-style) and returns `status`.
[[gnu::format(printf, 2, 3)]] fa_status fail(fa_status status, char const* format, ...);

void clear_detail();

// This thread's detail message ("" after clear_detail()); valid until its next fail().
char const* detail_message();

}  // namespace fa
