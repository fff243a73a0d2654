// The launch attribute of a programmatic dependent launch (sm_90 and newer; see
// KernelEntry::launch), for the launchers compiled by nvcc (the CPU-only build's stand-in
// runtime header has no launch attributes).
#pragma once

#include <cuda_runtime_api.h>

namespace fa::cuda {

inline cudaLaunchAttribute programmatic_attribute() {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

}  // namespace fa::cuda
