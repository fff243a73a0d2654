// The registry of every kernel compiled into this build.
#pragma once

#include <map>

#include "cuda/kernel_entry.hpp"

namespace fa::cuda {

// The kernels by config, in KernelConfig order. A class rather than an alias of the map, so that
// kernel_entry.hpp can declare it for the generated kernel files without <map>.
struct Registry : std::map<KernelConfig, KernelEntry> {};

// Every kernel compiled into this build. Built on first use, then immutable.
Registry const& registry();

}  // namespace fa::cuda
