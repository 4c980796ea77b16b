// softmax.cu: the softmax ladder of the tutorial (seed 001), one marked step each.
// Every kernel computes y[r, :] = softmax(x[r, :]) over rows of length C, row-major
// and contiguous. Semantics shared by every safe step, matching NumPy and torch:
//   a NaN anywhere in a row, or a +inf, makes the whole row NaN;
//   a row that is entirely -inf gives NaN (0/0); -inf elements elsewhere give 0.
#include "common.cuh"

// Guarded exp(v - m): an element that is -inf contributes exactly 0, even when the
// running max m is still -inf (where v - m would be NaN).
__device__ __forceinline__ float exp_sub(float v, float m) {
    return v == -KL_INF ? 0.0f : expf(v - m);
}

// === softmax_01_naive ===
// Why: the formula translated literally, as the tutorial's softmax_naive_kernel does.
// One thread sums exp(x) for the whole row while the others wait, and nothing
// subtracts the max: any x >= 89 overflows expf to inf and the row becomes inf/inf = NaN.
extern "C" __global__ void softmax_01_naive(const float* x, float* y, int R, int C) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    __shared__ float s_sum;
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < C; ++i) s += expf(xr[i]);   // serial, uncoalesced
        s_sum = s;
    }
    __syncthreads();
    const float s = s_sum;
    for (int i = threadIdx.x; i < C; i += blockDim.x) yr[i] = expf(xr[i]) / s;
}

// === softmax_02_safe_smem ===
// Why: subtracting the row max makes every exponent <= 0, so nothing overflows
// (the tutorial's softmax_safe_v1_kernel), and all threads now share the work with
// a shared-memory tree reduction. Cost: three passes over global memory (max, sum,
// write), and a __syncthreads() at every level of each tree (8 levels for 256 threads).
#define SAFE_BLOCK 256
__device__ __forceinline__ float tree_reduce(float v, float* s, bool is_max) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (int stride = SAFE_BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            float o = s[threadIdx.x + stride];
            s[threadIdx.x] = is_max ? fmaxf(s[threadIdx.x], o) : s[threadIdx.x] + o;
        }
        __syncthreads();
    }
    float r = s[0];
    __syncthreads();   // everyone has read s[0] before the next tree reuses s
    return r;
}

extern "C" __global__ void softmax_02_safe_smem(const float* x, float* y, int R, int C) {
    __shared__ float s[SAFE_BLOCK];
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    float m = -KL_INF;
    for (int i = threadIdx.x; i < C; i += SAFE_BLOCK) m = fmaxf(m, xr[i]);      // pass 1
    m = tree_reduce(m, s, true);
    float d = 0.0f;
    for (int i = threadIdx.x; i < C; i += SAFE_BLOCK) d += expf(xr[i] - m);    // pass 2
    d = tree_reduce(d, s, false);
    for (int i = threadIdx.x; i < C; i += SAFE_BLOCK) yr[i] = expf(xr[i] - m) / d;  // pass 3
}

// === softmax_03_warp_shuffle ===
// Why: the tree in shared memory costs a barrier per level and idles most lanes.
// Warp shuffles (shfl.sync.bfly) reduce 32 values in registers in 5 steps with no
// barrier; only one small cross-warp step goes through 33 floats of shared memory
// (2 barriers per reduction instead of 9). Still three passes over the row.
extern "C" __global__ void softmax_03_warp_shuffle(const float* x, float* y, int R, int C) {
    __shared__ float scratch[33];
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    float m = -KL_INF;
    for (int i = threadIdx.x; i < C; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_reduce_max(m, scratch);
    float d = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) d += expf(xr[i] - m);
    d = block_reduce_sum(d, scratch);
    for (int i = threadIdx.x; i < C; i += blockDim.x) yr[i] = expf(xr[i] - m) / d;
}

// === softmax_03_warp_per_row ===
// Why: for short rows (attention over a few hundred keys) a whole block per row
// leaves threads idle and pays the cross-warp step for nothing. One warp per row
// needs no shared memory and no __syncthreads at all; several rows share a block.
extern "C" __global__ void softmax_03_warp_per_row(const float* x, float* y, int R, int C) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= R) return;   // whole warps leave together, so the shuffles stay full
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;
    float m = -KL_INF;
    for (int i = lane; i < C; i += 32) m = fmaxf(m, xr[i]);
    m = warp_reduce_max(m);
    float d = 0.0f;
    for (int i = lane; i < C; i += 32) d += expf(xr[i] - m);
    d = warp_reduce_sum(d);
    for (int i = lane; i < C; i += 32) yr[i] = expf(xr[i] - m) / d;
}

