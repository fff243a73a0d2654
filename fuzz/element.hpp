// Reads element i of a tensor of the library's storage dtypes (e4m3 inputs included) as a
// double, for the fuzz targets' result checks. fp16 is decoded by hand (no host half type in
// C++20): exact, since every fp16 value is a double.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "flashattn.h"

inline double decode_element(int dtype, unsigned char const* buf, int64_t i) {
  if (dtype == FA_DTYPE_E4M3) {  // e4m3fn: bias 7, no infinity, NaN at magnitude 0x7f
    int const exponent = (buf[i] >> 3) & 0xF, mantissa = buf[i] & 0x7;
    double const sign = (buf[i] & 0x80) ? -1.0 : 1.0;
    if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
    if (exponent == 0) return sign * std::ldexp(mantissa, -9);
    return sign * std::ldexp(mantissa + 8, exponent - 10);
  }
  if (dtype == FA_DTYPE_FP32) {
    float f;
    std::memcpy(&f, buf + 4 * i, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, buf + 2 * i, 2);
  if (dtype == FA_DTYPE_BF16) return std::bit_cast<float>(uint32_t{bits} << 16);
  int const exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
  double const sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1F) return mantissa ? std::numeric_limits<double>::quiet_NaN()
                                        : sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}
