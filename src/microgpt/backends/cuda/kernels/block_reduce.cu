// Block-wide reductions shared by the row kernels (softmax, layer norm, loss).
//
// This file has no kernels of its own: the others `#include "block_reduce.cu"`.
// nvcc finds it beside them; the Python loader pastes it in place of the include
// line before handing a source to NVRTC, so CuPy's cache key covers it too.
//
// Rules for callers: blockDim.x is a multiple of 32 (at most 1024), every thread
// of the block makes the call, and `scratch` is a __shared__ float[32]. Every
// thread gets the result back.
#ifndef MICROGPT_BLOCK_REDUCE_CU
#define MICROGPT_BLOCK_REDUCE_CU

#define LOWEST_FLOAT (-3.402823466e+38f)
#define FULL_WARP 0xffffffffu

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_WARP, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_WARP, v, offset));
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by the previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : LOWEST_FLOAT);
}

#endif  // MICROGPT_BLOCK_REDUCE_CU
