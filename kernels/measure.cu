// measure.cu: the reference kernels of lab 00. They measure the device, not an
// algorithm: an empty launch, and the two roofs every later lab is judged against.
#include "common.cuh"

// === measure_00_empty ===
// Why: the smallest possible kernel. Its time is pure launch overhead, the floor
// under any kernel, however little data it touches (a single decode-time row).
extern "C" __global__ void measure_00_empty() {}

// === measure_01_copy ===
// Why: the copy roof. A grid-stride float4 copy reads n*4 and writes n*4 bytes:
// the best any kernel that reads its input once and writes its output once can do.
extern "C" __global__ void measure_01_copy(const float4* __restrict__ src, float4* __restrict__ dst,
                                           long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x)
        dst[i] = __ldg(src + i);
}

// === measure_02_read ===
// Why: the read roof. A streaming sum that writes one float per block: reads only,
// the ceiling for kernels whose output is tiny (GEMV, reductions).
extern "C" __global__ void measure_02_read(const float4* __restrict__ src, float* __restrict__ partial,
                                           long long n4) {
    __shared__ float scratch[33];
    float acc = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        const float4 v = __ldg(src + i);
        acc += (v.x + v.y) + (v.z + v.w);
    }
    acc = block_reduce_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// === measure_03_fma ===
// Why: the compute roof for the roofline. Each thread runs independent chains of
// fused multiply-adds in registers (2 FLOP each) and touches memory once at the end.
#define FMA_CHAINS 8
extern "C" __global__ void measure_03_fma(float* __restrict__ out, int iters, float a, float b) {
    float v[FMA_CHAINS];
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; ++k) v[k] = threadIdx.x + k;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < FMA_CHAINS; ++k) v[k] = fmaf(v[k], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; ++k) s += v[k];
    if (s == 12345.0f) out[0] = s;   // keeps the chains alive, practically never stores
}
