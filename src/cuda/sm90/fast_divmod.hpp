// Division by a launch's constants with a multiply and a shift (the sm90 tile scheduler's tile
// decoding: tile_scheduler.cuh's work_of). Host and device: the launcher builds the divisors,
// the family tests check them against / and %.
//
// At d 64, 512 keys (H200, ncu's SASS view of the persistent kernel), the four integer
// divisions decoding each tile (the split, the head group, the pair within it, the head) were
// four I2F.U32.RP / MUFU.RCP / F2I sequences, 9% of the kernel's stall samples, run by each of
// the block's 9 warps at every tile, 4 key blocks per tile at that length.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FA_FAST_DIVMOD_FN __host__ __device__ __forceinline__
#else
#define FA_FAST_DIVMOD_FN inline
#endif

namespace fa::cuda::sm90 {

// n / divisor for n and divisor in [1, 2^31) as umulhi(n, multiplier) >> shift, with
// multiplier = ceil(2^(31 + l) / divisor) and shift = l - 1, l = ceil(log2 divisor): the
// multiplier's excess over 2^(31 + l) / divisor is below 1, so n times it stays below 1 / divisor
// short of the next integer for every n < 2^31 (Granlund and Montgomery, 1994), and it is below
// 2^32. A divisor of 1 keeps multiplier 0 and returns n.
struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;
  uint32_t shift = 0;

  // Host. d in [1, 2^31): the launcher's divisors are counts of at least 1 whose products with
  // the query blocks stay within the grid's 2^31 - 1 tiles (choice.cpp refuses larger grids).
  static FastDivmod make(int64_t d) {
    FastDivmod f;
    if (d <= 1 || d >= (int64_t(1) << 31)) return f;
    uint32_t l = 0;
    while ((int64_t(1) << l) < d) ++l;
    f.divisor = uint32_t(d);
    f.multiplier = uint32_t(((uint64_t(1) << (31 + l)) + uint64_t(d) - 1) / uint64_t(d));
    f.shift = l - 1;
    return f;
  }

  FA_FAST_DIVMOD_FN uint32_t div(uint32_t n) const {
    if (multiplier == 0) return n;
#if defined(__CUDA_ARCH__)
    return __umulhi(n, multiplier) >> shift;
#else
    return uint32_t((uint64_t(n) * multiplier) >> 32) >> shift;
#endif
  }

  // q = n / divisor, r = n % divisor.
  FA_FAST_DIVMOD_FN void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

}  // namespace fa::cuda::sm90

#undef FA_FAST_DIVMOD_FN
