// The sm90 family's answers to the family interface (cuda/family.hpp).
#pragma once

#include "cuda/family.hpp"

namespace fa::cuda::sm90 {

extern KernelFamily const kFamily;

}  // namespace fa::cuda::sm90
