// The C boundary's guard: no C++ exception crosses it, and every entry point starts with this
// thread's detail message cleared.
#pragma once

#include <exception>
#include <new>

#include "core/status.hpp"
#include "flashattn.h"

namespace fa {

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
