#include "cuda/device.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "api/status.hpp"
#include "cuda/heuristic.hpp"

namespace fa::cuda {

namespace {

fa_status cuda_fail(cudaError_t e, char const* what) {
  return fail(FA_STATUS_CUDA_ERROR, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

// The driver's current-context calls, fetched through the runtime (linking libcuda would make
// the library unloadable on machines without a driver). Null where the driver lacks them.
struct DriverContext {
  PFN_cuCtxGetCurrent_v4000 get = nullptr;
  PFN_cuCtxSetCurrent_v4000 set = nullptr;
};

DriverContext const& driver_context() {
  static DriverContext const api = [] {
    DriverContext d;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 4000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      d.get = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(fn);
    }
    if (cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &fn, 4000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      d.set = reinterpret_cast<PFN_cuCtxSetCurrent_v4000>(fn);
    }
    cudaGetLastError();  // a failed query leaves an error the caller must not see
    return d;
  }();
  return api;
}

// Runs `body` with `ordinal` as the current device, then gives the calling thread back exactly
// the context it had. Saving and restoring the driver context (not cudaGetDevice/cudaSetDevice)
// matters on a thread with no context yet: restoring "device 0" there would create a context on
// GPU 0 in a process that only uses another GPU.
template <class Body>
fa_status on_device(int ordinal, Body&& body) {
  DriverContext const& driver = driver_context();
  CUcontext saved = nullptr;
  bool const can_restore = driver.get && driver.set && driver.get(&saved) == CUDA_SUCCESS;
  int current = -1;
  if (saved != nullptr && cudaGetDevice(&current) == cudaSuccess && current == ordinal) {
    return body();
  }
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) return cuda_fail(e, "cudaSetDevice");
  fa_status status = body();
  if (can_restore && driver.set(saved) != CUDA_SUCCESS && status == FA_STATUS_SUCCESS) {
    status = fail(FA_STATUS_CUDA_ERROR, "cuCtxSetCurrent failed restoring the caller's context");
  }
  return status;
}

// Devices whose kernels have had their shared-memory limit raised. cudaFuncSetAttribute is
// per device and per process, so this is process-wide, behind a lock.
std::mutex g_prepared_mutex;
std::set<int> g_prepared_devices;

// The registered kernels that run on the current device (`ordinal`): an image for its arch was
// compiled, and their shared memory fits its opt-in limit. Raises the limit of those needing
// over 48 KiB, once per device per process.
fa_status usable_kernels(int ordinal, int smem_optin, std::vector<KernelEntry const*>* out) {
  std::lock_guard lock(g_prepared_mutex);
  bool const prepared = g_prepared_devices.count(ordinal) != 0;
  for (auto const& [config, entry] : registry()) {
    cudaFuncAttributes attributes;
    if (entry.attributes(&attributes) != cudaSuccess) {
      // No image of this kernel runs here (its arch was left out of the build). Clear the error
      // the failed query recorded; the kernel is simply absent from this device's view.
      cudaGetLastError();
      continue;
    }
    // 196 KiB kernels exist for sm_90 (227 KiB); sm_80 allows 163 KiB, sm_86/89 99 KiB.
    if (config.smem_bytes() > smem_optin) continue;
    if (!prepared) {
      if (cudaError_t e = entry.prepare(); e != cudaSuccess) {
        return cuda_fail(e, ("cudaFuncSetAttribute for " + short_name(config)).c_str());
      }
    }
    out->push_back(&entry);
  }
  g_prepared_devices.insert(ordinal);
  return FA_STATUS_SUCCESS;
}

// Resident blocks per SM of each usable kernel (its limit raised first, by usable_kernels()).
fa_status read_occupancy(Device* d) {
  for (KernelEntry const* e : d->kernels) {
    int blocks = 0;
    if (cudaError_t err = e->occupancy(&blocks); err != cudaSuccess) {
      cudaGetLastError();
      return cuda_fail(err, ("cudaOccupancyMaxActiveBlocksPerMultiprocessor for " +
                             short_name(e->config)).c_str());
    }
    d->blocks_per_sm[e] = std::max(blocks, 1);
  }
  return FA_STATUS_SUCCESS;
}

}  // namespace

fa_status open_device(int ordinal, Device* out) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return fail(FA_STATUS_NO_DEVICE, "no usable CUDA device: cudaGetDeviceCount: %s (%s)",
                cudaGetErrorName(e), cudaGetErrorString(e));
  }
  if (ordinal >= count) {
    return fail(FA_STATUS_NO_DEVICE, "device = %d, but there %s %d CUDA device%s", ordinal,
                count == 1 ? "is" : "are", count, count == 1 ? "" : "s");
  }
  Device d;
  d.ordinal = ordinal;
  struct Attribute {
    cudaDeviceAttr attr;
    int* value;
  };
  for (Attribute a : {Attribute{cudaDevAttrComputeCapabilityMajor, &d.cc_major},
                      Attribute{cudaDevAttrComputeCapabilityMinor, &d.cc_minor},
                      Attribute{cudaDevAttrMaxSharedMemoryPerBlockOptin, &d.smem_per_block_optin},
                      Attribute{cudaDevAttrMultiProcessorCount, &d.sm_count}}) {
    if (cudaError_t e = cudaDeviceGetAttribute(a.value, a.attr, ordinal); e != cudaSuccess) {
      return cuda_fail(e, "cudaDeviceGetAttribute");
    }
  }
  if (d.cc_major < 8) {
    return fail(FA_STATUS_ARCH_MISMATCH, "device %d is sm_%d%d; the kernels need sm_80 or newer",
                ordinal, d.cc_major, d.cc_minor);
  }
  fa_status status = on_device(ordinal, [&] {
    fa_status s = usable_kernels(ordinal, d.smem_per_block_optin, &d.kernels);
    return s == FA_STATUS_SUCCESS ? read_occupancy(&d) : s;
  });
  if (status != FA_STATUS_SUCCESS) return status;
  if (!registry().empty() && d.kernels.empty()) {
    return fail(FA_STATUS_ARCH_MISMATCH,
                "none of the %zu compiled kernels runs on device %d (sm_%d%d); rebuild with this "
                "architecture in FA_CUDA_ARCHS",
                registry().size(), ordinal, d.cc_major, d.cc_minor);
  }
  *out = std::move(d);
  return FA_STATUS_SUCCESS;
}

