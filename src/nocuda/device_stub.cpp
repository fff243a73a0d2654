// The GPU side of a CPU-only build (FA_CUDA=OFF): the functions of src/cuda/device.hpp and
// combine.hpp that the API layer calls, none of which can run without CUDA. open_device() refuses
// every ordinal, so no GPU context exists and the others are reached only through a broken
// invariant; they fail the same way rather than pretend.
#include "core/status.hpp"
#include "cuda/device.hpp"

namespace fa::cuda {

namespace {

constexpr char kWithoutCuda[] =
    "this libflashattn was built without CUDA (FA_CUDA=OFF), so it has no GPU kernels; "
    "FA_DEVICE_CPU (-1) runs on the CPU, and a build with the CUDA Toolkit runs on GPUs";

fa_status built_without_cuda() { return fail(FA_STATUS_NO_DEVICE, "%s", kWithoutCuda); }

}  // namespace

fa_status open_device(int ordinal, Device*) {
  return fail(FA_STATUS_NO_DEVICE, "device = %d: %s", ordinal, kWithoutCuda);
}

fa_status check_problem(Problem const&) { return built_without_cuda(); }

std::string cannot_run(KernelConfig const&, Problem const&) {
  return kWithoutCuda;
}

std::string cannot_run(Device const&, KernelConfig const&, Problem const&) { return kWithoutCuda; }

fa_status choose_kernel(Device const&, Problem const&, KernelEntry const**) {
  return built_without_cuda();
}

Schedule make_schedule(Device const&, KernelEntry const&, Problem const&, bool) { return {}; }

ForwardParams make_params(KernelConfig const&, Problem const&, Schedule const&) { return {}; }

fa_status launch(Device const&, KernelEntry const&, ForwardParams, Schedule const&,
                 LaunchTensors const&, cudaStream_t) {
  return built_without_cuda();
}

fa_status merge(Device const&, DType, MergeParams const&, cudaStream_t) {
  return built_without_cuda();
}

fa_status time_kernel(Device const&, KernelEntry const&, Problem const&, void const*, void const*,
                      void const*, void*, float*, cudaStream_t, int, float*) {
  return built_without_cuda();
}

int64_t warp_blocks(int64_t) { return 0; }

}  // namespace fa::cuda
