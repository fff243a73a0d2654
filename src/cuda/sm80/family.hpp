// The mma.sync family's answers to the family interface (cuda/family.hpp).
#pragma once

#include "cuda/family.hpp"

namespace fa::cuda::sm80 {

extern KernelFamily const kFamily;

}  // namespace fa::cuda::sm80
