// Translation of the public structs into internal ones, with every check the C API documents.
#pragma once

#include "core/kernel_config.hpp"
#include "core/problem.hpp"
#include "flashattn.h"

namespace fa {

// Checks `config` and fills `out` (packed strides resolved, scale defaulted). On failure returns the
// status, sets the detail message naming the offending field and value, and leaves `out` untouched.
fa_status to_problem(fa_config const* config, Problem* out);

// Checks a caller's fa_run_args' struct_size as every public struct's is (not smaller than the
// struct, and zero past the fields this version knows).
fa_status check_run_args_size(fa_run_args const* args);

// Elements each tensor spans from its base pointer (largest offset + 1); lse is float32; then
// the entries of each run-time array the problem uses (0 for those it does not).
struct Extents {
  int64_t q, k, v, o, lse;
  int64_t cu_seqlens, cache_seqlens, block_table, alibi_slopes, sinks;
  int64_t descales;  // entries of each of q_descale, k_descale, v_descale (1 per tensor)
};
// The one place the extents are computed, with checked arithmetic: fails (INVALID_ARGUMENT,
// naming the tensor or array) when one exceeds kMaxElements (2^60), so every byte count and
// index derived from them later fits int64. to_problem runs it on every config.
fa_status checked_extents(Problem const& p, Extents* out);
// checked_extents for a `p` that has passed to_problem.
Extents extents(Problem const& p);

// A checked fa_merge_config: strides resolved, o's extent (elements) computed.
struct MergeShape {
  DType dtype;
  int64_t batch, seqlen, heads, head_dim;
  TensorStrides o;
  int64_t o_extent;
  int64_t lse_count;  // batch x heads x seqlen
};
fa_status to_merge_shape(fa_merge_config const* config, MergeShape* out);

// Reads a caller's fa_kernel_config (struct_size checked; the config itself is not validated).
fa_status to_kernel_config(fa_kernel_config const* in, KernelConfig* out);

// Writes `in` into a caller-initialised fa_kernel_config. A struct from 0.2 (struct_size below
// the current sizeof) holds mma.sync kernels only; an sm90 kernel gives BAD_STRUCT_SIZE.
fa_status from_kernel_config(KernelConfig const& in, fa_kernel_config* out);

// Whether a caller's fa_kernel_config, of at least 0.2's size, can hold a kernel of `family`.
bool kernel_config_holds(fa_kernel_config const& out, int32_t family);

}  // namespace fa
