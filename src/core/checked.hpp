// Overflow-checked int64 arithmetic for sizes, strides and the extents derived from them. The
// C API computes every extent a later step uses through these, once, at validation: a product
// that leaves int64 (or the element bound below) is refused there, so the backends' own
// products of the same values cannot wrap.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace fa {

// Elements any tensor or run-time array may span: 2^60, so that byte counts (up to 8 bytes per
// element) and one more add of a base offset stay below 2^63.
constexpr int64_t kMaxElements = int64_t{1} << 60;

// a * b + c, or false when a step leaves int64.
inline bool checked_mul_add(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t product;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(product, c, out);
}

// The product of `factors`, or false when it leaves int64.
inline bool checked_product(std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t total = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(total, f, &total)) return false;
  }
  *out = total;
  return true;
}

// The product of `factors` when it is an element count within [0, kMaxElements]; else false.
inline bool bounded_count(std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t total;
  if (!checked_product(factors, &total) || total < 0 || total > kMaxElements) return false;
  *out = total;
  return true;
}

}  // namespace fa