// === softmax_04_online ===
// Why: the max pass exists only to find the reference point for exp. Online softmax
// keeps a running (m, d): when a larger m' arrives, the sum so far is rescaled by
// exp(m - m'). Partial states from threads and warps merge with the same rule, so
// one statistics pass replaces two: 2 reads + 1 write of the row instead of 3 + 1.
struct MD { float m, d; };

__device__ __forceinline__ MD md_combine(MD a, MD b) {
    MD r;
    r.m = fmaxf(a.m, b.m);
    // a state whose max is still -inf holds d = 0 (or NaN: NaN * 0 stays NaN)
    const float fa = a.m == -KL_INF ? 0.0f : expf(a.m - r.m);
    const float fb = b.m == -KL_INF ? 0.0f : expf(b.m - r.m);
    r.d = a.d * fa + b.d * fb;
    return r;
}

__device__ __forceinline__ MD warp_reduce_md(MD v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        MD o;
        o.m = __shfl_xor_sync(0xffffffffu, v.m, offset);
        o.d = __shfl_xor_sync(0xffffffffu, v.d, offset);
        v = md_combine(v, o);
    }
    return v;
}

__device__ __forceinline__ MD block_reduce_md(MD v) {
    __shared__ float sm[32], sd[32];
    __shared__ MD total;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    v = warp_reduce_md(v);
    if (lane == 0) { sm[wid] = v.m; sd[wid] = v.d; }
    __syncthreads();
    if (wid == 0) {
        MD w = lane < nwarps ? MD{sm[lane], sd[lane]} : MD{-KL_INF, 0.0f};
        w = warp_reduce_md(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}

// Fold one element into a running state: the per-element form of md_combine.
__device__ __forceinline__ MD md_push(MD s, float v) {
    return md_combine(s, MD{v, v == -KL_INF ? 0.0f : 1.0f});
}

extern "C" __global__ void softmax_04_online(const float* x, float* y, int R, int C) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    MD s = {-KL_INF, 0.0f};
    for (int i = threadIdx.x; i < C; i += blockDim.x) s = md_push(s, xr[i]);   // pass 1
    s = block_reduce_md(s);
    const float inv = 1.0f / s.d;
    for (int i = threadIdx.x; i < C; i += blockDim.x) yr[i] = exp_sub(xr[i], s.m) * inv;  // pass 2
}

// === softmax_05_online_vec4 ===
// Why: step 04 issues one 4-byte load per element. float4 loads (ld.global.nc.v4.f32)
// move 16 bytes per instruction, a quarter of the load instructions. And when the row
// fits in the block's registers (VEC_PER_THREAD float4 per thread), it is read from
// memory exactly once: 1 read + 1 write, the floor for softmax. Longer rows stream
// twice; the second read mostly hits L2. Rows whose length is not a multiple of 4, or
// whose base is not 16-byte aligned, use scalar loads (vec_ok = 0, chosen by the launcher).
#define VEC_PER_THREAD 8

__device__ __forceinline__ float4 load4(const float* __restrict__ p, int g, int C, int vec_ok) {
    const float NI = -KL_INF;
    if (vec_ok) return g < (C >> 2) ? __ldg(reinterpret_cast<const float4*>(p) + g)
                                    : make_float4(NI, NI, NI, NI);
    const int i = g * 4;
    return make_float4(i < C ? __ldg(p + i) : NI, i + 1 < C ? __ldg(p + i + 1) : NI,
                       i + 2 < C ? __ldg(p + i + 2) : NI, i + 3 < C ? __ldg(p + i + 3) : NI);
}

__device__ __forceinline__ void store4(float* __restrict__ p, int g, int C, int vec_ok, float4 v) {
    if (vec_ok) { if (g < (C >> 2)) reinterpret_cast<float4*>(p)[g] = v; return; }
    const int i = g * 4;
    if (i < C) p[i] = v.x;
    if (i + 1 < C) p[i + 1] = v.y;
    if (i + 2 < C) p[i + 2] = v.z;
    if (i + 3 < C) p[i + 3] = v.w;
}

// Fold 4 elements at once: one rescale per float4 instead of one per element.
__device__ __forceinline__ MD md_push4(MD s, float4 v) {
    const float m4 = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    MD t;
    t.m = m4;
    t.d = exp_sub(v.x, m4) + exp_sub(v.y, m4) + exp_sub(v.z, m4) + exp_sub(v.w, m4);
    return md_combine(s, t);
}

__device__ __forceinline__ float4 softmax4(float4 v, MD s, float inv) {
    return make_float4(exp_sub(v.x, s.m) * inv, exp_sub(v.y, s.m) * inv,
                       exp_sub(v.z, s.m) * inv, exp_sub(v.w, s.m) * inv);
}

extern "C" __global__ void softmax_05_online_vec4(const float* __restrict__ x, float* __restrict__ y, int R, int C, int vec_ok) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    const int nvec = (C + 3) >> 2;
    MD s = {-KL_INF, 0.0f};
    if (nvec <= VEC_PER_THREAD * (int)blockDim.x) {
        float4 v[VEC_PER_THREAD];                       // the row, cached in registers
#pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k) {
            v[k] = load4(xr, threadIdx.x + k * blockDim.x, C, vec_ok);
            s = md_push4(s, v[k]);
        }
        s = block_reduce_md(s);
        const float inv = 1.0f / s.d;
#pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k)
            store4(yr, threadIdx.x + k * blockDim.x, C, vec_ok, softmax4(v[k], s, inv));
    } else {
        for (int g = threadIdx.x; g < nvec; g += blockDim.x) s = md_push4(s, load4(xr, g, C, vec_ok));
        s = block_reduce_md(s);
        const float inv = 1.0f / s.d;
        for (int g = threadIdx.x; g < nvec; g += blockDim.x)
            store4(yr, g, C, vec_ok, softmax4(load4(xr, g, C, vec_ok), s, inv));
    }
}

