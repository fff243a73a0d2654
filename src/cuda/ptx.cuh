// Thin wrappers over the sm_80+ PTX instructions the kernels are built from: the mma.sync
// family's copies, ldmatrix and MMAs, and what the sm90 family and the merge kernels share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa::cuda::ptx {

__device__ __forceinline__ uint32_t smem_addr(void const* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1 (.cg): each K/V tile is read once per block.
__device__ __forceinline__ void cp_async_16(uint32_t smem, void const* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
// As cp_async_16, but writes 16 zero bytes instead of reading when `valid` is false (rows past
// the end of a sequence), so the tile never holds stale or uninitialised data.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem, void const* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 16 : 0));
}
// As cp_async_16, reading the first `bytes` (0, 8 or 16) and zero-filling the rest: an e4m3
// tile's 16-byte chunk at the end of a head dim that is a multiple of 8 but not of 16.
__device__ __forceinline__ void cp_async_16_bytes(uint32_t smem, void const* gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(bytes));
}
// Programmatic dependent launch (sm_90): allow_dependent_grids() lets a grid launched after this
// one with the programmatic attribute start early; wait_for_prior_grids() waits until the grids
// it depends on have finished and their writes are visible. No-ops on older archs, where the
// launch attribute that allows the early start is not set.
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void st_shared_16(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ uint4 ld_shared_16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// `addr` is a shared-memory byte address (smem_addr); a constant added to it folds into the
// instruction's immediate offset.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A * B + D for one m16n8k16 tile, fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], uint32_t const (&a)[4],
                                             uint32_t const (&b)[2]) {
  if constexpr (std::is_same_v<T, __half>) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Two floats rounded to nearest and packed as one 32-bit register of 16-bit values (low = x).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float x, float y) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

// Four floats rounded to nearest e4m3 (e4m3fn, saturating: magnitudes past 448 give 448, NaN
// stays NaN) as the bytes of one register, a in byte 0 (cvt's e4m3x2 form puts its first
// operand in the upper byte). sm_89 and newer.
__device__ __forceinline__ uint32_t e4m3x4_from(float a, float b, float c, float d) {
  uint32_t out = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n"
      ".reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n"
      "}\n"
      : "=r"(out)
      : "f"(a), "f"(b), "f"(c), "f"(d));
#endif
  return out;
}

// The 4 x 4 byte matrix of rows a, b, c, d transposed: r[i] holds byte i of a, b, c and d, in
// that order (eight byte permutes).
__device__ __forceinline__ void transpose_bytes_4x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                                    uint32_t (&r)[4]) {
  uint32_t const ab_lo = __byte_perm(a, b, 0x5140), ab_hi = __byte_perm(a, b, 0x7362);
  uint32_t const cd_lo = __byte_perm(c, d, 0x5140), cd_hi = __byte_perm(c, d, 0x7362);
  r[0] = __byte_perm(ab_lo, cd_lo, 0x5410);
  r[1] = __byte_perm(ab_lo, cd_lo, 0x7632);
  r[2] = __byte_perm(ab_hi, cd_hi, 0x5410);
  r[3] = __byte_perm(ab_hi, cd_hi, 0x7632);
}

