#include "cuda/device.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cinttypes>
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
                      Attribute{cudaDevAttrMaxSharedMemoryPerBlockOptin, &d.smem_per_block_optin}}) {
    if (cudaError_t e = cudaDeviceGetAttribute(a.value, a.attr, ordinal); e != cudaSuccess) {
      return cuda_fail(e, "cudaDeviceGetAttribute");
    }
  }
  if (d.cc_major < 8) {
    return fail(FA_STATUS_ARCH_MISMATCH, "device %d is sm_%d%d; the kernels need sm_80 or newer",
                ordinal, d.cc_major, d.cc_minor);
  }
  fa_status status = on_device(ordinal, [&] {
    return usable_kernels(ordinal, d.smem_per_block_optin, &d.kernels);
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
  // The kernels take the running max over raw scores and fold the scale into exp2's argument,
  // which is only right for a positive scale.
  if (p.softmax_scale < 0.f) {
    return fail(FA_STATUS_UNSUPPORTED,
                "fa_config.softmax_scale = %g: the GPU kernels need a positive scale (the CPU "
                "backend takes any)",
                static_cast<double>(p.softmax_scale));
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
  if (p.seqlen_q > INT32_MAX || p.seqlen_k > INT32_MAX || p.heads_q > INT32_MAX) {
    return fail(FA_STATUS_UNSUPPORTED, "seqlen_q = %" PRId64 ", seqlen_k = %" PRId64
                " and heads_q = %" PRId64 " must be below 2^31", p.seqlen_q, p.seqlen_k, p.heads_q);
  }
  return FA_STATUS_SUCCESS;
}

std::string cannot_run(KernelConfig const& k, Problem const& p) {
  auto say = [&](std::string what) { return short_name(k) + ": " + what; };
  if (static_cast<int>(k.dtype) != static_cast<int>(p.dtype)) {
    return say("its dtype differs from fa_config.dtype = " + std::to_string(int(p.dtype)));
  }
  if (k.d_head != p.head_dim) {
    return say("d_head differs from fa_config.head_dim = " + std::to_string(p.head_dim));
  }
  // One thread block per (query block, head, batch), on a one-dimensional grid.
  int64_t const blocks = (p.seqlen_q + k.B_r - 1) / k.B_r * p.heads_q * p.batch;
  if (blocks > INT32_MAX) {
    return say("the grid of " + std::to_string(blocks) + " thread blocks exceeds 2^31 - 1");
  }
  return {};
}

fa_status choose_kernel(Device const& device, Problem const& p, KernelEntry const** out) {
  // The measured table's kernel when this build has it; otherwise (a build that left it out) the
  // runnable kernel with the largest tile, the shape that won most of the sweep.
  std::optional<KernelConfig> const table = table_choice(device.cc_major * 10 + device.cc_minor, p);
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
    if (table && e->config == *table) {
      *out = e;
      return FA_STATUS_SUCCESS;
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

ForwardParams make_params(KernelConfig const& k, Problem const& p) {
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
  f.q_heads_per_kv = static_cast<int32_t>(p.heads_q / p.heads_kv);
  f.n_q_blocks = static_cast<int32_t>((p.seqlen_q + k.B_r - 1) / k.B_r);
  f.causal = p.causal ? 1 : 0;
  f.causal_offset = static_cast<int32_t>(p.seqlen_k - p.seqlen_q);
  constexpr double kLog2e = 1.4426950408889634;
  f.scale_log2 = static_cast<float>(p.softmax_scale * kLog2e);
  f.softmax_scale = p.softmax_scale;
  return f;
}

dim3 make_grid(KernelConfig const& k, Problem const& p) {
  return dim3(static_cast<unsigned>((p.seqlen_q + k.B_r - 1) / k.B_r * p.heads_q * p.batch));
}

namespace {

// Checks the tensor pointers (non-NULL, aligned) and writes them into `params`.
fa_status bind_tensors(ForwardParams* params, void const* q, void const* k, void const* v, void* o,
                       float* lse) {
  struct Pointer {
    char const* name;
    void const* value;
  };
  for (Pointer ptr : {Pointer{"q", q}, Pointer{"k", k}, Pointer{"v", v}, Pointer{"o", o}}) {
    if (ptr.value == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "%s is NULL", ptr.name);
    if (reinterpret_cast<uintptr_t>(ptr.value) % 16 != 0) {
      return fail(FA_STATUS_UNSUPPORTED, "%s = %p is not 16-byte aligned", ptr.name, ptr.value);
    }
  }
  if (reinterpret_cast<uintptr_t>(lse) % alignof(float) != 0) {
    return fail(FA_STATUS_INVALID_ARGUMENT, "lse = %p is not 4-byte aligned",
                static_cast<void*>(lse));
  }
  params->q = q;
  params->k = k;
  params->v = v;
  params->o = o;
  params->lse = lse;
  return FA_STATUS_SUCCESS;
}

// Launches with bound tensors; the caller has made the device current.
fa_status launch_bound(KernelEntry const& kernel, ForwardParams const& params, dim3 grid,
                       cudaStream_t stream) {
  if (cudaError_t e = kernel.launch(params, grid, stream); e != cudaSuccess) {
    cudaGetLastError();  // the launch error is reported here, not left for the caller's next call
    return cuda_fail(e, ("launching " + short_name(kernel.config)).c_str());
  }
  return FA_STATUS_SUCCESS;
}

}  // namespace

fa_status launch(Device const& device, KernelEntry const& kernel, ForwardParams params, dim3 grid,
                 void const* q, void const* k, void const* v, void* o, float* lse,
                 cudaStream_t stream) {
  if (fa_status s = bind_tensors(&params, q, k, v, o, lse); s != FA_STATUS_SUCCESS) return s;
  return on_device(device.ordinal, [&] { return launch_bound(kernel, params, grid, stream); });
}

fa_status time_kernel(Device const& device, KernelEntry const& kernel, Problem const& p,
                      void const* q, void const* k, void const* v, void* o, float* lse,
                      cudaStream_t stream, int runs, float* median_ms) {
  ForwardParams params = make_params(kernel.config, p);
  dim3 const grid = make_grid(kernel.config, p);
  if (fa_status s = bind_tensors(&params, q, k, v, o, lse); s != FA_STATUS_SUCCESS) return s;
  return on_device(device.ordinal, [&] {
    if (fa_status s = launch_bound(kernel, params, grid, stream); s != FA_STATUS_SUCCESS) {
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
      if (e == cudaSuccess) e = kernel.launch(params, grid, stream);
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
