// rmsnorm.cu: the RMSNorm kernels of the RMSNorm report (seed 003), before and after,
// and two steps beyond it. Every kernel computes, for each row r of length C,
//     y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w[:]
// with the sum of squares in fp32. One block per row: grid = R. The seed's single-row
// decode kernels (row_rmsnorm_f32, ...) are these kernels launched with R = 1, grid 1; its
// batched prefill kernels (row_rmsnorm_f32_dim, ...) are the same code with grid = R.
// Semantics (NumPy's, in float64): a NaN in a row makes the row NaN; a +-inf makes the
// mean inf, so finite elements give 0 and the inf gives NaN; an all-zero row gives 0.
// vec_ok = 0 (C not a multiple of the vector width, or a misaligned base) selects scalar
// loads: the seed's _dim kernels issued float4 loads from every row start regardless,
// which faults (misaligned address) as soon as C % 4 != 0.
#include <cub/block/block_reduce.cuh>
#include "common.cuh"

#ifndef RMS_BLOCK
#define RMS_BLOCK 128   // the seed's block size for steps 01-07
#endif

// The seed's "before" reduction: cub::BlockReduce, then thread 0 broadcasts through smem.
__device__ __forceinline__ float cub_block_sum(float v) {
    typedef cub::BlockReduce<float, RMS_BLOCK> BlockReduce;
    __shared__ typename BlockReduce::TempStorage temp;
    __shared__ float total;
    v = BlockReduce(temp).Sum(v);
    if (threadIdx.x == 0) total = v;
    __syncthreads();
    return total;
}

// The seed's "after" reduction: shuffles inside each warp, 4 partials (16 bytes of smem),
// warp 0 reduces them and lane 0 broadcasts through the same array.
__device__ __forceinline__ float shfl_block_sum(float v) {
    __shared__ float warp_sums[RMS_BLOCK / 32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_reduce_sum(v);
    if (lane == 0) warp_sums[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = warp_reduce_sum(lane < RMS_BLOCK / 32 ? warp_sums[lane] : 0.0f);
        if (lane == 0) warp_sums[0] = v;
    }
    __syncthreads();
    return warp_sums[0];
}

__device__ __forceinline__ float sumsq4(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }
__device__ __forceinline__ float4 mul4(float4 v, float s, float4 g) {
    return make_float4(s * v.x * g.x, s * v.y * g.y, s * v.z * g.z, s * v.w * g.w);
}

// === rmsnorm_01_f32_cub ===
// Why: the seed's starting point, row_rmsnorm_f32 / row_rmsnorm_f32_dim (fp32 in and weight).
// float4 loads are already there; the reduction is cub::BlockReduce<float, 128> plus a
// broadcast, plain pointers (the compiler must assume x, w and y may alias), and loops
// strided by the runtime blockDim.x. Two passes: the second re-reads x (mostly from L1).
// The first pass (this thread's share of sum(x^2): n4 float4, then a scalar tail) is shared
// with step 03.
__device__ __forceinline__ float f32_sumsq(const float* xr, int C, int n4) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) ss += sumsq4(reinterpret_cast<const float4*>(xr)[i]);
    for (int i = n4 * 4 + threadIdx.x; i < C; i += blockDim.x) ss += xr[i] * xr[i];
    return ss;
}

extern "C" __global__ void rmsnorm_01_f32_cub(const float* x, const float* w, float* y,
                                              int R, int C, float eps, int vec_ok) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    const int n4 = vec_ok ? C / 4 : 0;
    const float inv = rsqrtf(cub_block_sum(f32_sumsq(xr, C, n4)) / C + eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x)
        reinterpret_cast<float4*>(yr)[i] = mul4(reinterpret_cast<const float4*>(xr)[i], inv,
                                                reinterpret_cast<const float4*>(w)[i]);
    for (int i = n4 * 4 + threadIdx.x; i < C; i += blockDim.x) yr[i] = inv * xr[i] * w[i];
}

