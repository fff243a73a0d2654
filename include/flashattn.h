/*
 * libflashattn: FlashAttention forward for NVIDIA GPUs, as a plain C library.
 *
 * This header is the manual. It compiles as C99 and as C++, and needs no CUDA header.
 * include/flashattn.hpp adds C++17 ownership and exceptions over it (since 0.3.0).
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* int32_t, int64_t */

#ifdef __cplusplus
extern "C" {
#endif

/* ====================================================================================================
 * Introduction
 * ====================================================================================================
 *
 * libflashattn computes the attention forward pass
 *
 *     O[b, i, h, :] = sum_j softmax_j(scale * <Q[b, i, h, :], K[b, j, g(h), :]>) * V[b, j, g(h), :]
 *
 * for query rows i < seqlen_q and key rows j < seqlen_k, with g(h) = h / (heads_q / heads_kv) (GQA/MQA
 * share one K/V head between heads_q / heads_kv query heads; no copies are made), without ever writing
 * the seqlen_q x seqlen_k score matrix to memory (FlashAttention-2).
 *
 * Tensors are four-dimensional (batch, seq, heads, head_dim). The last dimension is contiguous; the other
 * three have any strides, given in elements (not bytes), so strided views of a packed QKV tensor need no
 * copy. The optional LSE output holds, per (batch, query head, query row), the natural-log
 * log-sum-exp of the scaled scores, as float32, laid out contiguously as [batch, heads_q, seqlen_q].
 *
 * Where the work runs is chosen by a context (fa_context_t): one CUDA device, or the CPU. A CPU context
 * runs the same fa_forward() on host buffers (fp16, bf16, fp32 and, since 0.3.0, FP8 e4m3 inputs,
 * of which GPU contexts run e4m3 K/V caches), with fp32 accumulation: it is the
 * reference the GPU kernels are tested against, and it lets programs run where there is no GPU.
 *
 * Two ways to run:
 *   - fa_forward(): one call per attention. The context remembers which kernel it chose for each problem
 *     shape, so repeated calls cost one lookup.
 *   - plans: fa_plan_create() validates a problem once and binds it to one kernel; fa_plan_run() then
 *     launches it with nothing but the tensor pointers. Running a plan on a GPU allocates nothing and
 *     never synchronises the host, so it can be captured in a CUDA graph.
 *
 * The GPU kernels come from a registry: every kernel compiled into the library is described by a
 * fa_kernel_config: its family (the FA2-style mma.sync kernel for sm_80 and newer, or the Hopper
 * kernel for sm_90a; fa_kernel_family) and that family's tuning knobs. The registry can be listed,
 * kernels named and parsed, configs validated, and one kernel pinned for a plan.
 *
 * Errors: every function that can fail returns a fa_status. On failure, the calling thread's detail
 * message (fa_last_error_detail()) names the offending value, and no output has been written.
 * The library never exits, aborts, prints, or lets a C++ exception escape.
 * FA_STATUS_OUT_OF_MEMORY (a failed host allocation) may come from the functions that allocate
 * host memory: those whose lists name it, and the registry queries, the kernel-name functions,
 * fa_context_set_kernel() and the tuning functions. The *_init functions, fa_config_validate(),
 * fa_config_extents(), fa_context_device(), fa_merge_states() and the plan queries allocate
 * nothing and never return it (since 0.3.0).
 *
 * Versioning: the soname is libflashattn.so.<MAJOR>. Within one MAJOR version, functions, fa_status
 * values and the leading fields of public structs are never changed or removed; structs only grow at
 * their end, and each carries its own size so an older caller keeps working.
 */

/* ---- Visibility ----------------------------------------------------------------------------------- */
#if defined(_WIN32)
#  if defined(FLASHATTN_BUILDING)
#    define FA_API __declspec(dllexport)
#  else
#    define FA_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && (__GNUC__ >= 4)
#  define FA_API __attribute__((visibility("default")))
#else
#  define FA_API
#endif

/* ====================================================================================================
 * Version
 * ==================================================================================================== */
#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 3
#define FA_VERSION_PATCH 0
/*! FA_VERSION_NUMBER: MAJOR * 10000 + MINOR * 100 + PATCH, so 0.3.0 is 300. */
#define FA_VERSION_NUMBER (FA_VERSION_MAJOR * 10000 + FA_VERSION_MINOR * 100 + FA_VERSION_PATCH)
#define FA_VERSION_STRING "0.3.0"

/*! fa_version_number() :
 *  @return the FA_VERSION_NUMBER the loaded library was built with. Compare it with the header's
 *          FA_VERSION_NUMBER to detect a header/library mismatch.
 *  Thread-safe. Since 0.1.0. */
FA_API unsigned fa_version_number(void);

/*! fa_version_string() :
 *  @return the library's version as a static string such as "0.3.0"; never NULL, never freed.
 *  Thread-safe. Since 0.1.0. */
FA_API const char* fa_version_string(void);

/* ====================================================================================================
 * Status codes
 * ====================================================================================================
 * Values are pinned: a value is never renumbered or reused. New codes are appended. */
typedef enum fa_status {
  FA_STATUS_SUCCESS = 0,
  /*! A pointer is NULL, a size is zero or negative, a stride is negative, heads_q is not a multiple of
   *  heads_kv, an enum value is unknown, or a buffer is too small. */
  FA_STATUS_INVALID_ARGUMENT = 1,
  /*! A struct's struct_size field is smaller than the smallest size this library accepts (it was not
   *  filled by its *_init() function), or larger than the struct this library knows with a byte
   *  past the known fields that is not 0 (a newer caller asking for a field this library lacks). */
  FA_STATUS_BAD_STRUCT_SIZE = 2,
  /*! The problem is valid, but no kernel in this library can run it (a head_dim, dtype, or shape the
   *  kernels do not cover yet, or that the build left out). Nothing was computed. */
  FA_STATUS_UNSUPPORTED = 3,
  /*! A fa_kernel_config breaks one of the kernel template's rules. */
  FA_STATUS_INVALID_KERNEL_CONFIG = 4,
  /*! A valid fa_kernel_config was not compiled into this library, or cannot run the given problem. */
  FA_STATUS_KERNEL_NOT_AVAILABLE = 5,
  /*! A kernel name could not be parsed. */
  FA_STATUS_PARSE_ERROR = 6,
  /*! No CUDA device with that ordinal, no usable CUDA driver, or a library built without CUDA
   *  (FA_CUDA=OFF; since 0.3.0). */
  FA_STATUS_NO_DEVICE = 7,
  /*! The device's compute capability is older than sm_80, or none of the library's compiled
   *  architectures runs on it. */
  FA_STATUS_ARCH_MISMATCH = 8,
  /*! A CUDA runtime call failed (the detail message gives CUDA's error name). */
  FA_STATUS_CUDA_ERROR = 9,
  /*! A host allocation failed. */
  FA_STATUS_OUT_OF_MEMORY = 10,
  /*! The workspace given to fa_plan_run() is smaller than fa_plan_workspace_size(). */
  FA_STATUS_WORKSPACE_TOO_SMALL = 11,
  /*! A handle was used with the wrong kind of context (for example a CPU plan given a CUDA stream). */
  FA_STATUS_WRONG_CONTEXT = 12,
  /*! An internal invariant failed; please report it. */
  FA_STATUS_INTERNAL_ERROR = 13,
  /*! A file could not be opened, read or written (the detail message gives the path and reason).
   *  Since 0.2.0. */
  FA_STATUS_IO_ERROR = 14,
  /*! A warning, not a failure: fa_context_load_tuning() loaded the file but skipped entries that no
   *  longer match this library or device (the detail message says how many and why). Since 0.2.0. */
  FA_STATUS_TUNING_ENTRIES_IGNORED = 15
} fa_status;

/*! fa_status_string() :
 *  @return a static, human-readable name for `status` ("FA_STATUS_INVALID_ARGUMENT: ..."), or
 *          "FA_STATUS_UNKNOWN" for a value this version does not know. Never NULL.
 *  Thread-safe. Since 0.1.0. */
FA_API const char* fa_status_string(fa_status status);

/*! fa_last_error_detail() :
 *  @return the detail message of the last failing call made by this thread (for example
 *          "fa_config.heads_q = 12 is not a multiple of heads_kv = 5"). Every function that returns
 *          a fa_status clears it first, so it is "" after one that succeeded (except where a
 *          function documents a message on success, as fa_kernel_config_autotune_filter()).
 *          The string lives in thread-local storage: it stays valid until this thread's next call
 *          into the library. Never NULL.
 *  Thread-safe (each thread has its own message). Since 0.1.0. */
FA_API const char* fa_last_error_detail(void);

/* ====================================================================================================
 * Problem description
 * ==================================================================================================== */

/*! Element types. The values are pinned. */
typedef enum fa_dtype {
  FA_DTYPE_FP16 = 1, /*!< IEEE binary16. GPU and CPU. */
  FA_DTYPE_BF16 = 2, /*!< bfloat16. GPU and CPU. */
  FA_DTYPE_FP32 = 3, /*!< IEEE binary32. CPU contexts only. */
  /*! FP8 E4M3 ("e4m3fn", as in OCP FP8 and CUDA's __nv_fp8_e4m3): 1 sign, 4 exponent (bias 7)
   *  and 3 mantissa bits, one byte per element; no infinities, NaN is 0x7f and 0xff, the
   *  largest magnitude 448, subnormals kept. An input type only: q, k and v may be e4m3
   *  (see fa_config.kv_dtype), o never is (fa_config.out_dtype). The stored values are
   *  multiplied by the descale factors of fa_run_args (q_descale, k_descale, v_descale).
   *  CPU contexts run it. GPU contexts run e4m3 K/V caches with 16-bit queries (kv_dtype
   *  FA_DTYPE_E4M3, dtype FA_DTYPE_FP16 or FA_DTYPE_BF16) on the mma.sync family's decode
   *  tiles (one kernel per head dim) and, on sm_90, on one sm90 kernel per head dim at d 64,
   *  128 and (since 0.4.0) 256 (chunked prefill and other problems that are not
   *  decode-like; pages whose TMA boxes would not be a multiple of 8 rows go to the mma.sync
   *  tiles),
   *  every layout, mask, bias and split count, when k's and
   *  v's strides are multiples of 16 elements (16-byte rows) and the tile's shared memory fits
   *  the device (d 128-256: 104-128 KiB, above sm_86/89/120's 99 KiB); otherwise
   *  FA_STATUS_UNSUPPORTED (a plan pinned to a kernel: FA_STATUS_KERNEL_NOT_AVAILABLE naming
   *  the stride or the memory). e4m3 queries (with an e4m3 cache: dtype and kv_dtype
   *  FA_DTYPE_E4M3, o bf16 or fp16) run on sm_90 on the sm90 family's FP8 kernels (wgmma's e4m3
   *  products) at head dims up to 128 and from 129 to 256 (each runs on the d 128 or d 256 kernel,
   *  the columns past it zero-filled), every layout, mask, bias and split count, when q's, k's
   *  and v's strides are multiples of 16 elements and a paged cache's pages are read in boxes of
   *  a multiple of 8 rows (gcd(B_c, page_size): page sizes of 8 or more that are multiples of 8;
   *  the FP8 kernels take 128 keys per block at d 128 and 64 at d 256); elsewhere
   *  FA_STATUS_UNSUPPORTED, naming the value. A fa_kernel_config dtype of the sm90 family's FP8
   *  kernels only (since 0.3.0); not a fa_merge_config dtype. Since 0.3.0. */
  FA_DTYPE_E4M3 = 4
} fa_dtype;

/*! fa_descale : how many descale factors fa_run_args' q_descale, k_descale and v_descale
 *  hold. Values pinned. Since 0.3.0. */
typedef enum fa_descale {
  FA_DESCALE_PER_TENSOR = 0,   /*!< One float32 per tensor. */
  /*! batch x heads_kv float32 (row-major) per tensor, as FlashAttention 3's q/k/v_descale of
   *  shape (batch, heads_kv): entry [b][g] scales sequence b's K/V head g and every query
   *  head that reads it (query head h uses g = h / (heads_q / heads_kv)). In
   *  FA_LAYOUT_PAGED_KV, b is the sequence, not the page. */
  FA_DESCALE_PER_HEAD_KV = 1
} fa_descale;

/*! fa_config : one attention problem.
 *
 *  Fill it with fa_config_init() first, then set the fields. Fields are only ever appended; the library
 *  reads struct_size to know which fields the caller's version has.
 *
 *  Element types: q has dtype, k and v kv_dtype (dtype unless set), o dtype, or out_dtype when
 *  dtype is FA_DTYPE_E4M3 (since 0.3.0; see the fields). Sizes in bytes follow each tensor's type.
 *
 *  Shapes: q is [batch, seqlen_q, heads_q, head_dim]; k is [batch, seqlen_k, heads_kv, head_dim];
 *  v is [batch, seqlen_k, heads_kv, head_dim_v]; o is [batch, seqlen_q, heads_q, head_dim_v]; the
 *  optional lse is float32 [batch, heads_q, seqlen_q], contiguous. head_dim_v is head_dim unless
 *  set (see the field); the layouts below write v's and o's last dimension as head_dim.
 *
 *  Strides are in elements. When the three strides of one tensor are all 0 (fa_config_init()'s default),
 *  that tensor is taken as packed: batch stride seqlen*heads*dim, seq stride heads*dim, head
 *  stride dim, dim being the tensor's last dimension (head_dim for q and k, head_dim_v for v and
 *  o), so a tensor broadcast along all three dimensions cannot be expressed. Otherwise
 *  each stride must be >= 0, and o's strides must not make two elements of o share memory. Inputs may
 *  overlap each other (a stride of 0 broadcasts); o and lse must not overlap q, k, v, the run-time
 *  arrays of fa_run_args or each other. These checks compare address ranges [base, base + extent),
 *  so they are conservative: two interleaved tensors that share no element are refused too, and a
 *  stride order the check cannot prove free of shared elements is refused.
 *  Every pointer is aligned to its elements (1, 2 or 4 bytes; the run-time arrays and lse 4), else
 *  FA_STATUS_INVALID_ARGUMENT; GPUs ask for 16 bytes (see fa_forward()).
 *  Values: a non-finite value in a K or V row that a row's mask hides may still reach that row's
 *  output when the row shares a computed key block with rows that see it (0 * inf is NaN), as in
 *  other FlashAttention implementations; keep masked cache rows finite. A NaN score that a row
 *  sees (from q, a visible K row or a descale) makes that row's O and LSE NaN wherever it falls,
 *  split or not (since 0.3.0: on CPU contexts one in a key block before the row's first finite
 *  score read as no key; on GPUs the row's LSE read -inf, and a split holding only NaN scores
 *  beside splits with no key gave O = 0). */
typedef struct fa_config {
  size_t struct_size;   /*!< sizeof(fa_config) of the caller's header; set by fa_config_init(). */
  int32_t dtype;        /*!< fa_dtype of q (and of k, v and o unless kv_dtype / out_dtype say
                             otherwise). Default FA_DTYPE_BF16. */
  int32_t causal;       /*!< 0 or 1. 1 masks key j for query i when j > i + seqlen_k - seqlen_q
                             (bottom-right aligned, as FlashAttention 2.1+). A query row with no visible
                             key gets output 0 and LSE -inf. Default 0. */
  int64_t batch;        /*!< >= 1. */
  int64_t seqlen_q;     /*!< >= 1. */
  int64_t seqlen_k;     /*!< >= 1. */
  int64_t heads_q;      /*!< >= 1, a multiple of heads_kv. */
  int64_t heads_kv;     /*!< >= 1. */
  int64_t head_dim;     /*!< >= 1. GPU kernels run every multiple of 8 up to the largest head
                             dim in the registry (fa_kernel_get(): 64, 128, 192 and 256 by default),
                             one between them on the registry's next head dim up. */
  float softmax_scale;  /*!< Multiplies the scores before the softmax. 0 (the default) means
                             1/sqrt(head_dim). Must be finite; may be negative (since 0.3.0 on
                             GPUs too). */
  int32_t reserved0;    /*!< Must be 0 (keeps the int64 strides 8-byte aligned on every ABI). */
  int64_t q_batch_stride, q_seq_stride, q_head_stride; /*!< Strides of q, in elements. */
  int64_t k_batch_stride, k_seq_stride, k_head_stride; /*!< Strides of k, in elements. */
  int64_t v_batch_stride, v_seq_stride, v_head_stride; /*!< Strides of v, in elements. */
  int64_t o_batch_stride, o_seq_stride, o_head_stride; /*!< Strides of o, in elements. */

  /* ---- Since 0.3.0. A caller built against 0.2 passes the smaller struct_size; the fields it
   *      lacks read as 0, which keeps 0.2's behaviour. ---- */
  int32_t layout;       /*!< fa_layout: how q, k and v are batched (see fa_layout). Default
                             FA_LAYOUT_DENSE. */
  int32_t window;       /*!< 0 or 1. 1 applies the sliding window (window_left, window_right): key
                             j is visible to query i iff
                             i + Sk - Sq - window_left <= j <= i + Sk - Sq + window_right
                             (Sk, Sq: the sequence's key and query lengths), a negative bound
                             meaning unbounded on that side. Combines with causal, which caps
                             the right bound at 0. Key blocks the window hides are skipped. With
                             window = 0, window_left and window_right must be 0
                             (FA_STATUS_INVALID_ARGUMENT otherwise). */
  int64_t window_left;  /*!< See window. */
  int64_t window_right; /*!< See window. */
  float softcap;        /*!< 0 (off) or > 0: each scaled score s becomes softcap * tanh(s / softcap),
                             before the ALiBi bias (Gemma 2, Grok). Finite. */
  int32_t alibi;        /*!< fa_alibi: subtract slope * |i + Sk - Sq - j| from each score, with
                             float32 slopes passed at run time (fa_run_args.alibi_slopes). */
  int32_t sinks;        /*!< 0 or 1. 1 adds one float32 logit per query head
                             (fa_run_args.sinks, natural-log units, not scaled) to each row's
                             softmax denominator, with no value row: the row's weights sum to
                             less than 1, and its LSE includes the sink. A row with no visible
                             key then gets O = 0 and LSE = the sink's logit. A sink of -inf adds
                             nothing; one of +inf or NaN makes its rows' O and LSE
                             NaN (on GPUs since 0.3.0: they read O = 0, LSE = -inf). */
  int32_t num_splits;   /*!< GPU only: split each sequence's keys across this many thread blocks
                             whose partial results a second kernel merges (split-KV; pays for
                             decode, where few query rows meet many keys). 0 (default) lets the
                             library choose from batch, heads, lengths and the SM count; 1 never
                             splits. Splitting needs a workspace (fa_plan_workspace_size()). CPU
                             contexts ignore it. At most 256. An automatic split that a run
                             brings no workspace for runs unsplit (so plans of 0.2 callers,
                             who pass none, work as before); a forced one fails with
                             FA_STATUS_WORKSPACE_TOO_SMALL. A forced count whose grid
                             (query blocks x heads x batch x num_splits thread blocks)
                             would pass 2^31 - 1 is refused with FA_STATUS_UNSUPPORTED
                             and a message naming it (before 0.4.0 it was launched, its
                             grid wrapped). */
  int64_t total_q;      /*!< FA_LAYOUT_VARLEN: rows of q and o (>= 1); else must be 0. */
  int64_t total_k;      /*!< FA_LAYOUT_VARLEN: rows of k and v (>= 1); else must be 0. */
  int64_t num_pages;    /*!< FA_LAYOUT_PAGED_KV: pages in the k and v caches (>= 1); else 0. */
  int64_t page_size;    /*!< FA_LAYOUT_PAGED_KV: rows per page (any value >= 1); else 0. */
  int64_t max_pages_per_seq; /*!< FA_LAYOUT_PAGED_KV: columns of block_table (>= 1,
                             max_pages_per_seq * page_size >= seqlen_k, and
                             batch * max_pages_per_seq <= 2^60, since 0.3.0); else 0. */

  /* ---- Since 0.3.0, appended after max_pages_per_seq. A caller whose struct_size ends before
   *      it (built against 0.2, or against a 0.3 header without it) reads it as 0. ---- */
  int64_t head_dim_v;   /*!< The value head dim: v is [..., heads_kv, head_dim_v] and o
                             [..., heads_q, head_dim_v], while q and k keep head_dim (DeepSeek-V2/V3
                             prefill: head_dim 192, head_dim_v 128). 0 (the default) means
                             head_dim; otherwise >= 1 (a negative value is
                             FA_STATUS_INVALID_ARGUMENT). The default softmax_scale stays
                             1/sqrt(head_dim). CPU contexts run any head_dim_v >= 1, smaller or
                             larger than head_dim; GPU kernels run a head_dim_v that is a
                             multiple of 8 up to head_dim, and refuse any other value
                             with FA_STATUS_UNSUPPORTED (a pinned kernel with
                             FA_STATUS_KERNEL_NOT_AVAILABLE) and a message naming both dims.
                             Columns of o past head_dim_v are never written. */

  /* ---- Since 0.3.0, appended after head_dim_v (FP8). A caller whose struct_size ends before
   *      them (built against 0.2, or against a 0.3 header without them) reads them as 0. ---- */
  int32_t kv_dtype;     /*!< fa_dtype of k and v when it differs from dtype's. 0 (the default)
                             means dtype. Allowed: kv_dtype = dtype, and FA_DTYPE_E4M3 with
                             dtype FA_DTYPE_FP16 or FA_DTYPE_BF16 (queries of 16 bits against
                             an e4m3 cache; o then has dtype's type). FA_DTYPE_E4M3 queries
                             need an e4m3 cache, FA_DTYPE_FP32 queries an fp32 one: any other
                             pair is FA_STATUS_INVALID_ARGUMENT naming both values. */
  int32_t out_dtype;    /*!< fa_dtype of o when dtype is FA_DTYPE_E4M3: FA_DTYPE_BF16 or
                             FA_DTYPE_FP16; 0 (the default) means FA_DTYPE_BF16. With any
                             other dtype o has dtype's type and out_dtype must be 0
                             (FA_STATUS_INVALID_ARGUMENT naming the value otherwise). */
  int32_t descale;      /*!< fa_descale: the granularity of fa_run_args' q_descale, k_descale
                             and v_descale. Default FA_DESCALE_PER_TENSOR. Must be 0 unless
                             q or k and v are FA_DTYPE_E4M3. */
  int32_t reserved1;    /*!< Must be 0 (keeps sizeof(fa_config) a multiple of 8 with no tail
                             padding). */
} fa_config;

/*! fa_layout : how a batch of sequences is laid out. Values pinned. Since 0.3.0. */
typedef enum fa_layout {
  /*! q and o [batch, seqlen_q, heads_q, head_dim]; k and v [batch, seqlen_k, heads_kv, head_dim];
   *  every sequence has seqlen_q queries and seqlen_k keys. */
  FA_LAYOUT_DENSE = 0,
  /*! Variable-length sequences packed along one token dimension: q and o [total_q, heads_q,
   *  head_dim], k and v [total_k, heads_kv, head_dim] (the batch strides must be 0: the seq and
   *  head strides apply). Sequence b owns query rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1
   *  and key rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1 (fa_run_args; int32, batch + 1
   *  entries, starting at 0, non-decreasing, ending at total_q / total_k). seqlen_q and seqlen_k
   *  are upper bounds of the lengths (max_seqlen_q/k; bounds above total_q / total_k act as
   *  those). Zero-length sequences are allowed. Masks
   *  are aligned per sequence. lse is [heads_q, total_q]. */
  FA_LAYOUT_VARLEN = 1,
  /*! A key/value cache: q and o dense [batch, seqlen_q, heads_q, head_dim]; k and v
   *  [batch, seqlen_k, heads_kv, head_dim] where seqlen_k is the cache's capacity, of which
   *  sequence b sees the first cache_seqlens[b] rows (fa_run_args; int32, batch entries, each in
   *  [0, seqlen_k]). Masks are aligned to cache_seqlens[b]. */
  FA_LAYOUT_KV_CACHE = 2,
  /*! A paged key/value cache: q and o dense; k and v are pages [num_pages, page_size, heads_kv,
   *  head_dim] (batch stride = page stride). Row j of sequence b lives in page
   *  block_table[b * max_pages_per_seq + j / page_size] at row j % page_size (fa_run_args;
   *  int32 page indices in [0, num_pages)). Sequence b sees cache_seqlens[b] <= seqlen_k rows.
   *  Any page size >= 1. */
  FA_LAYOUT_PAGED_KV = 3
} fa_layout;

/*! fa_alibi : ALiBi slopes. Values pinned. Since 0.3.0. */
typedef enum fa_alibi {
  FA_ALIBI_NONE = 0,      /*!< No bias. */
  FA_ALIBI_PER_HEAD = 1,  /*!< alibi_slopes holds heads_q float32 slopes. */
  FA_ALIBI_PER_BATCH = 2  /*!< alibi_slopes holds batch x heads_q float32 slopes (row-major). */
} fa_alibi;

/*! fa_run_args : the arguments of a run that are not tensors of the problem's shape: index
 *  tensors, per-head parameters and the workspace. They are read when the run starts (on a GPU,
 *  by the kernels, so their contents may change between runs, and one captured CUDA graph
 *  replays every decode step with fresh lengths and page tables). Pointers live where the
 *  tensors do (device memory on a GPU context, host memory on the CPU). Fill with
 *  fa_run_args_init() first. Since 0.3.0. */
typedef struct fa_run_args {
  size_t struct_size;            /*!< sizeof(fa_run_args); set by fa_run_args_init(). */
  const int32_t* cu_seqlens_q;   /*!< FA_LAYOUT_VARLEN: batch + 1 query offsets. */
  const int32_t* cu_seqlens_k;   /*!< FA_LAYOUT_VARLEN: batch + 1 key offsets. */
  const int32_t* cache_seqlens;  /*!< FA_LAYOUT_KV_CACHE, FA_LAYOUT_PAGED_KV: batch lengths. */
  const int32_t* block_table;    /*!< FA_LAYOUT_PAGED_KV: batch x max_pages_per_seq, row-major. */
  const float* alibi_slopes;     /*!< fa_config.alibi != 0: the slopes (see fa_alibi). */
  const float* sinks;            /*!< fa_config.sinks == 1: heads_q logits. */
  void* workspace;               /*!< Device scratch memory for split-KV (or, since 0.3.0, an FP8
                                      prefill's transposed V: fa_plan_workspace_size()), or NULL;
                                      16-byte aligned (else FA_STATUS_UNSUPPORTED when a split
                                      uses it; an FP8 prefill then transposes V in the kernel). */
  size_t workspace_size;         /*!< Its size in bytes. */

  /* ---- Since 0.3.0, appended after workspace_size (FP8). A caller whose struct_size ends
   *      before them (a 0.3 header without them) reads them as NULL. ----
   *  Descale factors of FA_DTYPE_E4M3 tensors: float32, one per tensor or batch x heads_kv
   *  (fa_config.descale, fa_descale). NULL means 1.0. A descale given for a tensor that is not
   *  e4m3 (q_descale with dtype not FA_DTYPE_E4M3, k_descale or v_descale with a k/v type not
   *  FA_DTYPE_E4M3) is FA_STATUS_INVALID_ARGUMENT. With q', k', v' the stored e4m3 values:
   *      score(i, j) = softmax_scale * q_descale * k_descale * (q'_i . k'_j)
   *  then soft-capping, ALiBi and the masks as for any dtype, P = softmax(scores), and
   *      o_i = v_descale * (P v')_i;
   *  the LSE is that of the scores above (it includes q_descale and k_descale, not v_descale).
   *  Rounding: CPU contexts decode every e4m3 value exactly into float32, form
   *  softmax_scale * q_descale * k_descale in float32, accumulate dot products and P V in
   *  float32, and round o once to out_dtype. GPU kernels (e4m3 caches, 16-bit queries) decode every
   *  e4m3 value of k and v exactly into fp16 (with bf16 queries they also hold each query row as
   *  fp16 times the power of two 2^-k that puts its largest magnitude in [2^14, 2^15), exact for
   *  every value down to 2^-28 of that magnitude, and multiply that row's scores by 2^k); since
   *  0.4.0 the sm90 kernels with bf16 queries at head_dim 128 and 256, where no score transform,
   *  sinks, split-KV or smaller head dim applies (chunked prefill on Hopper), instead multiply k's
   *  e4m3 values as stored on the tensor cores' FP8 form, each query row held as two e4m3 rows
   *  hi + lo times the power of two 2^-k that puts its largest magnitude in [128, 256) (exact for
   *  every value down to 2^-9 of that magnitude, a smaller one off by at most 2^-17 of it), the
   *  sums of those FP8 products keeping fewer mantissa bits than float32 as with e4m3 queries
   *  (below), and decode v alone into fp16. They multiply
   *  the float32 dot products by k_descale (then by softmax_scale, as for any dtype; the sm90
   *  kernels fold a positive k_descale into the exponent's scale instead, softmax_scale * log2(e) *
   *  k_descale in float32, where no score transform applies: soft-capping, ALiBi or a negative
   *  softmax_scale), round P to fp16 for P V, and multiply the float32 o by v_descale before
   *  rounding it once to out_dtype. An e4m3 NaN in a cache reads as NaN (propagating, as on the
   *  CPU) in kernels compiled for sm_89 or newer (the default build's sm_90a code on Hopper GPUs),
   *  and as +-480 in code compiled for sm_80-87 (the default build's sm_80 code, which sm_86 and
   *  sm_89 GPUs run); rows past a sequence's length never affect o, whatever they hold. A bf16
   *  query row holding an infinity is held unscaled, so its finite values past fp16's 65504 become
   *  infinities too (in the kernels that multiply k as stored, the row's scores are NaN).
   *  GPU kernels with e4m3 queries (sm90 FP8 kernels) multiply e4m3 q' and k' on the tensor
   *  cores, whose sums of FP8 products on Hopper keep fewer mantissa bits than float32 (scores,
   *  and so the LSE, carry an error near 2^-12 of the sum of |q'_i k'_i| times the scale), fold
   *  softmax_scale * log2(e) * q_descale * k_descale (float32 products) into the exponent's scale
   *  where it is positive and no score transform applies (else they multiply each score by
   *  q_descale * k_descale), round each unnormalised
   *  probability to e4m3 for P v' after scaling it by 2^7 (a row's probabilities are kept within
   *  [0, 2] of its running maximum, so the rounded values lie in [0, 256], a relative error of at
   *  most 2^-4 for every probability down to 2^-13 of the maximum; the row sums are taken before
   *  the rounding, in float32), and multiply the float32 o by v_descale * 2^-7 before dividing by
   *  the sum and rounding once to out_dtype. The values are
   *  not checked: a non-finite or negative descale gives what
   *  the formulas give. Each is 4-byte aligned and must not overlap o or lse. */
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
} fa_run_args;

/*! fa_run_args_init() :
 *  Sets struct_size = sizeof(fa_run_args) and every other field to 0 / NULL.
 *  @return FA_STATUS_INVALID_ARGUMENT if args is NULL, else FA_STATUS_SUCCESS.
 *  Thread-safe. Since 0.3.0. */
FA_API fa_status fa_run_args_init(fa_run_args* args);

/*! fa_config_init() :
 *  Sets config->struct_size = sizeof(fa_config), dtype = FA_DTYPE_BF16, every size to 1, and everything
 *  else to 0 (non-causal, default scale, packed strides).
 *  @return FA_STATUS_INVALID_ARGUMENT if config is NULL, else FA_STATUS_SUCCESS.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_config_init(fa_config* config);

/*! fa_config_validate() :
 *  Checks everything about `config` that does not depend on where it runs: struct_size, the dtype
 *  and flag values, the pair of element types (kv_dtype, out_dtype, descale), sizes >= 1
 *  (head_dim_v >= 0, 0 meaning head_dim), heads_q a multiple of heads_kv, a finite scale,
 *  strides >= 0, no
 *  overlap within o, and bounded extents: each tensor spans fewer than 2^60 elements, and the LSE
 *  and each run-time array the config uses (fa_run_args: batch + 1 offsets, batch lengths,
 *  batch * max_pages_per_seq page indices, heads_q or batch * heads_q slopes, heads_q sinks,
 *  1 or batch * heads_kv descales), and for FA_LAYOUT_VARLEN batch * min(seqlen_q, total_q) *
 *  heads_q (the (sequence, query row, head) work list; since 0.3.0),
 *  holds at most 2^60 entries, so every offset and byte count derived from them fits in int64.
 *  fa_forward() and fa_plan_create() make the same checks (and, on a GPU, those of the kernels).
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT or FA_STATUS_BAD_STRUCT_SIZE with the
 *          detail message naming the field and value.
 *  Thread-safe. Since 0.2.0. */
FA_API fa_status fa_config_validate(const fa_config* config);

/*! fa_config_extents() :
 *  The number of elements each tensor spans from its base pointer (its largest element offset
 *  plus one), so a caller can check that its buffers are large enough: q, k, v and o as laid out
 *  by `config`'s strides (v and o over head_dim_v columns; for FA_LAYOUT_VARLEN over total_q /
 *  total_k rows, for FA_LAYOUT_PAGED_KV k and v over num_pages pages), and lse (batch * heads_q *
 *  seqlen_q, or
 *  heads_q * total_q for varlen). Each output pointer may be NULL.
 *  @return as fa_config_validate(); the outputs are written only on success.
 *  Thread-safe. Since 0.2.0 (the layouts since 0.3.0). */
FA_API fa_status fa_config_extents(const fa_config* config, int64_t* q, int64_t* k, int64_t* v,
                                   int64_t* o, int64_t* lse);

/* ====================================================================================================
 * Contexts
 * ====================================================================================================
 * A context is where attention runs: one CUDA device, or the CPU. It owns its view of the kernel registry
 * (the kernels that run on its device), a cache of the kernel chosen per problem shape, and tuning
 * results. A context may be used from several threads at once: every function taking a context is
 * thread-safe with respect to that context, except fa_context_destroy(). */
typedef struct fa_context_s fa_context_t;
typedef struct fa_plan_s fa_plan_t;

/*! fa_stream_t : a CUDA stream. Pass a cudaStream_t cast to fa_stream_t; NULL is the legacy default
 *  stream. CPU contexts require NULL. */
typedef struct fa_stream_s* fa_stream_t;

/*! FA_DEVICE_CPU : the device ordinal that selects the CPU backend. */
#define FA_DEVICE_CPU (-1)

/*! fa_context_create() :
 *  Creates a context on CUDA device `device` (an ordinal as in cudaSetDevice) or, with FA_DEVICE_CPU, on
 *  the CPU. For a GPU it reads the device's properties and prepares every registered kernel that runs on
 *  it (raising the shared-memory limit of kernels that need more than 48 KiB, once per device per
 *  process). It does not change the calling thread's current device.
 *  @param out  receives the new context; the caller owns it and frees it with fa_context_destroy().
 *              Untouched on failure.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT if out is NULL or device < -1;
 *          FA_STATUS_NO_DEVICE if there is no such CUDA device or no driver, or for every device >= 0
 *          in a library built without CUDA (FA_CUDA=OFF, since 0.3.0; FA_DEVICE_CPU still works);
 *          FA_STATUS_ARCH_MISMATCH if
 *          the device is older than sm_80 or none of the compiled kernels runs on it;
 *          FA_STATUS_CUDA_ERROR; FA_STATUS_OUT_OF_MEMORY.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_context_create(int device, fa_context_t** out);

/*! fa_context_destroy() :
 *  Frees a context. Accepts NULL. Plans made from it must be destroyed first; no call on the context may
 *  be in flight in another thread.
 *  Not thread-safe for the context it frees; other contexts may be used and freed concurrently.
 *  Since 0.1.0. */
FA_API void fa_context_destroy(fa_context_t* ctx);

/*! fa_context_device() :
 *  @param device  receives the context's device ordinal, or FA_DEVICE_CPU.
 *  @return FA_STATUS_SUCCESS, or FA_STATUS_INVALID_ARGUMENT if an argument is NULL.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_context_device(const fa_context_t* ctx, int* device);

/* ====================================================================================================
 * One-shot forward
 * ==================================================================================================== */

/*! fa_forward() :
 *  Computes attention for `config` (see fa_config for shapes and strides).
 *  @param ctx     the context; its device decides where q, k, v, o and lse must live.
 *  @param config  the problem; read during the call only.
 *  @param q,k,v   inputs: device pointers on a GPU context, host pointers on a CPU context. On a GPU
 *                 each base pointer must be 16-byte aligned and every stride but the last a multiple of
 *                 8 elements (16 bytes), else FA_STATUS_UNSUPPORTED.
 *  @param o       output, same rules; written only on success.
 *  @param lse     optional float32 output [batch, heads_q, seqlen_q], contiguous; NULL to skip.
 *  @param stream  on a GPU context, the stream the kernel is launched on; the call returns without
 *                 waiting for the kernel (errors found while it runs surface in later CUDA calls). Must
 *                 be NULL on a CPU context, where the call computes synchronously on the calling thread
 *                 and up to hardware_concurrency() worker threads, each holding about 512 bytes
 *                 of scratch per element of head_dim and of head_dim_v (each rounded up to 16:
 *                 128 KiB at head_dim = head_dim_v = 128, 4 GiB at 2^22), allocated before any
 *                 output is written (else FA_STATUS_OUT_OF_MEMORY).
 *  The first call for a problem shape picks a kernel and caches the choice in the context (host work
 *  only); later calls reuse it. It allocates no device memory and does not synchronise the host.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT, FA_STATUS_BAD_STRUCT_SIZE (bad input, message
 *          names the value; also o overlapping q, k, v or lse, and a config that needs run-time
 *          arguments, which only fa_forward_ex() passes: varlen and KV-cache layouts, ALiBi,
 *          sinks); FA_STATUS_UNSUPPORTED (no kernel can run this problem);
 *          FA_STATUS_WORKSPACE_TOO_SMALL (num_splits > 1 forced on a GPU: the split needs the
 *          workspace that fa_forward_ex() passes); FA_STATUS_WRONG_CONTEXT (a stream given to a
 *          CPU context); FA_STATUS_CUDA_ERROR (the launch failed); FA_STATUS_OUT_OF_MEMORY (host).
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_forward(fa_context_t* ctx, const fa_config* config, const void* q, const void* k,
                            const void* v, void* o, float* lse, fa_stream_t stream);

/*! fa_forward_ex() :
 *  As fa_forward(), with the run's index tensors, per-head parameters and workspace in `args`
 *  (which may be NULL when the config needs none of them).
 *  Workspace: fa_forward() and fa_forward_ex() never allocate; the workspace is the caller's,
 *  passed in args->workspace. With fa_config.num_splits = 0 (automatic) they split the keys only
 *  when it holds what the split needs (query it with fa_plan_workspace_size() on a plan of the
 *  same config), and otherwise run unsplit; a forced num_splits > 1 without that workspace fails
 *  with FA_STATUS_WORKSPACE_TOO_SMALL. Likewise an FP8 prefill (see fa_plan_workspace_size())
 *  transposes V ahead of the run into a 16-byte aligned workspace that holds it, and otherwise
 *  runs a kernel that transposes V itself.
 *  @return as fa_forward(); FA_STATUS_INVALID_ARGUMENT also when a pointer the config needs
 *          (cu_seqlens_q/k, cache_seqlens, block_table, alibi_slopes, sinks) is NULL, when a
 *          q_descale, k_descale or v_descale is given for a tensor that is not FA_DTYPE_E4M3
 *          (since 0.3.0), and on a
 *          CPU context when an index tensor's contents are malformed (offsets that decrease or
 *          leave [0, total], lengths outside [0, seqlen], a page index outside
 *          [0, num_pages)): the message names the entry. GPU kernels cannot report such
 *          contents; they clamp every index into the buffers the config declares, so a
 *          malformed tensor gives wrong numbers but never an out-of-bounds access.
 *  Thread-safe. Since 0.3.0. */
FA_API fa_status fa_forward_ex(fa_context_t* ctx, const fa_config* config, const void* q,
                               const void* k, const void* v, void* o, float* lse,
                               const fa_run_args* args, fa_stream_t stream);

/* ====================================================================================================
 * Merging partial results
 * ====================================================================================================
 * Two attention results over disjoint key sets of the same queries (O_a, LSE_a) and (O_b, LSE_b)
 * combine into the result over the union:
 *     LSE = log(exp(LSE_a) + exp(LSE_b)),  O = exp(LSE_a - LSE) O_a + exp(LSE_b - LSE) O_b
 * (a side with LSE = -inf contributes nothing; both -inf give O = 0, LSE = -inf). This is how a
 * prefix cache, a cascade or a sequence split across GPUs is put back together. */

/*! fa_merge_config : the shape of a merge. O tensors are [batch, seqlen, heads, head_dim] with
 *  the given strides (shared by the three; all 0 = packed), LSE tensors float32
 *  [batch, heads, seqlen] contiguous (fa_forward()'s layouts; a varlen result is batch 1,
 *  seqlen total_q). Since 0.3.0. */
typedef struct fa_merge_config {
  size_t struct_size;  /*!< sizeof(fa_merge_config); set by fa_merge_config_init(). */
  int32_t dtype;       /*!< fa_dtype of the O tensors (FP32 on CPU contexts only). Default BF16. */
  int32_t reserved0;   /*!< Must be 0. */
  int64_t batch, seqlen, heads, head_dim;                /*!< >= 1 each. */
  int64_t o_batch_stride, o_seq_stride, o_head_stride;   /*!< Elements, >= 0. */
} fa_merge_config;

/*! fa_merge_config_init() :
 *  Sets struct_size, dtype = FA_DTYPE_BF16, every size to 1 and the strides to 0 (packed).
 *  @return FA_STATUS_INVALID_ARGUMENT if config is NULL, else FA_STATUS_SUCCESS.
 *  Thread-safe. Since 0.3.0. */
FA_API fa_status fa_merge_config_init(fa_merge_config* config);

/*! fa_merge_states() :
 *  Computes (o, lse) from (o_a, lse_a) and (o_b, lse_b) as described above, in float32.
 *  @param o, lse  outputs; o may be o_a or o_b and lse may be lse_a or lse_b (in place); other
 *                 overlaps are refused. Written only on success.
 *  @param stream  as fa_forward(): the GPU kernel is launched on it; NULL on a CPU context.
 *  An LSE of +inf or NaN on either side makes that row's o and lse NaN (on GPUs since 0.3.0:
 *  such a row's lse read -inf, and its o 0 for a NaN beside -inf). The call allocates no host
 *  memory.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL, sizes, strides, tensors of
 *          2^60 elements or more, overlap, and on every backend a pointer not aligned to its
 *          elements: 2 or 4 bytes for o_a, o_b and o, 4 for the LSEs);
 *          FA_STATUS_BAD_STRUCT_SIZE; FA_STATUS_UNSUPPORTED (FP32 on a GPU, or there pointers
 *          not 4-byte aligned, or more than 2^31 blocks of 8 (batch x seqlen x heads) rows);
 *          FA_STATUS_WRONG_CONTEXT; FA_STATUS_CUDA_ERROR.
 *  Thread-safe. Since 0.3.0. */
FA_API fa_status fa_merge_states(fa_context_t* ctx, const fa_merge_config* config,
                                 const void* o_a, const float* lse_a, const void* o_b,
                                 const float* lse_b, void* o, float* lse, fa_stream_t stream);

/* ====================================================================================================
 * Kernel registry
 * ====================================================================================================
 * Each GPU kernel compiled into the library is an instance of one of two kernel templates (the
 * families, fa_kernel_family: the FA2 mma.sync kernel and, since 0.3.0, the Hopper sm90 kernel),
 * tuned by the fields of fa_kernel_config. The registry is ordered by the fields in declaration
 * order (dtype first, false before true, the family near last). */

/*! fa_kernel_config : the tuning knobs of one GPU kernel.
 *  Boolean fields are 0 or 1. Fill with fa_kernel_config_init() first. */
typedef struct fa_kernel_config {
  size_t struct_size;                /*!< sizeof(fa_kernel_config); set by fa_kernel_config_init(). */
  int32_t dtype;                     /*!< FA_DTYPE_FP16 or FA_DTYPE_BF16; FA_DTYPE_E4M3 for the sm90
                                          family's FP8 kernels (e4m3 q, k and v; since 0.3.0). */
  int32_t d_head;                    /*!< Head dimension. */
  int32_t B_r;                       /*!< Query rows per thread block. */
  int32_t B_c;                       /*!< Key/value rows per inner-loop block. */
  int32_t n_warps;                   /*!< Warps per thread block. */
  int32_t async_copy;                /*!< Global->shared copies with cp.async (else through registers). */
  int32_t eager_load_blocks;         /*!< Prefetch the next K/V block while computing the current one. */
  int32_t swizzled;                  /*!< XOR-swizzle shared memory (else plain row-major). */
  int32_t Q_mma_load_K_tiles;        /*!< Q shared->register load granularity along d_head, in 8-column
                                          fragments; 0 loads the whole Q block once, before the loop. */
  int32_t K_mma_load_K_tiles;        /*!< The same for K along d_head; 0 = the whole block per iteration. */
  int32_t V_mma_load_K_tiles;        /*!< The same for V along B_c; 0 = the whole block per iteration. */
  int32_t mma_double_buffer_loads;   /*!< Load the next tile into registers before the current MMAs. */
  int32_t optimized_softmax;         /*!< Specialise the first key block (no rescaling of l and O). */

  /* ---- Since 0.3.0. A caller built against 0.2 passes the smaller struct_size (its sizeof was
   *      64: the fields above and 4 bytes of padding, which are never read): its configs read as
   *      family 0 with every field below 0, and a kernel of another family cannot be written
   *      into its struct (FA_STATUS_BAD_STRUCT_SIZE; fa_autotune() writes the fastest mma.sync
   *      kernel there instead). ---- */
  int32_t family;                    /*!< fa_kernel_family. */
  int32_t stages;                    /*!< FA_FAMILY_SM90: K/V tiles in flight in shared memory (2-4);
                                          0 in the mma.sync family. */
  int32_t overlap;                   /*!< FA_FAMILY_SM90: 1 runs each key block's softmax while the
                                          tensor cores compute the next block's QK^T and this
                                          block's predecessor's PV; 0 in the mma.sync family. */
  int32_t pingpong;                  /*!< FA_FAMILY_SM90 with n_warps = 12: 1 makes the two consumer
                                          warpgroups take turns issuing their wgmma, so one's
                                          softmax runs while the other's matrix products do;
                                          0 in the mma.sync family. */
  int32_t persistent;                /*!< FA_FAMILY_SM90: 1 launches one thread block per SM that
                                          walks the query tiles, loading the next tile's Q and K
                                          while the current one's output is written; 0 launches a
                                          block per tile (and is 0 in the mma.sync family). */
} fa_kernel_config;

/*! fa_kernel_family : the kernel families. Values pinned. Since 0.3.0.
 *  - FA_FAMILY_MMA_SYNC: the FA2 kernel (mma.sync, ldmatrix, cp.async) for sm_80 and newer, with
 *    every field above as a knob; `stages` is 0.
 *  - FA_FAMILY_SM90: the Hopper kernel (sm_90a: TMA loads into 128-byte-swizzled shared memory
 *    through an mbarrier pipeline of `stages` K/V tiles, a producer warp, wgmma in
 *    n_warps / 4 - 1 consumer warpgroups of 64 query rows each, P kept in registers), runs on
 *    compute capability 9.0 only. B_r = 64 per consumer warpgroup, B_c the keys per stage;
 *    the mma.sync knobs (async_copy ... optimized_softmax) are 0. It runs dense problems with
 *    every mask and bias (causal, windows, soft-capping, ALiBi, sinks, any scale), GQA and
 *    LSE, in the dense, varlen and contiguous KV-cache layouts, paged KV caches of any page
 *    size (since 0.3.0: TMA boxes of gcd(B_c, page_size) rows where that is a multiple of 8,
 *    rows gathered by the producer warpgroup otherwise) and split-KV (num_splits > 1, the
 *    partials merged by the shared combine kernel; since 0.3.0). Strides of 2^39 elements or
 *    more (TMA's limit) and page pools of 2^31 - 1 pages or more run on the mma.sync family,
 *    and a plan pinned to an sm90 kernel refuses them with FA_STATUS_KERNEL_NOT_AVAILABLE.
 *    A d_head 192 kernel whose K and V stages of 192 columns would not fit in shared memory
 *    (B_c = 128) holds V and O in 128 columns: it runs head_dim_v up to 128 only (DeepSeek's
 *    192 / 128, which the built-in choice sends there) and a plan pinned to it refuses a wider
 *    one with FA_STATUS_KERNEL_NOT_AVAILABLE (since 0.3.0). */
typedef enum fa_kernel_family {
  FA_FAMILY_MMA_SYNC = 0,
  FA_FAMILY_SM90 = 1
} fa_kernel_family;

/*! fa_kernel_config_init() :
 *  Sets struct_size = sizeof(fa_kernel_config) and every other field to 0.
 *  @return FA_STATUS_INVALID_ARGUMENT if config is NULL, else FA_STATUS_SUCCESS.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_kernel_config_init(fa_kernel_config* config);

/*! fa_kernel_count() :
 *  @return the number of GPU kernels compiled into this library (0 in a build without kernels).
 *  Thread-safe. Since 0.1.0. */
FA_API size_t fa_kernel_count(void);

/*! fa_kernel_get() :
 *  @param index  0 <= index < fa_kernel_count(); kernels are in registry order.
 *  @param out    caller-initialised (fa_kernel_config_init()); receives the kernel's config.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL, or index out of range);
 *          FA_STATUS_BAD_STRUCT_SIZE.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_kernel_get(size_t index, fa_kernel_config* out);

/*! fa_kernel_config_name() :
 *  Writes the config's short name, e.g.
 *  "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles+buffer": dtype, d_head, B_r, B_c,
 *  n_warps, then the enabled features in a fixed order (async, eager, swizzled, load_<Q>_<K>_<V>_tiles
 *  always, buffer, opt_softmax) joined by '+'. An sm90 kernel's features are "sm90", then
 *  stages_<stages> always, then overlap, pingpong and persistent when set, e.g.
 *  "(BF16, 128, 128, 128, 12): sm90+stages_2+overlap+pingpong".
 *  @param buf       receives the NUL-terminated name; may be NULL when buf_size is 0.
 *  @param buf_size  size of buf in bytes.
 *  @param needed    optional; receives the buffer size the name needs, NUL included (under 128 for
 *                   any config that passes fa_kernel_config_validate()).
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (config NULL, unknown dtype, or buf too small:
 *          then buf is untouched and *needed is still set); FA_STATUS_BAD_STRUCT_SIZE.
 *  The config need not be valid. Thread-safe. Since 0.1.0. */
FA_API fa_status fa_kernel_config_name(const fa_kernel_config* config, char* buf, size_t buf_size,
                                       size_t* needed);

/*! fa_kernel_config_parse() :
 *  Parses a short name as written by fa_kernel_config_name(). The dtype is FP16, BF16 or (since 0.3.0)
 *  E4M3 in any case (or the seed's numeric codes 5 and 15); whitespace around fields is ignored; text before a '|' is skipped
 *  when the name is a cell of a Markdown table row.
 *  @param out  caller-initialised; written only on success. The parsed config is not validated.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL); FA_STATUS_BAD_STRUCT_SIZE;
 *          FA_STATUS_PARSE_ERROR (the message names the part that failed).
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_kernel_config_parse(const char* name, fa_kernel_config* out);

/*! fa_kernel_config_validate() :
 *  Checks a config against every rule of the kernel template (the same rules the templates check with
 *  static_assert when a kernel is compiled).
 *  @return FA_STATUS_SUCCESS if valid; FA_STATUS_INVALID_KERNEL_CONFIG with the first broken rule as
 *          detail message; FA_STATUS_INVALID_ARGUMENT (NULL); FA_STATUS_BAD_STRUCT_SIZE.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_kernel_config_validate(const fa_kernel_config* config);

/*! fa_kernel_config_autotune_filter() :
 *  The seed's autotuning filter: whether a config is worth timing.
 *  @param keep  receives 1 if the filter keeps the config, else 0; when 0 the detail message holds the
 *               rule that dropped it (the call still returns FA_STATUS_SUCCESS).
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL); FA_STATUS_BAD_STRUCT_SIZE.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_kernel_config_autotune_filter(const fa_kernel_config* config, int* keep);

/*! fa_kernel_config_canonical() :
 *  Some configs compile to the same code as another (a load granularity that covers the whole
 *  dimension is the whole-block load; double buffering with a single load group does nothing);
 *  each such set is registered once, under its canonical config, which this returns.
 *  @param out  caller-initialised; receives the canonical config (== *config when it is canonical).
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL); FA_STATUS_BAD_STRUCT_SIZE.
 *  Thread-safe. Since 0.2.0. */
FA_API fa_status fa_kernel_config_canonical(const fa_kernel_config* config, fa_kernel_config* out);

/*! fa_kernel_is_registered() :
 *  @param registered  receives 1 if a kernel with this config, or with its canonical config
 *                     (fa_kernel_config_canonical()), is compiled into the library; pinning such a
 *                     config runs the canonical kernel.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL); FA_STATUS_BAD_STRUCT_SIZE.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_kernel_is_registered(const fa_kernel_config* config, int* registered);

/* ====================================================================================================
 * Tuning results
 * ====================================================================================================
 * A context keeps, per problem shape, the kernel that tuning chose; fa_forward() and fa_plan_create()
 * use it instead of the built-in choice. A shape is (dtype, head_dim, causal, seqlen_q, seqlen_k). */

/*! fa_context_set_kernel() :
 *  Records `kernel` as the tuned kernel for problems shaped like `config` on this context (replacing
 *  an earlier record for that shape), after checking that the kernel is valid, compiled in, runs on
 *  the context's device, and can run `config`.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT / FA_STATUS_BAD_STRUCT_SIZE (bad input);
 *          FA_STATUS_INVALID_KERNEL_CONFIG; FA_STATUS_KERNEL_NOT_AVAILABLE (as for
 *          fa_plan_create_with_kernel()); FA_STATUS_UNSUPPORTED (the problem cannot run on a GPU,
 *          or has FP8 inputs: their choice is not tuned, since a 16-bit problem of the same shape
 *          would reuse it; pin a plan instead; since 0.3.0); FA_STATUS_WRONG_CONTEXT on a CPU
 *          context.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_context_set_kernel(fa_context_t* ctx, const fa_config* config,
                                       const fa_kernel_config* kernel);

/*! fa_autotune() :
 *  Times, on the caller's tensors, every compiled kernel that runs `config` on this context's device
 *  and passes the seed's autotuning filter (fa_kernel_config_autotune_filter()), together with the
 *  kernels the built-in choice table lists for the shape, and records the fastest as the context's
 *  kernel for the shape (as fa_context_set_kernel()). Each candidate runs once to warm up and then
 *  10 times; its median time counts. A candidate replaces the built-in choice only when more than
 *  3% faster (less is within the run-to-run spread of one kernel), so the result is never slower
 *  than the built-in choice beyond measurement noise.
 *  @param q,k,v,o,lse  as fa_forward(); o (and lse when not NULL) are overwritten, ending with a
 *                      correct result. Unlike other calls, a failure after the first candidate ran
 *                      (a CUDA error) leaves them overwritten.
 *  @param stream       the candidates run on it; the call waits for it (it synchronises the host),
 *                      so it must not be used while a stream is being captured.
 *  @param best         optional (NULL to skip), caller-initialised; receives the winner. A struct
 *                      from 0.2 (struct_size 64), which cannot hold an sm90 kernel, receives the
 *                      fastest mma.sync candidate when the winner is an sm90 kernel (the context
 *                      still records the winner).
 *  @param best_ms      optional; receives the median time in milliseconds of the kernel written
 *                      to best (of the winner when best is NULL).
 *  @return as fa_forward(); FA_STATUS_UNSUPPORTED also for problems kernels are not timed on:
 *          layouts other than FA_LAYOUT_DENSE, ALiBi, sinks, num_splits > 1, and FP8 inputs (as
 *          fa_context_set_kernel()) (nothing runs);
 *          FA_STATUS_WRONG_CONTEXT on a CPU context.
 *  Thread-safe, but timings taken while other work shares the GPU are noisy. Since 0.2.0. */
FA_API fa_status fa_autotune(fa_context_t* ctx, const fa_config* config, const void* q,
                             const void* k, const void* v, void* o, float* lse,
                             fa_stream_t stream, fa_kernel_config* best, float* best_ms);

/*! fa_context_save_tuning() :
 *  Writes the context's tuning results (every shape recorded by fa_autotune() or
 *  fa_context_set_kernel()) to `path`, replacing the file. The format is a versioned text file:
 *  a "libflashattn-tuning 1" line, the device's compute capability, then one line per shape:
 *  "<dtype> <head_dim> <causal> <seqlen_q> <seqlen_k> | <kernel name>", the head dim written
 *  "<head_dim>:<head_dim_v>" where the value head dim differs (since 0.3.0: a shape's entry
 *  serves that value head dim only; a 0.2 reader skips such a line as malformed).
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL); FA_STATUS_WRONG_CONTEXT (CPU
 *          context); FA_STATUS_IO_ERROR (the detail message names the path and the operating
 *          system's reason).
 *  Thread-safe. Since 0.2.0. */
FA_API fa_status fa_context_save_tuning(const fa_context_t* ctx, const char* path);

/*! fa_context_load_tuning() :
 *  Reads a file written by fa_context_save_tuning() and records its entries in the context
 *  (replacing entries for the same shapes). Entries that no longer fit (a kernel this library does
 *  not have, a device of another compute capability, a malformed line) are skipped.
 *  @return FA_STATUS_SUCCESS when every entry was loaded; FA_STATUS_TUNING_ENTRIES_IGNORED when
 *          some were skipped (the others are loaded; the detail message counts them and gives the
 *          first reason); FA_STATUS_PARSE_ERROR when the file is not a tuning file of a version this
 *          library reads (its first line is not exactly "libflashattn-tuning 1"; nothing loaded);
 *          FA_STATUS_IO_ERROR when `path` cannot be read (missing, unreadable, a directory: the
 *          detail message names the path and the operating system's reason);
 *          FA_STATUS_INVALID_ARGUMENT (NULL);
 *          FA_STATUS_WRONG_CONTEXT (CPU context).
 *  Thread-safe. Since 0.2.0. */
FA_API fa_status fa_context_load_tuning(fa_context_t* ctx, const char* path);

/*! fa_context_tuned_count() :
 *  @param count  receives the number of shapes with a tuned kernel on this context.
 *  @return FA_STATUS_SUCCESS, or FA_STATUS_INVALID_ARGUMENT (NULL).
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_context_tuned_count(const fa_context_t* ctx, size_t* count);

/* ====================================================================================================
 * Plans
 * ====================================================================================================
 * A plan is a validated problem bound to one kernel of its context. Make one per shape you launch many
 * times; running it does only the launch. */

/*! fa_plan_create() :
 *  Validates `config` and binds it to the kernel the context picks for it (on a CPU context, the CPU
 *  backend).
 *  @param out  receives the plan; the caller frees it with fa_plan_destroy(), before destroying ctx.
 *              Untouched on failure.
 *  @return as fa_forward() for the config; FA_STATUS_INVALID_ARGUMENT if ctx, config or out is NULL.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_plan_create(fa_context_t* ctx, const fa_config* config, fa_plan_t** out);

/*! fa_plan_create_with_kernel() :
 *  As fa_plan_create(), but pins the GPU kernel `kernel` instead of letting the context choose.
 *  @return as fa_plan_create(); FA_STATUS_INVALID_KERNEL_CONFIG if `kernel` breaks a rule;
 *          FA_STATUS_KERNEL_NOT_AVAILABLE if it is not compiled in, is compiled but cannot run on this
 *          device (no image for its architecture, or more shared memory than the device allows), or
 *          cannot run this problem (another dtype or head_dim, a grid over 2^31 - 1 blocks, a
 *          feature its family does not run: see fa_kernel_family; the message says which);
 *          FA_STATUS_WRONG_CONTEXT on a CPU context.
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_plan_create_with_kernel(fa_context_t* ctx, const fa_config* config,
                                            const fa_kernel_config* kernel, fa_plan_t** out);

/*! fa_plan_kernel() :
 *  @param out  caller-initialised; receives the plan's GPU kernel config: the kernel a run with
 *              the workspace fa_plan_workspace_size() asks for launches (an FP8 prefill plan
 *              whose kernel copies V's images runs another, which transposes V itself, when a
 *              run brings no such workspace: since 0.3.0).
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (NULL); FA_STATUS_BAD_STRUCT_SIZE;
 *          FA_STATUS_WRONG_CONTEXT for a CPU plan (it has no GPU kernel).
 *  Thread-safe. Since 0.1.0. */
FA_API fa_status fa_plan_kernel(const fa_plan_t* plan, fa_kernel_config* out);

/*! fa_plan_workspace_size() :
 *  @param size  receives the bytes of device scratch memory fa_plan_run() needs: 0 for most
 *               unsplit plans; for a split-KV plan (fa_plan_num_splits() > 1) the float32
 *               partial outputs and LSEs of every split, num_splits * rows * heads_q *
 *               (head_dim_v + 1) * 4 bytes rounded up to 256 (rows = batch * seqlen_q, or
 *               total_q for varlen; head_dim_v as fa_config resolves it). An unsplit FP8
 *               prefill on Hopper (dtype FA_DTYPE_E4M3, FA_LAYOUT_DENSE or FA_LAYOUT_VARLEN,
 *               head_dim_v a multiple of 16) where seqlen_q is 128 or more and
 *               ceil(seqlen_q / 128) * heads_q / heads_kv is 16 or more (32 with causal or a
 *               window; for head dims above 128, 4 or more and 16; varlen: total_q / batch for
 *               seqlen_q) asks for V transposed ahead of the
 *               run, about the bytes of V: batch * heads_kv * ceil(seqlen_k / B_c) blocks
 *               (varlen: heads_kv * (total_k / B_c + batch)) of d / 8 * (B_c * 8 + 16) bytes, d
 *               and B_c the kernel's head dim and keys per block (128 and 192 for head dims up
 *               to 128, 256 and 128 above, in this release). Given it, the run launches a
 *               transpose kernel before an attention kernel that copies V's blocks from it
 *               (since 0.3.0; FP8 prefill 1.34x / 1.44x our bf16 from 2k keys on an H200 at
 *               d 128 / 256); without it, the plan runs a kernel that transposes
 *               V itself (0.79-0.89x as fast from 8k keys), with the same result. A plan's
 *               size is the same for every run.
 *  @return FA_STATUS_SUCCESS, or FA_STATUS_INVALID_ARGUMENT (NULL).
 *  Thread-safe. Since 0.1.0 (non-zero since 0.3.0). */
FA_API fa_status fa_plan_workspace_size(const fa_plan_t* plan, size_t* size);

/*! fa_plan_run() :
 *  Runs the plan on tensors laid out as its config said.
 *  @param q,k,v,o,lse  as fa_forward().
 *  @param workspace       device memory of at least fa_plan_workspace_size() bytes, 16-byte aligned,
 *                         or NULL when that is 0. Not used after the kernel finishes. A plan that
 *                         splits by its own choice (fa_config.num_splits = 0) runs unsplit when it
 *                         is NULL or too small.
 *  @param workspace_size  its size in bytes.
 *  @param stream          as fa_forward().
 *  On a GPU the call only launches: no allocation, no host synchronisation, safe in stream capture.
 *  @return FA_STATUS_SUCCESS; FA_STATUS_INVALID_ARGUMENT (a NULL tensor, or an lse that is not
 *          4-byte aligned); FA_STATUS_UNSUPPORTED (q, k, v or o not 16-byte aligned on a GPU, or
 *          a workspace the split uses that is not 16-byte aligned); FA_STATUS_WORKSPACE_TOO_SMALL
 *          (a forced split without its workspace); FA_STATUS_WRONG_CONTEXT; FA_STATUS_CUDA_ERROR.
 *  Thread-safe: one plan may be run from several threads at once. Since 0.1.0. */
FA_API fa_status fa_plan_run(const fa_plan_t* plan, const void* q, const void* k, const void* v, void* o,
                             float* lse, void* workspace, size_t workspace_size, fa_stream_t stream);

/*! fa_plan_run_ex() :
 *  As fa_plan_run(), with the run's index tensors, per-head parameters and workspace in `args`
 *  (NULL when the config needs none and the plan needs no workspace). The plan keeps no pointer:
 *  every run may pass other index tensors, slopes, sinks or workspace.
 *  @return as fa_plan_run() and fa_forward_ex().
 *  Thread-safe. Since 0.3.0. */
FA_API fa_status fa_plan_run_ex(const fa_plan_t* plan, const void* q, const void* k, const void* v,
                                void* o, float* lse, const fa_run_args* args, fa_stream_t stream);

/*! fa_plan_num_splits() :
 *  @param splits  receives how many thread blocks share each sequence's keys (1: unsplit; always 1
 *                 on a CPU context).
 *  @return FA_STATUS_SUCCESS, or FA_STATUS_INVALID_ARGUMENT (NULL).
 *  Thread-safe. Since 0.3.0. */
FA_API fa_status fa_plan_num_splits(const fa_plan_t* plan, int* splits);

/*! fa_plan_destroy() :
 *  Frees a plan. Accepts NULL. No fa_plan_run() on it may be in flight on the host (kernels already
 *  launched on a stream do not reference the plan).
 *  Not thread-safe for the plan it frees; other plans may be used and freed concurrently.
 *  Since 0.1.0. */
FA_API void fa_plan_destroy(fa_plan_t* plan);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHATTN_H */
