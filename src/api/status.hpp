// Status plumbing of the C API: the thread-local detail message, and the guard that keeps C++
// exceptions from crossing the C boundary.
#pragma once

#include <exception>
#include <new>

#include "flashattn.h"

namespace fa {

// Sets this thread's detail message (printf-style) and returns `status`.
[[gnu::format(printf, 2, 3)]] fa_status fail(fa_status status, char const* format, ...);

void clear_detail();

// Runs `body` (returning fa_status) with the detail message cleared first; any exception becomes a
// status: std::bad_alloc -> FA_STATUS_OUT_OF_MEMORY, anything else -> FA_STATUS_INTERNAL_ERROR.
template <class Body>
fa_status guarded(Body&& body) noexcept {
  try {
    clear_detail();
    return body();
  } catch (std::bad_alloc const&) {
    return fail(FA_STATUS_OUT_OF_MEMORY, "host allocation failed");
  } catch (std::exception const& e) {
    return fail(FA_STATUS_INTERNAL_ERROR, "unexpected exception: %s", e.what());
  } catch (...) {
    return fail(FA_STATUS_INTERNAL_ERROR, "unexpected non-standard exception");
  }
}

}  // namespace fa