// Four e4m3 (e4m3fn) values, byte i of `w` element i, as two registers of 16-bit values (T;
// elements 0, 1 in .x, low first), exactly. f16 on sm_89 and newer: cvt.rn.f16x2.e4m3x2, one
// instruction per pair (e4m3 fits f16; a NaN byte gives NaN). Otherwise each byte's sign,
// exponent and mantissa bits move into T's fields unchanged, which reads the value times 2^-8
// in f16 and times 2^-120 in bf16 (subnormals included: both formats hold e4m3's 3 mantissa
// bits over its whole range, and neither fma below flushes them), and one fma by 2^8 or 2^120
// (plus -0, which keeps every value and sign) restores it: 3 integer instructions and one fma
// per pair; e4m3's NaN bytes (0x7f, 0xff) read as +-480 there.
template <typename T>
__device__ __forceinline__ uint2 e4m3x4_to(uint32_t w) {
  constexpr bool kHalf = std::is_same_v<T, __half>;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kHalf) {
    uint32_t lo, hi;
    asm("{\n"
        ".reg .b16 a, b;\n"
        "mov.b32 {a, b}, %2;\n"
        "cvt.rn.f16x2.e4m3x2 %0, a;\n"
        "cvt.rn.f16x2.e4m3x2 %1, b;\n"
        "}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
    return make_uint2(lo, hi);
  }
#endif
  // Byte j of each pair into bits 8-15 of its half: sign at bit 15, the rest shifted down
  // below it into place (f16: exponent at bit 10, so by 1; bf16: at bit 7, so by 4).
  uint32_t const pair[2] = {__byte_perm(w, 0u, 0x1404), __byte_perm(w, 0u, 0x3424)};
  uint32_t out[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    uint32_t const bits = kHalf ? (pair[i] & 0x80008000u) | ((pair[i] >> 1) & 0x3f803f80u)
                                : (pair[i] & 0x80008000u) | ((pair[i] >> 4) & 0x07f007f0u);
    if constexpr (kHalf) {
      asm("fma.rn.f16x2 %0, %1, %2, %3;\n"
          : "=r"(out[i])
          : "r"(bits), "r"(0x5c005c00u), "r"(0x80008000u));  // 2^8, -0
    } else {
      asm("fma.rn.bf16x2 %0, %1, %2, %3;\n"
          : "=r"(out[i])
          : "r"(bits), "r"(0x7b807b80u), "r"(0x80008000u));  // 2^120, -0
    }
  }
  return make_uint2(out[0], out[1]);
}

// bf16 query rows as fp16 rows times a power of two, for the products against an e4m3 cache
// that both families run in fp16 (but the sm90 family's S = Q K^T with bf16 queries at d 128
// and 256 and no general feature: e4m3, mainloop_mma.cuh's q_bf16_to_e4m3_pair) (e4m3 becomes
// fp16 in one instruction per pair, bf16 in five
// bit operations; docs/performance.md). Each row is multiplied by the 2^-k that puts its
// largest magnitude in [2^14, 2^15): fp16's 11-bit significand holds every bf16 value (8 bits)
// within 2^28 of the row's largest exactly, and the rest (subnormal or zero in fp16) are off by
// at most 2^-25 each, 2^-39 of the row's largest; 2^k, exact, multiplies the row's scores. A
// row whose largest magnitude is zero, infinite or NaN keeps k = 0 (fmaxf passes over NaN; a
// row holding an infinity gives inf or NaN scores in bf16 too). The callers own the row's
// layout in shared memory and the reduction of the maximum over a row's threads.

// The larger of `mx` and the magnitudes of the eight bf16 values in `x`.
__device__ __forceinline__ float bf16x8_abs_max(uint4 x, float mx) {
  uint32_t const w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    mx = fmaxf(mx, fmaxf(fabsf(__uint_as_float(w[e] << 16)),
                         fabsf(__uint_as_float(w[e] & 0xffff0000u))));
  }
  return mx;
}

// k for a row whose largest magnitude is `mx`: its exponent less `top` (14 puts mx 2^-k in
// [2^14, 2^15), under fp16's 65504; 7 in [128, 256), under e4m3's 448), kept where 2^k and
// 2^-k are normal floats; 0 for a zero, infinite or NaN maximum.
__device__ __forceinline__ int bf16_row_exponent(float mx, int top = 14) {
  if (!(mx > 0.f && mx <= 3.402823466e38f)) return 0;
  return min(max(int(__float_as_uint(mx) >> 23) - 127 - top, -125), 125);
}

// 2^k for a k in [-126, 127].
__device__ __forceinline__ float pow2(int k) { return __uint_as_float(uint32_t(127 + k) << 23); }

// The eight bf16 values in `x` times `down` (a power of two), rounded to fp16.
__device__ __forceinline__ uint4 bf16x8_to_fp16(uint4 x, float down) {
  auto lo = [](uint32_t v) { return __uint_as_float(v << 16); };
  auto hi = [](uint32_t v) { return __uint_as_float(v & 0xffff0000u); };
  return make_uint4(pack2<__half>(lo(x.x) * down, hi(x.x) * down),
                    pack2<__half>(lo(x.y) * down, hi(x.y) * down),
                    pack2<__half>(lo(x.z) * down, hi(x.z) * down),
                    pack2<__half>(lo(x.w) * down, hi(x.w) * down));
}

// 2^x on the special-function unit (one MUFU.EX2); exp2(-inf) = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fa::cuda::ptx