fa_status check_problem(Problem const& p) {
  if (p.dtype == DType::kFP32) {
    return fail(FA_STATUS_UNSUPPORTED, "fa_config.dtype = FA_DTYPE_FP32 runs on CPU contexts only");
  }
  struct Stride {
    char const* name;
    int64_t value;
  };
  // 16-byte vector loads and stores of every row need strides in whole 8-element (16-byte) units.
  for (Stride s : {Stride{"q_batch_stride", p.q.batch}, Stride{"q_seq_stride", p.q.seq},
                   Stride{"q_head_stride", p.q.head}, Stride{"k_batch_stride", p.k.batch},
                   Stride{"k_seq_stride", p.k.seq}, Stride{"k_head_stride", p.k.head},
                   Stride{"v_batch_stride", p.v.batch}, Stride{"v_seq_stride", p.v.seq},
                   Stride{"v_head_stride", p.v.head}, Stride{"o_batch_stride", p.o.batch},
                   Stride{"o_seq_stride", p.o.seq}, Stride{"o_head_stride", p.o.head}}) {
    if (s.value % 8 != 0) {
      return fail(FA_STATUS_UNSUPPORTED,
                  "fa_config.%s = %" PRId64 " is not a multiple of 8 elements (16 bytes), which "
                  "the GPU kernels need",
                  s.name, s.value);
    }
  }
  // Row indices are int32 in the kernels; packed GQA rows are seqlen_q * heads_q / heads_kv.
  for (Stride s : {Stride{"seqlen_q", p.seqlen_q * (p.heads_q / p.heads_kv)},
                   Stride{"seqlen_k", p.seqlen_k}, Stride{"heads_q", p.heads_q},
                   Stride{"total_q", p.total_q}, Stride{"total_k", p.total_k},
                   Stride{"num_pages", p.num_pages}, Stride{"page_size", p.page_size},
                   Stride{"max_pages_per_seq", p.max_pages_per_seq}}) {
    if (s.value > INT32_MAX) {
      return fail(FA_STATUS_UNSUPPORTED,
                  "fa_config: %s = %" PRId64 " must be below 2^31 for the GPU kernels", s.name,
                  s.value);
    }
  }
  return FA_STATUS_SUCCESS;
}

