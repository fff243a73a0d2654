// The test binary's operator new and delete, counting each thread's allocations. The library's
// operator new calls resolve to these: libstdc++ is a shared library, and an executable's
// definition comes first in the dynamic lookup. Defined in a file of their own, so the compiler
// never inlines them next to a caller (GCC's -Wmismatched-new-delete then sees free() of memory
// from operator new).
#include <cstdlib>
#include <new>

#include "common/alloc_count.hpp"

namespace {
thread_local long t_allocations = 0;
}  // namespace

long allocations_on_this_thread() { return t_allocations; }

void* operator new(std::size_t n) {
  ++t_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
