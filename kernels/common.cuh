// common.cuh: the few device helpers every family shares. Kept tiny on purpose:
// a lab should be readable without jumping through layers of templates.
#pragma once
#include <cuda_fp16.h>

#ifndef KL_INF
#define KL_INF __int_as_float(0x7f800000)
#endif

// Butterfly reductions across one warp: 5 rounds of shfl.sync.bfly, no shared
// memory and no __syncthreads (lanes of a warp execute together).
__device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Block-wide reduction built from warp reductions: each warp reduces in registers, lane 0
// parks its partial in shared memory (32 floats at most), warp 0 reduces those.
// Every thread gets the result. `scratch` needs 33 floats.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    v = MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
    if (lane == 0) scratch[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < nwarps ? scratch[lane] : (MAX ? -KL_INF : 0.0f);
        v = MAX ? warp_reduce_max(v) : warp_reduce_sum(v);
        if (lane == 0) scratch[32] = v;
    }
    __syncthreads();
    return scratch[32];
}
__device__ __forceinline__ float block_reduce_sum(float v, float* s) { return block_reduce<false>(v, s); }
__device__ __forceinline__ float block_reduce_max(float v, float* s) { return block_reduce<true>(v, s); }

// 128-bit views for vectorised loads and stores: one ld.global.v4 moves 16 bytes.
union Half8 {
    uint4 u;
    __half2 h2[4];
};

// A load through the read-only path (__ldg) or a plain one: the switch the ablation kernels use to
// undo one __ldg at a time.
template <bool LDG, typename T> __device__ __forceinline__ T ld(const T* p) { return LDG ? __ldg(p) : *p; }
