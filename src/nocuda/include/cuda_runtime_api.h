// The CPU-only build's stand-in for the CUDA runtime header (FA_CUDA=OFF puts this directory on
// the include path, and only then). The API layer reaches the GPU side through src/cuda/*.hpp,
// whose declarations name four CUDA types; this declares them and nothing else, so those headers
// compile without a toolkit. No CUDA function is declared: a call would fail to compile, and
// src/nocuda/device_stub.cpp defines the fa::cuda functions the API layer calls.
#pragma once

#ifndef __cplusplus
#error "src/nocuda/include/cuda_runtime_api.h is for the library's C++ sources only"
#endif

// Opaque: the stubs only pass these through, never look inside.
typedef struct CUstream_st* cudaStream_t;
enum cudaError : int;
typedef enum cudaError cudaError_t;
struct cudaFuncAttributes;
struct dim3;