namespace {

// Packing the query heads of one K/V head into a tile pays when one head's rows would leave the
// tile mostly empty (decode: seqlen_q < B_r); K and V are then read once per group.
bool pack_gqa(KernelConfig const& k, Problem const& p) {
  return k.family == kMmaSync && p.heads_q > p.heads_kv && p.seqlen_q < k.B_r;
}

// What the sm90 family does not run (yet): it reads dense tensors through TMA maps and keeps
// raw scores with the scale folded into exp2 (forward_sm90.cuh); empty when it runs `p`.
std::string sm90_cannot_run(Problem const& p) {
  if (p.layout == Layout::kPagedKv) return "the sm90 family has no paged KV cache";
  if (p.num_splits > 1) return "the sm90 family does not split the keys (num_splits > 1)";
  // A TMA map's strides must stay below 2^40 bytes.
  for (int64_t stride : {p.q.batch, p.q.seq, p.q.head, p.k.batch, p.k.seq, p.k.head, p.v.batch,
                         p.v.seq, p.v.head}) {
    if (stride >= (int64_t(1) << 39)) return "a stride of 2^39 elements or more (TMA's limit)";
  }
  return {};
}

int64_t unsplit_blocks(KernelConfig const& k, Problem const& p, bool pack) {
  int64_t const group = pack ? p.heads_q / p.heads_kv : 1;
  int64_t const n_q_blocks = (p.seqlen_q * group + k.B_r - 1) / k.B_r;
  return n_q_blocks * (pack ? p.heads_kv : p.heads_q) * p.batch;
}

}  // namespace

std::string cannot_run(KernelConfig const& k, Problem const& p) {
  auto say = [&](std::string what) { return short_name(k) + ": " + what; };
  if (static_cast<int>(k.dtype) != static_cast<int>(p.dtype)) {
    return say("its dtype differs from fa_config.dtype = " + std::to_string(int(p.dtype)));
  }
  if (k.d_head != p.head_dim) {
    return say("d_head differs from fa_config.head_dim = " + std::to_string(p.head_dim));
  }
  if (k.family == kSm90) {
    if (std::string why = sm90_cannot_run(p); !why.empty()) return say(why);
  }
  // One thread block per (query block, head, batch), on a one-dimensional grid; splits multiply
  // it, but only up to the unsplit grid's limit (the schedule caps them).
  int64_t const blocks = unsplit_blocks(k, p, pack_gqa(k, p));
  if (blocks > INT32_MAX) {
    return say("the grid of " + std::to_string(blocks) + " thread blocks exceeds 2^31 - 1");
  }
  return {};
}

namespace {

// Decode-like problems (a few query rows per K/V head against many keys) are bound by reading K
// and V, not by MMAs: they run on the smallest query tile with GQA packing and split-KV.
bool decode_like(Problem const& p) { return p.seqlen_q * (p.heads_q / p.heads_kv) <= 64; }

// The decode kernel: B_r = 64 with 4 warps (generate_kernels.py's decode_configs), with
// kDecodeKeys keys per block where built.
constexpr int kDecodeKeys = 128;
bool decode_kernel(KernelConfig const& k) { return k.B_r == 64 && k.n_warps == 4; }

}  // namespace