// === softmax_06_fp16_vec8 ===
// Why: inference keeps activations in fp16. Half the bytes per element means half the
// time for a memory-bound kernel, if each load still moves 16 bytes: one uint4 carries
// 8 halves. The math stays in fp32 (exp of a half would lose the sum's precision).
// Same structure as step 05: a register-cached single pass when the row fits, the row
// kept packed as halves (4 registers per 8 elements) until it is normalised.
#define H8_PER_THREAD 4

// Raw 16-byte loads; the halves stay packed in registers (4 per uint4) until used.
__device__ __forceinline__ uint4 load8(const __half* __restrict__ p, int g, int C, int vec_ok) {
    Half8 h;
    if (vec_ok) {
        h.u = g < (C >> 3) ? __ldg(reinterpret_cast<const uint4*>(p) + g) : make_uint4(0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u);
        return h.u;   // 0xfc00 is -inf in fp16: padding contributes nothing
    }
    const __half NI = __ushort_as_half(0xfc00);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int i = g * 8 + 2 * j;
        h.h2[j] = __halves2half2(i < C ? p[i] : NI, i + 1 < C ? p[i + 1] : NI);
    }
    return h.u;
}

__device__ __forceinline__ void store8(__half* __restrict__ p, int g, int C, int vec_ok, uint4 v) {
    Half8 h;
    h.u = v;
    if (vec_ok) { if (g < (C >> 3)) reinterpret_cast<uint4*>(p)[g] = v; return; }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int i = g * 8 + 2 * j;
        if (i < C) p[i] = __low2half(h.h2[j]);
        if (i + 1 < C) p[i + 1] = __high2half(h.h2[j]);
    }
}

__device__ __forceinline__ MD md_push8(MD s, uint4 v) {
    Half8 h;
    h.u = v;
    const float2 a = __half22float2(h.h2[0]), b = __half22float2(h.h2[1]);
    const float2 c = __half22float2(h.h2[2]), d = __half22float2(h.h2[3]);
    return md_push4(md_push4(s, make_float4(a.x, a.y, b.x, b.y)), make_float4(c.x, c.y, d.x, d.y));
}

__device__ __forceinline__ uint4 softmax8(uint4 v, MD s, float inv) {
    Half8 h;
    h.u = v;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(h.h2[j]);
        h.h2[j] = __floats2half2_rn(exp_sub(f.x, s.m) * inv, exp_sub(f.y, s.m) * inv);
    }
    return h.u;
}

extern "C" __global__ void softmax_06_fp16_vec8(const __half* __restrict__ x, __half* __restrict__ y, int R, int C, int vec_ok) {
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    const int nvec = (C + 7) >> 3;
    MD s = {-KL_INF, 0.0f};
    if (nvec <= H8_PER_THREAD * (int)blockDim.x) {
        uint4 v[H8_PER_THREAD];                         // the row, cached in registers as fp16
#pragma unroll
        for (int k = 0; k < H8_PER_THREAD; ++k) {
            v[k] = load8(xr, threadIdx.x + k * blockDim.x, C, vec_ok);
            s = md_push8(s, v[k]);
        }
        s = block_reduce_md(s);
        const float inv = 1.0f / s.d;
#pragma unroll
        for (int k = 0; k < H8_PER_THREAD; ++k)
            store8(yr, threadIdx.x + k * blockDim.x, C, vec_ok, softmax8(v[k], s, inv));
    } else {
        for (int g = threadIdx.x; g < nvec; g += blockDim.x) s = md_push8(s, load8(xr, g, C, vec_ok));
        s = block_reduce_md(s);
        const float inv = 1.0f / s.d;
        for (int g = threadIdx.x; g < nvec; g += blockDim.x)
            store8(yr, g, C, vec_ok, softmax8(load8(xr, g, C, vec_ok), s, inv));
    }
}