// === rmsnorm_02_f32_shfl ===
// Why: the seed's optimised row_rmsnorm_f32: (a) warp shuffles replace cub::BlockReduce
// (16 B of shared memory instead of CUB's TempStorage); (b) __restrict__ lets the compiler
// reorder and batch loads; (c) a compile-time stride (the seed's BLOCK_DIM template) with
// #pragma unroll keeps several float4 loads in flight; (d) __ldg for the shared weight.

// The seed's `#pragma unroll 4` on the compile-time-stride loops (unroll 1 on the runtime stride).
// Built with -DRMS_NO_UNROLL_PRAGMA it is left out: tests/test_compile.py shows the compiler then
// emits the same instructions, so given the compile-time stride the pragma is no change at all.
#ifdef RMS_NO_UNROLL_PRAGMA
#define RMS_UNROLL
#else
#define RMS_UNROLL _Pragma("unroll (FIXED ? 4 : 1)")
#endif

// Step 02's body, with each of its four changes as a switch, so the ablation kernels below can
// undo one at a time: CUB (the reduction), FIXED (compile-time stride + unroll 4), LDG (__ldg);
// __restrict__ is on the kernel's parameters. All switches on = step 02. Steps 04 and 06 have
// bodies with the same switches, and one more: the width of their weight or data accesses.
// ld<LDG>(p): __ldg(p) or a plain load (common.cuh).

// The first pass in either style (this thread's share of sum(x^2)); shared with step 04's body.
template <bool FIXED, bool LDG>
__device__ __forceinline__ float f32_sumsq_sw(const float* xr, int C, int n4) {
    const float4* xv = reinterpret_cast<const float4*>(xr);
    const int step = FIXED ? RMS_BLOCK : blockDim.x;
    float ss = 0.0f;
RMS_UNROLL
    for (int i = threadIdx.x; i < n4; i += step) ss += sumsq4(ld<LDG>(xv + i));
    for (int i = n4 * 4 + threadIdx.x; i < C; i += step) ss += xr[i] * xr[i];
    return ss;
}

template <bool CUB, bool FIXED, bool LDG>
__device__ __forceinline__ void rms_f32_body(const float* x, const float* w, float* y, int C, float eps, int vec_ok) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    const float4* xv = reinterpret_cast<const float4*>(xr);
    const int n4 = vec_ok ? C / 4 : 0;
    const int step = FIXED ? RMS_BLOCK : blockDim.x;
    const float ss = f32_sumsq_sw<FIXED, LDG>(xr, C, n4);
    const float inv = rsqrtf((CUB ? cub_block_sum(ss) : shfl_block_sum(ss)) / C + eps);
RMS_UNROLL
    for (int i = threadIdx.x; i < n4; i += step)
        reinterpret_cast<float4*>(yr)[i] = mul4(ld<LDG>(xv + i), inv, ld<LDG>(reinterpret_cast<const float4*>(w) + i));
    for (int i = n4 * 4 + threadIdx.x; i < C; i += step) yr[i] = inv * xr[i] * ld<LDG>(w + i);
}