fa_status choose_kernel(Device const& device, Problem const& p, KernelEntry const** out) {
  // Decode-like problems take a decode kernel. Otherwise the measured table's kernel when this
  // build has it; else (a build that left both the pick and its fallback out) the runnable
  // kernel with the largest tile, the shape that won most of the sweep.
  if (decode_like(p)) {
    KernelEntry const* best = nullptr;
    for (KernelEntry const* e : device.kernels) {
      if (!decode_kernel(e->config) || !cannot_run(e->config, p).empty()) continue;
      if (best == nullptr || (e->config.B_c == kDecodeKeys && best->config.B_c != kDecodeKeys)) {
        best = e;
      }
    }
    if (best != nullptr) {
      *out = best;
      return FA_STATUS_SUCCESS;
    }
  }
  // The table's pick, or where it cannot run here (an sm90 kernel on another arch, in a build
  // without it, or on a problem that family does not run) the table's mma.sync fallback.
  int const arch = device.cc_major * 10 + device.cc_minor;
  for (bool table_fallback : {false, true}) {
    std::optional<KernelConfig> const table = table_choice(arch, p, table_fallback);
    if (!table) continue;
    for (KernelEntry const* e : device.kernels) {
      if (e->config == *table && cannot_run(e->config, p).empty()) {
        *out = e;
        return FA_STATUS_SUCCESS;
      }
    }
  }
  KernelEntry const* fallback = nullptr;
  std::string reason;
  for (KernelEntry const* e : device.kernels) {
    std::string why = cannot_run(e->config, p);
    if (!why.empty()) {
      // Report the reason of a kernel of the right dtype and head dim when there is one.
      if (reason.empty() || (e->config.d_head == p.head_dim &&
                             static_cast<int>(e->config.dtype) == static_cast<int>(p.dtype))) {
        reason = why;
      }
      continue;
    }
    if (fallback == nullptr ||
        e->config.B_r * e->config.B_c > fallback->config.B_r * fallback->config.B_c) {
      fallback = e;
    }
  }
  if (fallback != nullptr) {
    *out = fallback;
    return FA_STATUS_SUCCESS;
  }
  if (device.kernels.empty()) {
    return fail(FA_STATUS_UNSUPPORTED, "this build has no GPU kernels for device %d",
                device.ordinal);
  }
  return fail(FA_STATUS_UNSUPPORTED, "no kernel runs this problem (dtype %d, head_dim %" PRId64
              ", seqlen_q %" PRId64 ", seqlen_k %" PRId64 ", causal %d); for example %s",
              int(p.dtype), p.head_dim, p.seqlen_q, p.seqlen_k, int(p.causal), reason.c_str());
}

Schedule make_schedule(Device const& device, KernelEntry const& kernel, Problem const& p,
                       bool allow_split) {
  KernelConfig const& k = kernel.config;
  Schedule s;
  s.pack_gqa = pack_gqa(k, p);
  int64_t const base = unsplit_blocks(k, p, s.pack_gqa);
  int splits = 1;
  // Partials are indexed by int32 rows, and the combine kernel has a warp per (row, head).
  bool const splittable = p.q_rows() * p.heads_q <= INT32_MAX;
  if (!splittable || k.family == kSm90) {
    splits = 1;
  } else if (p.num_splits > 0) {
    splits = p.num_splits;
  } else if (allow_split) {
    // Fill one wave of resident blocks when the unsplit grid leaves SMs idle (decode), with each
    // split keeping at least 4 key blocks so its partial output (one row of d floats) stays
    // small against the keys it reads. Among the counts up to twice that, take the one whose
    // last wave is fullest (ties: fewer splits).
    auto const occ = device.blocks_per_sm.find(&kernel);
    int64_t const capacity =
        int64_t(device.sm_count) * (occ == device.blocks_per_sm.end() ? 1 : occ->second);
    int64_t const key_blocks = (p.seqlen_k + k.B_c - 1) / k.B_c;
    int64_t const most = std::min<int64_t>({256, key_blocks / 4, INT32_MAX / std::max<int64_t>(base, 1)});
    if (base < capacity && most > 1) {
      int64_t const target = std::min(most, (capacity + base - 1) / base);
      double best = 0.0;
      for (int64_t n = std::max<int64_t>(1, target / 2); n <= std::min(most, 2 * target); ++n) {
        double const waves = double(base * n) / double(capacity);
        double const efficiency = waves / std::ceil(waves);
        if (efficiency > best + 1e-9) {
          best = efficiency;
          splits = static_cast<int>(n);
        }
      }
    }
  }
  s.num_splits = splits;
  s.blocks = base * splits;
  // A persistent sm90 kernel launches one block per SM (one fits per SM), each walking tiles.
  if (k.family == kSm90 && k.persistent) s.blocks = std::min<int64_t>(base, std::max(device.sm_count, 1));
  // The plain instantiation covers dense, varlen and contiguous-cache layouts with causal and
  // window masks; everything else (and a negative scale, which the raw-score softmax cannot take)
  // needs the general one.
  s.general = p.layout == Layout::kPagedKv || p.softcap > 0.f || p.alibi != Alibi::kNone ||
              p.sinks || p.softmax_scale < 0.f || s.pack_gqa || splits > 1;
  if (splits > 1) {
    size_t const floats = size_t(splits) * size_t(p.q_rows()) * size_t(p.heads_q) *
                          size_t(p.head_dim + 1);
    s.workspace_bytes = (floats * sizeof(float) + 255) / 256 * 256;
  }
  return s;
}

