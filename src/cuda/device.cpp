#include "cuda/device.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "core/kernel_config_text.hpp"
#include "core/status.hpp"
#include "cuda/registry.hpp"

namespace fa::cuda {

fa_status cuda_fail(cudaError_t e, char const* what) {
  return fail(FA_STATUS_CUDA_ERROR, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

namespace {

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

}  // namespace

fa_status on_device(int ordinal, FunctionRef<fa_status()> body) {
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

namespace {

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
    // With no driver at all the static runtime reports cudaErrorInsufficientDriver ("CUDA driver
    // version is insufficient"), which reads as "update the driver"; cudaDriverGetVersion() tells
    // the two apart: it succeeds with version 0 when libcuda.so.1 cannot be loaded.
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0) {
      return fail(FA_STATUS_NO_DEVICE,
                  "device = %d: no NVIDIA driver was found (libcuda.so.1 could not be loaded), so "
                  "no GPU can be used; FA_DEVICE_CPU (-1) runs on the CPU",
                  ordinal);
    }
    return fail(FA_STATUS_NO_DEVICE,
                "no usable CUDA device: cudaGetDeviceCount: %s (%s); FA_DEVICE_CPU (-1) runs on "
                "the CPU",
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

}  // namespace fa::cuda