extern "C" __global__ void rmsnorm_02_f32_shfl(const float* __restrict__ x, const float* __restrict__ w,
                                               float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32_body<false, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_02_ablate_cub ===
// Why: step 02 made four changes at once and the seed credits "the reduction". This is step 02
// with only the reduction undone (cub::BlockReduce again): its time over step 02's is what the
// warp-shuffle reduction alone is worth.
extern "C" __global__ void rmsnorm_02_ablate_cub(const float* __restrict__ x, const float* __restrict__ w,
                                                 float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32_body<true, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_02_ablate_runtime_stride ===
// Why: step 02 with only the loop undone: stride blockDim.x (unknown to the compiler) and no
// unrolling, so each thread has one 16-byte load in flight instead of up to four.
extern "C" __global__ void rmsnorm_02_ablate_runtime_stride(const float* __restrict__ x, const float* __restrict__ w,
                                                            float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32_body<false, false, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_02_ablate_no_ldg ===
// Why: step 02 without __ldg, keeping __restrict__: the compiler may still choose the
// read-only path by itself (the PTX says whether it did).
extern "C" __global__ void rmsnorm_02_ablate_no_ldg(const float* __restrict__ x, const float* __restrict__ w,
                                                    float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32_body<false, true, false>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_02_ablate_plain ===
// Why: step 02 without __ldg and without __restrict__ (plain pointers, as step 01): together
// with the row above, it separates what __restrict__ is worth from what __ldg is worth.
extern "C" __global__ void rmsnorm_02_ablate_plain(const float* x, const float* w, float* y,
                                                   int R, int C, float eps, int vec_ok) {
    rms_f32_body<false, true, false>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_03_f32_fp16w_cub ===
// Why: the AWQ models keep activations in fp32 and the weight in fp16 (the seed's
// row_rmsnorm_f32_fp16w). Before: the weight comes in as four scalar 16-bit loads per
// float4 of x; 2 of every 16 bytes a load instruction could move.
extern "C" __global__ void rmsnorm_03_f32_fp16w_cub(const float* x, const __half* w, float* y,
                                                    int R, int C, float eps, int vec_ok) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    const int n4 = vec_ok ? C / 4 : 0;
    const float inv = rsqrtf(cub_block_sum(f32_sumsq(xr, C, n4)) / C + eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const int b = i * 4;
        const float4 g = make_float4(__half2float(w[b]), __half2float(w[b + 1]),
                                     __half2float(w[b + 2]), __half2float(w[b + 3]));
        reinterpret_cast<float4*>(yr)[i] = mul4(reinterpret_cast<const float4*>(xr)[i], inv, g);
    }
    for (int i = n4 * 4 + threadIdx.x; i < C; i += blockDim.x) yr[i] = inv * xr[i] * __half2float(w[i]);
}

// === rmsnorm_04_f32_fp16w_uint2 ===
// Why: the seed's optimised row_rmsnorm_f32_fp16w. Five changes to step 03: (a) one 64-bit
// uint2 load brings the 4 halves of weight that pair with a float4 of x (WIDE), and the four
// of step 02: (b) warp shuffles (CUB off), (c) compile-time stride + unroll 4 (FIXED), (d) __ldg
// (LDG), (e) __restrict__ on the kernel's parameters. Each is a switch of the body; the
// ablation kernels below are step 04 with one of them undone. All switches on = step 04.
template <bool WIDE, bool CUB, bool FIXED, bool LDG>
__device__ __forceinline__ void rms_f32w_body(const float* x, const __half* w, float* y, int C, float eps, int vec_ok) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    const float4* xv = reinterpret_cast<const float4*>(xr);
    const int n4 = vec_ok ? C / 4 : 0;
    const int step = FIXED ? RMS_BLOCK : blockDim.x;
    const float ss = f32_sumsq_sw<FIXED, LDG>(xr, C, n4);
    const float inv = rsqrtf((CUB ? cub_block_sum(ss) : shfl_block_sum(ss)) / C + eps);
RMS_UNROLL
    for (int i = threadIdx.x; i < n4; i += step) {
        float4 g;
        if (WIDE) {
            const uint2 raw = ld<LDG>(reinterpret_cast<const uint2*>(w) + i);   // 4 halves, one load
            const float2 g01 = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
            const float2 g23 = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
            g = make_float4(g01.x, g01.y, g23.x, g23.y);
        } else {                                                                 // 4 loads of 2 bytes
            const int b = i * 4;
            g = make_float4(__half2float(ld<LDG>(w + b)), __half2float(ld<LDG>(w + b + 1)),
                            __half2float(ld<LDG>(w + b + 2)), __half2float(ld<LDG>(w + b + 3)));
        }
        reinterpret_cast<float4*>(yr)[i] = mul4(ld<LDG>(xv + i), inv, g);
    }
    for (int i = n4 * 4 + threadIdx.x; i < C; i += step) yr[i] = inv * xr[i] * __half2float(ld<LDG>(w + i));
}

extern "C" __global__ void rmsnorm_04_f32_fp16w_uint2(const float* __restrict__ x, const __half* __restrict__ w,
                                                      float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32w_body<true, false, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_04_ablate_scalar_w ===
// Why: step 04 with only the weight's width undone: four 16-bit loads per float4 of x, as step
// 03. Its time over step 04's is what the uint2 load alone is worth (the seed's whole claim).
extern "C" __global__ void rmsnorm_04_ablate_scalar_w(const float* __restrict__ x, const __half* __restrict__ w,
                                                      float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32w_body<false, false, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_04_ablate_cub ===
// Why: step 04 with only the reduction undone (cub::BlockReduce, as step 03).
extern "C" __global__ void rmsnorm_04_ablate_cub(const float* __restrict__ x, const __half* __restrict__ w,
                                                 float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32w_body<true, true, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_04_ablate_runtime_stride ===
// Why: step 04 with only the loops undone: stride blockDim.x and no unrolling, as step 03.
extern "C" __global__ void rmsnorm_04_ablate_runtime_stride(const float* __restrict__ x, const __half* __restrict__ w,
                                                            float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32w_body<true, false, false, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_04_ablate_no_ldg ===
// Why: step 04 without __ldg, __restrict__ kept (the compiler may pick the read-only path itself).
extern "C" __global__ void rmsnorm_04_ablate_no_ldg(const float* __restrict__ x, const __half* __restrict__ w,
                                                    float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_f32w_body<true, false, true, false>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_04_ablate_plain ===
// Why: step 04 without __ldg and without __restrict__ (plain pointers, as step 03): against the
// row above, what __restrict__ is worth; the row above against step 04, what __ldg is.
extern "C" __global__ void rmsnorm_04_ablate_plain(const float* x, const __half* w, float* y,
                                                   int R, int C, float eps, int vec_ok) {
    rms_f32w_body<true, false, true, false>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_05_fp16_half2_cub ===
// Why: the fp16 models' path, before (the seed's row_rmsnorm_pure_fp16): fp16 in, weight
// and out, read as half2, 4 bytes per load instruction. The math is fp32 (a sum of
// 4096 squares in fp16 overflows at 65504).
extern "C" __global__ void rmsnorm_05_fp16_half2_cub(const __half* x, const __half* w, __half* y,
                                                     int R, int C, float eps, int vec_ok) {
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    const int n2 = vec_ok ? C / 2 : 0;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        const float2 v = __half22float2(reinterpret_cast<const __half2*>(xr)[i]);
        ss += v.x * v.x + v.y * v.y;
    }
    for (int i = n2 * 2 + threadIdx.x; i < C; i += blockDim.x) { const float v = __half2float(xr[i]); ss += v * v; }
    const float inv = rsqrtf(cub_block_sum(ss) / C + eps);
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        const float2 v = __half22float2(reinterpret_cast<const __half2*>(xr)[i]);
        const float2 g = __half22float2(reinterpret_cast<const __half2*>(w)[i]);
        reinterpret_cast<__half2*>(yr)[i] = __floats2half2_rn(inv * v.x * g.x, inv * v.y * g.y);
    }
    for (int i = n2 * 2 + threadIdx.x; i < C; i += blockDim.x)
        yr[i] = __float2half_rn(inv * __half2float(xr[i]) * __half2float(w[i]));
}

// === rmsnorm_06_fp16_uint4 ===
// Why: the seed's optimised row_rmsnorm_pure_fp16, which it credits with its largest win
// (2.13x) to the load width. Five changes to step 05, each a switch of the body below: (a) one
// uint4 moves 8 halves (16 bytes) per load and store instead of a half2's 2 (WIDE); (b) warp
// shuffles (CUB off); (c) compile-time stride + unroll 4 (FIXED); (d) __ldg (LDG); (e)
// __restrict__ on the kernel's parameters. The ablation kernels below (and step 07, for (d)
// and (e)) are step 06 with one change undone. All switches on = step 06.
template <bool WIDE> struct HalfVec;                     // one access: 8 halves (uint4) or 2 (half2)
template <> struct HalfVec<true> { typedef uint4 raw; static constexpr int H2 = 4; };
template <> struct HalfVec<false> { typedef __half2 raw; static constexpr int H2 = 1; };

template <bool WIDE, bool CUB, bool FIXED, bool LDG>
__device__ __forceinline__ void rms_fp16_body(const __half* x, const __half* w, __half* y,
                                              int C, float eps, int vec_ok) {
    typedef typename HalfVec<WIDE>::raw raw;
    constexpr int H2 = HalfVec<WIDE>::H2, H = 2 * H2;   // half2s and halves per access
    union U { raw u; __half2 h2[H2]; };
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    const raw* xv = reinterpret_cast<const raw*>(xr);
    const int n = vec_ok ? C / H : 0;
    const int step = FIXED ? RMS_BLOCK : blockDim.x;
    float ss = 0.0f;
RMS_UNROLL
    for (int i = threadIdx.x; i < n; i += step) {
        U v;
        v.u = ld<LDG>(xv + i);
#pragma unroll
        for (int j = 0; j < H2; ++j) { const float2 f = __half22float2(v.h2[j]); ss += f.x * f.x + f.y * f.y; }
    }
    for (int i = n * H + threadIdx.x; i < C; i += step) { const float v = __half2float(xr[i]); ss += v * v; }
    const float inv = rsqrtf((CUB ? cub_block_sum(ss) : shfl_block_sum(ss)) / C + eps);
RMS_UNROLL
    for (int i = threadIdx.x; i < n; i += step) {
        U v, g, o;
        v.u = ld<LDG>(xv + i);
        g.u = ld<LDG>(reinterpret_cast<const raw*>(w) + i);
#pragma unroll
        for (int j = 0; j < H2; ++j) {
            const float2 a = __half22float2(v.h2[j]), b = __half22float2(g.h2[j]);
            o.h2[j] = __floats2half2_rn(inv * a.x * b.x, inv * a.y * b.y);
        }
        reinterpret_cast<raw*>(yr)[i] = o.u;
    }
    for (int i = n * H + threadIdx.x; i < C; i += step)
        yr[i] = __float2half_rn(inv * __half2float(xr[i]) * __half2float(w[i]));
}

extern "C" __global__ void rmsnorm_06_fp16_uint4(const __half* __restrict__ x, const __half* __restrict__ w,
                                                 __half* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_fp16_body<true, false, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_06_ablate_half2 ===
// Why: step 06 with only the width undone: half2 loads and stores (4 bytes, as step 05), with
// the shuffles, the unrolled compile-time stride, __ldg and __restrict__ kept. Its time over
// step 06's is what the 16-byte access alone is worth (the seed's credited cause).
extern "C" __global__ void rmsnorm_06_ablate_half2(const __half* __restrict__ x, const __half* __restrict__ w,
                                                   __half* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_fp16_body<false, false, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_06_ablate_cub ===
// Why: step 06 with only the reduction undone (cub::BlockReduce, as step 05).
extern "C" __global__ void rmsnorm_06_ablate_cub(const __half* __restrict__ x, const __half* __restrict__ w,
                                                 __half* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_fp16_body<true, true, true, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_06_ablate_runtime_stride ===
// Why: step 06 with only the loops undone: stride blockDim.x and no unrolling, as step 05.
extern "C" __global__ void rmsnorm_06_ablate_runtime_stride(const __half* __restrict__ x, const __half* __restrict__ w,
                                                            __half* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_fp16_body<true, false, false, true>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_07_fp16_restrict_no_ldg ===
// Why: the seed credits __ldg with keeping the shared weight out of L1. One change at a time:
// this is step 06 without the __ldg calls, __restrict__ kept. With const __restrict__ pointers
// the compiler may use the read-only path on its own: the PTX shows whether it did.
extern "C" __global__ void rmsnorm_07_fp16_restrict_no_ldg(const __half* __restrict__ x, const __half* __restrict__ w,
                                                           __half* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_fp16_body<true, false, true, false>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_07_fp16_uint4_no_ldg ===
// Why: the second change: __restrict__ removed as well (plain pointers, plain loads). The PTX
// shows ld.global where step 06 has ld.global.nc (the read-only path); the timing against
// the step above is what __restrict__ is worth, the step above against step 06 what __ldg is.
extern "C" __global__ void rmsnorm_07_fp16_uint4_no_ldg(const __half* x, const __half* w, __half* y,
                                                        int R, int C, float eps, int vec_ok) {
    rms_fp16_body<true, false, true, false>(x, w, y, C, eps, vec_ok);
}

// === rmsnorm_08_f32_onepass ===
// Why: (beyond the seed) steps 02-06 read x twice and lean on L1 to make the second read
// cheap. Here each thread keeps its slice of the row in registers (RMS_PER_THREAD loads of
// 16 bytes), so x is read from memory exactly once: 1 read + 1 write, the floor. The
// launcher sizes the block to the row (C = 4096 fp16: 128 threads x 4 uint4). One body
// serves fp32 and fp16 through V16<T>, and with ADD = true it is step 09's fused kernel.
// Rows too long for the registers, or not vector-aligned, take a scalar two-pass path.
#ifndef RMS_PER_THREAD
#define RMS_PER_THREAD 4
#endif

template <typename T> struct V16;   // 16 bytes of T <-> N floats
template <> struct V16<float> {
    static constexpr int N = 4;
    static __device__ __forceinline__ void unpack(uint4 u, float* f) {
        f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ uint4 pack(const float* f) {
        return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
    }
    static __device__ __forceinline__ float to_f(float v) { return v; }
    static __device__ __forceinline__ float from_f(float v) { return v; }
    static __device__ __forceinline__ float round(float v) { return v; }
};
template <> struct V16<__half> {
    static constexpr int N = 8;
    static __device__ __forceinline__ void unpack(uint4 u, float* f) {
        Half8 h;
        h.u = u;
#pragma unroll
        for (int j = 0; j < 4; ++j) { const float2 p = __half22float2(h.h2[j]); f[2 * j] = p.x; f[2 * j + 1] = p.y; }
    }
    static __device__ __forceinline__ uint4 pack(const float* f) {
        Half8 h;
#pragma unroll
        for (int j = 0; j < 4; ++j) h.h2[j] = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
        return h.u;
    }
    static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
    static __device__ __forceinline__ float round(float v) { return __half2float(__float2half_rn(v)); }
};

// y = rmsnorm(x) * w, or (ADD) h = x + res written out and y = rmsnorm(h) * w.
// The row stays in registers as raw 16-byte words (unpacked when used: fewer registers, so
// more blocks per SM). The first 16 bytes of weight per thread are loaded before the
// reduction, so a decode row (one load per thread) has no DRAM round trip left after the
// barrier; prefetching all of it would cost 4x the registers for no gain at large batch.
template <typename T, bool ADD>
__device__ __forceinline__ void rms_onepass(const T* __restrict__ x, const T* __restrict__ res,
                                            const T* __restrict__ w, T* __restrict__ h, T* __restrict__ y,
                                            int C, float eps, int vec_ok) {
    using V = V16<T>;
    constexpr int N = V::N;
    __shared__ float scratch[33];
    const size_t base = (size_t)blockIdx.x * C;
    const int nv = C / N;
    if (vec_ok && nv <= RMS_PER_THREAD * (int)blockDim.x) {
        const uint4* xv = reinterpret_cast<const uint4*>(x + base);
        const uint4* wv = reinterpret_cast<const uint4*>(w);
        uint4 raw[RMS_PER_THREAD], w0;                   // this thread's slice of the row
#pragma unroll
        for (int k = 0; k < RMS_PER_THREAD; ++k) {       // every load in flight at once
            const int g = threadIdx.x + k * blockDim.x;
            if (g < nv) raw[k] = __ldg(xv + g);
        }
        if ((int)threadIdx.x < nv) w0 = __ldg(wv + threadIdx.x);
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < RMS_PER_THREAD; ++k) {
            const int g = threadIdx.x + k * blockDim.x;
            if (g < nv) {
                float v[N];
                V::unpack(raw[k], v);
                if (ADD) {
                    float r[N];
                    V::unpack(__ldg(reinterpret_cast<const uint4*>(res + base) + g), r);
#pragma unroll
                    for (int j = 0; j < N; ++j) v[j] += r[j];
                    raw[k] = V::pack(v);                 // h, rounded to T, is what gets normalised
                    reinterpret_cast<uint4*>(h + base)[g] = raw[k];
                    V::unpack(raw[k], v);
                }
#pragma unroll
                for (int j = 0; j < N; ++j) ss += v[j] * v[j];
            }
        }
        const float inv = rsqrtf(block_reduce_sum(ss, scratch) / C + eps);
#pragma unroll
        for (int k = 0; k < RMS_PER_THREAD; ++k) {
            const int g = threadIdx.x + k * blockDim.x;
            if (g < nv) {
                float v[N], wf[N];
                V::unpack(raw[k], v);
                V::unpack(k == 0 ? w0 : __ldg(wv + g), wf);
#pragma unroll
                for (int j = 0; j < N; ++j) v[j] = inv * v[j] * wf[j];
                reinterpret_cast<uint4*>(y + base)[g] = V::pack(v);
            }
        }
    } else {                                             // scalar, two passes
        float ss = 0.0f;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            float v = V::to_f(x[base + i]);
            if (ADD) { v = V::round(v + V::to_f(res[base + i])); h[base + i] = V::from_f(v); }
            ss += v * v;
        }
        const float inv = rsqrtf(block_reduce_sum(ss, scratch) / C + eps);
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            const float v = V::to_f(ADD ? h[base + i] : x[base + i]);   // this thread wrote h[i]
            y[base + i] = V::from_f(inv * v * V::to_f(w[i]));
        }
    }
}

extern "C" __global__ void rmsnorm_08_f32_onepass(const float* __restrict__ x, const float* __restrict__ w,
                                                  float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_onepass<float, false>(x, nullptr, w, nullptr, y, C, eps, vec_ok);
}

// === rmsnorm_08_fp16_onepass ===
// Why: the same one-pass body for fp16 in, weight and out: 8 halves per uint4.
extern "C" __global__ void rmsnorm_08_fp16_onepass(const __half* __restrict__ x, const __half* __restrict__ w,
                                                   __half* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_onepass<__half, false>(x, nullptr, w, nullptr, y, C, eps, vec_ok);
}

// === rmsnorm_09_fused_add_f32 ===
// Why: (beyond the seed) every RMSNorm in a decoder layer follows a residual add. Done
// separately that is add (read x, read res, write h) + RMSNorm (read h, write y): 5 passes
// and 2 launches. Fused, as serving engines do: h = x + res is formed in registers, written
// once for the next residual, and normalised from the same registers: 4 passes, 1 launch.
// h is rounded to T before the sum of squares, exactly as the separate kernels see it.
extern "C" __global__ void rmsnorm_09_fused_add_f32(const float* __restrict__ x, const float* __restrict__ res,
                                                    const float* __restrict__ w, float* __restrict__ h,
                                                    float* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_onepass<float, true>(x, res, w, h, y, C, eps, vec_ok);
}

// === rmsnorm_09_fused_add_fp16 ===
// Why: the fused kernel for the fp16 models (Qwen3-8B-fp16, Qwen3-VL): 8 halves per load.
extern "C" __global__ void rmsnorm_09_fused_add_fp16(const __half* __restrict__ x, const __half* __restrict__ res,
                                                     const __half* __restrict__ w, __half* __restrict__ h,
                                                     __half* __restrict__ y, int R, int C, float eps, int vec_ok) {
    rms_onepass<__half, true>(x, res, w, h, y, C, eps, vec_ok);
}