ForwardParams make_params(KernelConfig const& k, Problem const& p, Schedule const& s) {
  ForwardParams f{};
  f.q_batch_stride = p.q.batch;
  f.q_seq_stride = p.q.seq;
  f.q_head_stride = p.q.head;
  f.k_batch_stride = p.k.batch;
  f.k_seq_stride = p.k.seq;
  f.k_head_stride = p.k.head;
  f.v_batch_stride = p.v.batch;
  f.v_seq_stride = p.v.seq;
  f.v_head_stride = p.v.head;
  f.o_batch_stride = p.o.batch;
  f.o_seq_stride = p.o.seq;
  f.o_head_stride = p.o.head;
  f.seqlen_q = static_cast<int32_t>(p.seqlen_q);
  f.seqlen_k = static_cast<int32_t>(p.seqlen_k);
  f.heads_q = static_cast<int32_t>(p.heads_q);
  f.batch = static_cast<int32_t>(p.batch);
  f.q_heads_per_kv = static_cast<int32_t>(p.heads_q / p.heads_kv);
  f.pack_gqa = s.pack_gqa ? 1 : 0;
  f.head_units = static_cast<int32_t>(s.pack_gqa ? p.heads_kv : p.heads_q);
  int64_t const rows = p.seqlen_q * (s.pack_gqa ? f.q_heads_per_kv : 1);
  f.n_q_blocks = static_cast<int32_t>((rows + k.B_r - 1) / k.B_r);
  f.num_splits = s.num_splits;

  f.layout = static_cast<int32_t>(p.layout);
  f.total_q = static_cast<int32_t>(p.total_q);
  f.total_k = static_cast<int32_t>(p.total_k);
  f.num_pages = static_cast<int32_t>(p.num_pages);
  f.page_size = static_cast<int32_t>(p.page_size);
  f.max_pages_per_seq = static_cast<int32_t>(p.max_pages_per_seq);

  // 2^40 exceeds any distance between int32 positions: an unbounded side.
  constexpr int64_t kUnbounded = int64_t(1) << 40;
  f.window_left = p.window && p.window_left >= 0 ? p.window_left : kUnbounded;
  f.window_right = p.window && p.window_right >= 0 ? p.window_right : kUnbounded;
  if (p.causal) f.window_right = std::min<int64_t>(f.window_right, 0);
  f.masked = f.window_left != kUnbounded || f.window_right != kUnbounded ? 1 : 0;

  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2 = 0.6931471805599453;
  // Raw scores with the scale folded into exp2 need a positive scale and no per-score function.
  f.transform = p.softcap > 0.f || p.alibi != Alibi::kNone || p.softmax_scale < 0.f ? 1 : 0;
  f.softmax_scale = p.softmax_scale;
  f.score_scale_log2 = f.transform ? 1.f : static_cast<float>(p.softmax_scale * kLog2e);
  f.lse_scale = f.transform ? static_cast<float>(kLn2) : p.softmax_scale;
  f.softcap = p.softcap;
  f.inv_softcap = p.softcap > 0.f ? 1.f / p.softcap : 0.f;
  f.alibi = static_cast<int32_t>(p.alibi);
  f.partial_rows = static_cast<int32_t>(p.q_rows());
  return f;
}

