// Launching a chosen kernel (and the split-KV combine after it), fa_merge_states, and timing.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernel_config_text.hpp"
#include "core/status.hpp"
#include "cuda/device.hpp"

namespace fa::cuda {

namespace {

// Checks the tensor and run-time pointers (non-NULL where used, aligned) and writes them into
// `params`.
fa_status bind_tensors(ForwardParams* params, Schedule const& schedule, LaunchTensors const& t) {
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
                  Index{"alibi_slopes", t.run.alibi_slopes}, Index{"sinks", t.run.sinks},
                  Index{"q_descale", t.run.q_descale}, Index{"k_descale", t.run.k_descale},
                  Index{"v_descale", t.run.v_descale}}) {
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
  params->q_descale = t.run.q_descale;
  params->k_descale = t.run.k_descale;
  params->v_descale = t.run.v_descale;
  // V's images where the workspace holds them (16-byte aligned: whole-block bulk copies), else
  // the kernel transposes V itself.
  params->v_images = schedule.v_image_bytes > 0 && t.workspace != nullptr &&
                             t.workspace_size >= schedule.v_image_bytes &&
                             reinterpret_cast<uintptr_t>(t.workspace) % 16 == 0
                         ? t.workspace
                         : nullptr;
  if (schedule.images_required && params->v_images == nullptr) {
    return fail(FA_STATUS_WORKSPACE_TOO_SMALL,
                "the kernel copies V transposed ahead of the run and needs a 16-byte aligned "
                "workspace of %zu bytes; got %zu bytes at %p",
                schedule.v_image_bytes, t.workspace == nullptr ? size_t{0} : t.workspace_size,
                t.workspace);
  }
  if (schedule.num_splits > 1) {
    // [num_splits, rows, heads_q, head_dim_v] floats, then [num_splits, heads_q, rows]: the
    // first part's size is a multiple of 8 floats (head_dim_v is), so the LSEs stay 32-byte
    // aligned.
    params->o_partial = static_cast<float*>(t.workspace);
    params->lse_partial = params->o_partial + size_t(schedule.num_splits) *
                                                  size_t(params->partial_rows) *
                                                  size_t(params->heads_q) * size_t(params->head_dim_v);
  }
  return FA_STATUS_SUCCESS;
}

// Launches with bound pointers; the caller has made the device current.
fa_status launch_bound(Device const& device, KernelEntry const& kernel,
                       ForwardParams const& params, Schedule const& schedule,
                       cudaStream_t stream) {
  dim3 const grid(static_cast<unsigned>(schedule.blocks));
  // Programmatic launches (sm_90): each kernel waits for the stream's previous one on the
  // device, so its launch and placement overlap that kernel's end (forward_kernel, combine).
  bool const programmatic = device.cc_major >= 9;
  if (cudaError_t e = kernel.launch(params, grid, schedule.general, programmatic, stream);
      e != cudaSuccess) {
    cudaGetLastError();  // the launch error is reported here, not left for the caller's next call
    return cuda_fail(e, ("launching " + short_name(kernel.config)).c_str());
  }
  if (schedule.num_splits > 1) {
    // o's type: the kernel's, or an FP8 kernel's 16-bit output type.
    DType const o_type = kernel.config.dtype != DType::kE4M3 ? kernel.config.dtype
                         : params.o_bf16                      ? DType::kBF16
                                                              : DType::kFP16;
    if (cudaError_t e = launch_combine(params, o_type, params.head_dim_v, programmatic, stream);
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
  if (fa_status s = bind_tensors(&params, schedule, t); s != FA_STATUS_SUCCESS) return s;
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
  if (fa_status s = bind_tensors(&params, schedule, t); s != FA_STATUS_SUCCESS) return s;
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
        e = kernel.launch(params, dim3(static_cast<unsigned>(schedule.blocks)), schedule.general,
                          false, stream);
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
