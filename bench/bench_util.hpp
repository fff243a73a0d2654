// What the benchmark programs share: failing loudly (a benchmark that cannot run exits with the
// reason) and reading comma-separated integer lists from the command line.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "flashattn.h"

namespace bench {

// The program's name in messages; each benchmark sets it first thing in main().
inline char const* program = "bench";

[[noreturn]] inline void die(std::string const& what) {
  std::fprintf(stderr, "%s: %s\n", program, what.c_str());
  std::exit(1);
}

inline void check(fa_status s, char const* what) {
  if (s != FA_STATUS_SUCCESS) {
    die(std::string(what) + ": " + fa_status_string(s) + ": " + fa_last_error_detail());
  }
}

inline void check_cuda(cudaError_t e, char const* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

// "1,8,32" -> {1, 8, 32}; values below `min_value` are refused.
inline std::vector<int> parse_list(char const* text, long min_value) {
  std::vector<int> values;
  for (char const* p = text; *p;) {
    char* end = nullptr;
    long v = std::strtol(p, &end, 10);
    if (end == p || v < min_value) die(std::string("bad list: ") + text);
    values.push_back(static_cast<int>(v));
    p = *end == ',' ? end + 1 : end;
  }
  return values;
}

}  // namespace bench