namespace {

// Checks the tensor and run-time pointers (non-NULL where used, aligned) and writes them into
// `params`.
fa_status bind_tensors(ForwardParams* params, int d_head, Schedule const& schedule,
                       LaunchTensors const& t) {
  struct Pointer {
    char const* name;
    void const* value;
  };
  for (Pointer ptr : {Pointer{"q", t.q}, Pointer{"k", t.k}, Pointer{"v", t.v}, Pointer{"o", t.o}}) {
    if (ptr.value == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "%s is NULL", ptr.name);
    if (reinterpret_cast<uintptr_t>(ptr.value) % 16 != 0) {
      return fail(FA_STATUS_UNSUPPORTED, "%s = %p is not 16-byte aligned", ptr.name, ptr.value);
    }
  }
  if (reinterpret_cast<uintptr_t>(t.lse) % alignof(float) != 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "lse = %p is not 4-byte aligned",
                static_cast<void*>(t.lse));
  }
  // The API layer passes only the run pointers the problem uses, each checked non-NULL.
  struct Index {
    char const* name;
    void const* value;
  };
  for (Index n : {Index{"cu_seqlens_q", t.run.cu_seqlens_q}, Index{"cu_seqlens_k", t.run.cu_seqlens_k},
                  Index{"cache_seqlens", t.run.cache_seqlens}, Index{"block_table", t.run.block_table},
                  Index{"alibi_slopes", t.run.alibi_slopes}, Index{"sinks", t.run.sinks}}) {
    if (reinterpret_cast<uintptr_t>(n.value) % 4 != 0) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_run_args.%s = %p is not 4-byte aligned", n.name,
                  n.value);
    }
  }
  if (schedule.num_splits > 1) {
    if (t.workspace_size < schedule.workspace_bytes || t.workspace == nullptr) {
      return fail(FA_STATUS_WORKSPACE_TOO_SMALL,
                  "the plan splits the keys %d ways and needs a workspace of %zu bytes; got %zu "
                  "bytes at %p",
                  schedule.num_splits, schedule.workspace_bytes,
                  t.workspace == nullptr ? size_t{0} : t.workspace_size, t.workspace);
    }
    if (reinterpret_cast<uintptr_t>(t.workspace) % 16 != 0) {
      return fail(FA_STATUS_UNSUPPORTED, "workspace = %p is not 16-byte aligned", t.workspace);
    }
  }
  params->q = t.q;
  params->k = t.k;
  params->v = t.v;
  params->o = t.o;
  params->lse = t.lse;
  params->cu_seqlens_q = t.run.cu_seqlens_q;
  params->cu_seqlens_k = t.run.cu_seqlens_k;
  params->cache_seqlens = t.run.cache_seqlens;
  params->block_table = t.run.block_table;
  params->alibi_slopes = t.run.alibi_slopes;
  params->sinks = t.run.sinks;
  if (schedule.num_splits > 1) {
    // [num_splits, rows, heads_q, d] floats, then [num_splits, heads_q, rows]: the first part's
    // size is a multiple of 64 floats (d is), so the LSEs stay 256-byte aligned.
    params->o_partial = static_cast<float*>(t.workspace);
    params->lse_partial = params->o_partial + size_t(schedule.num_splits) *
                                                  size_t(params->partial_rows) *
                                                  size_t(params->heads_q) * size_t(d_head);
  }
  return FA_STATUS_SUCCESS;
}

// Launches with bound pointers; the caller has made the device current.
fa_status launch_bound(Device const& device, KernelEntry const& kernel,
                       ForwardParams const& params, Schedule const& schedule,
                       cudaStream_t stream) {
  dim3 const grid(static_cast<unsigned>(schedule.blocks));
  if (cudaError_t e = kernel.launch(params, grid, schedule.general, stream); e != cudaSuccess) {
    cudaGetLastError();  // the launch error is reported here, not left for the caller's next call
    return cuda_fail(e, ("launching " + short_name(kernel.config)).c_str());
  }
  if (schedule.num_splits > 1) {
    bool const programmatic = device.cc_major >= 9;
    if (cudaError_t e = launch_combine(params, kernel.config.dtype, kernel.config.d_head,
                                       programmatic, stream);
        e != cudaSuccess) {
      cudaGetLastError();
      return cuda_fail(e, "launching the split-KV combine kernel");
    }
  }
  return FA_STATUS_SUCCESS;
}

}  // namespace

fa_status launch(Device const& device, KernelEntry const& kernel, ForwardParams params,
                 Schedule const& schedule, LaunchTensors const& t, cudaStream_t stream) {
  if (fa_status s = bind_tensors(&params, kernel.config.d_head, schedule, t); s != FA_STATUS_SUCCESS) return s;
  return on_device(device.ordinal, [&] { return launch_bound(device, kernel, params, schedule, stream); });
}

fa_status merge(Device const& device, DType dtype, MergeParams const& params, cudaStream_t stream) {
  return on_device(device.ordinal, [&] {
    if (cudaError_t e = launch_merge(params, dtype, stream); e != cudaSuccess) {
      cudaGetLastError();
      return cuda_fail(e, "launching the merge kernel");
    }
    return FA_STATUS_SUCCESS;
  });
}

fa_status time_kernel(Device const& device, KernelEntry const& kernel, Problem const& p,
                      void const* q, void const* k, void const* v, void* o, float* lse,
                      cudaStream_t stream, int runs, float* median_ms) {
  if (p.layout != Layout::kDense || p.alibi != Alibi::kNone || p.sinks) {
    return fail(FA_STATUS_UNSUPPORTED,
                "kernels are timed on dense problems without run-time arguments (fa_config.layout "
                "= %d, alibi = %d, sinks = %d)",
                static_cast<int>(p.layout), static_cast<int>(p.alibi), p.sinks ? 1 : 0);
  }
  // Timed unsplit: the candidates are compared on the same work, with no workspace to supply.
  Schedule const schedule = make_schedule(device, kernel, p, false);
  if (schedule.num_splits > 1) {
    return fail(FA_STATUS_UNSUPPORTED, "fa_config.num_splits = %d: kernels are timed unsplit",
                schedule.num_splits);
  }
  ForwardParams params = make_params(kernel.config, p, schedule);
  LaunchTensors const t{q, k, v, o, lse, RunPointers{}, nullptr, 0};
  if (fa_status s = bind_tensors(&params, kernel.config.d_head, schedule, t); s != FA_STATUS_SUCCESS) return s;
  return on_device(device.ordinal, [&] {
    if (fa_status s = launch_bound(device, kernel, params, schedule, stream); s != FA_STATUS_SUCCESS) {
      return s;  // the warm-up run
    }
    cudaEvent_t events[2] = {};
    for (cudaEvent_t& e : events) {
      if (cudaError_t err = cudaEventCreate(&e); err != cudaSuccess) {
        for (cudaEvent_t created : events) {
          if (created != nullptr) cudaEventDestroy(created);
        }
        return cuda_fail(err, "cudaEventCreate");
      }
    }
    std::vector<float> times;
    fa_status status = FA_STATUS_SUCCESS;
    for (int r = 0; r < runs && status == FA_STATUS_SUCCESS; ++r) {
      cudaError_t e = cudaEventRecord(events[0], stream);
      if (e == cudaSuccess) {
        e = kernel.launch(params, dim3(static_cast<unsigned>(schedule.blocks)), schedule.general, stream);
      }
      if (e == cudaSuccess) e = cudaEventRecord(events[1], stream);
      if (e == cudaSuccess) e = cudaEventSynchronize(events[1]);
      float ms = 0.f;
      if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, events[0], events[1]);
      if (e != cudaSuccess) {
        cudaGetLastError();
        status = cuda_fail(e, ("timing " + short_name(kernel.config)).c_str());
      }
      times.push_back(ms);
    }
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    if (status != FA_STATUS_SUCCESS) return status;
    std::sort(times.begin(), times.end());
    *median_ms = times[times.size() / 2];
    return FA_STATUS_SUCCESS;
  });
}

}  // namespace fa::cuda
