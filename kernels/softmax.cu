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
// a shared-memory tree reduction. Cost: three passes over the row (max, sum, write; the two
// re-reads hit L1/L2 while the rows in flight fit there: lab 01 measures where they stop
// fitting), and a __syncthreads() at every level of each tree (8 levels for 256 threads).
// Steps 02-04 use this fixed block size. A compile-time stride matters: the compiler can then
// unroll the row loops and keep several loads in flight; with `i += blockDim.x` it cannot.
#ifndef ROW_BLOCK
#define ROW_BLOCK 256
#endif
__device__ __forceinline__ float tree_reduce(float v, float* s, bool is_max) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (int stride = ROW_BLOCK / 2; stride > 0; stride >>= 1) {
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
    __shared__ float s[ROW_BLOCK];
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    float m = -KL_INF;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) m = fmaxf(m, xr[i]);      // pass 1
    m = tree_reduce(m, s, true);
    float d = 0.0f;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) d += expf(xr[i] - m);    // pass 2
    d = tree_reduce(d, s, false);
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) yr[i] = expf(xr[i] - m) / d;  // pass 3
}

// === softmax_02_safe_interleaved ===
// Why: step 02's tree uses *sequential* addressing: at each level thread t adds s[t + stride]
// into s[t], so the 32 lanes of a warp touch 32 consecutive floats, one per bank: no bank
// conflicts. Textbooks (Harris, "Optimizing parallel reduction") start from *interleaved*
// addressing, s[2*stride*t] += s[2*stride*t + stride]: lanes then hit every 2nd, 4th, ...
// float, so 2, 4, ... 16 lanes share a bank and the accesses serialise. This step is step 02
// with only the tree's addressing changed, so the timing measures what the conflicts cost
// (one tree of 256 values per row per reduction: little, except for very short rows).
__device__ __forceinline__ float tree_reduce_interleaved(float v, float* s, bool is_max) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (int stride = 1; stride < ROW_BLOCK; stride <<= 1) {
        const int idx = 2 * stride * threadIdx.x;
        if (idx < ROW_BLOCK) {
            float o = s[idx + stride];
            s[idx] = is_max ? fmaxf(s[idx], o) : s[idx] + o;
        }
        __syncthreads();
    }
    float r = s[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void softmax_02_safe_interleaved(const float* x, float* y, int R, int C) {
    __shared__ float s[ROW_BLOCK];
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    float m = -KL_INF;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) m = fmaxf(m, xr[i]);
    m = tree_reduce_interleaved(m, s, true);
    float d = 0.0f;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) d += expf(xr[i] - m);
    d = tree_reduce_interleaved(d, s, false);
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) yr[i] = expf(xr[i] - m) / d;
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
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) m = fmaxf(m, xr[i]);
    m = block_reduce_max(m, scratch);
    float d = 0.0f;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) d += expf(xr[i] - m);
    d = block_reduce_sum(d, scratch);
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) yr[i] = expf(xr[i] - m) / d;
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
// Only the pass structure changes from step 03 (same scalar loads, expf, block of 256). The
// update costs one expf per element, like step 03's sum pass; a first version that merged
// each element as a full (m, d) state paid two guarded expf per element and lost to step 03.
struct MD { float m, d; };

#define LOG2E 1.4426950408889634f
// exp(x) = 2^(x log2 e): one FMUL + one ex2.approx (relative error ~2^-22), against
// expf's ~10 instructions. Step 05 uses it; lab 01's ablation measures what it is worth there.
__device__ __forceinline__ float ex2(float t) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
    return r;
}
template <bool FAST> __device__ __forceinline__ float kexp(float x) { return FAST ? ex2(x * LOG2E) : expf(x); }

// Merge two partial states with ONE exponential: the larger max survives, and only the
// other state's sum is rescaled, by exp(-|m_a - m_b|). Equal maxima (including two states that
// are still -inf) need no exp: the factor is 1. A NaN anywhere stays NaN (NaN * 0 = NaN).
template <bool FAST> __device__ __forceinline__ MD md_combine(MD a, MD b) {
    const bool b_wins = b.m > a.m;
    const float f = a.m == b.m ? 1.0f : kexp<FAST>(-fabsf(a.m - b.m));
    return b_wins ? MD{b.m, fmaf(a.d, f, b.d)} : MD{a.m, fmaf(b.d, f, a.d)};
}

template <bool FAST> __device__ __forceinline__ MD warp_reduce_md(MD v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        MD o;
        o.m = __shfl_xor_sync(0xffffffffu, v.m, offset);
        o.d = __shfl_xor_sync(0xffffffffu, v.d, offset);
        v = md_combine<FAST>(v, o);
    }
    return v;
}

// (m, d) over the threads of one row: a warp per row needs only shuffles; a larger row
// group (blockDim.y == 1 then) adds one step through shared memory.
template <bool FAST> __device__ __forceinline__ MD row_reduce_md(MD v) {
    __shared__ float sm[32], sd[32];
    __shared__ MD total;
    v = warp_reduce_md<FAST>(v);
    if (blockDim.x == 32) return v;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) { sm[wid] = v.m; sd[wid] = v.d; }
    __syncthreads();
    if (wid == 0) {
        MD w = lane < nwarps ? MD{sm[lane], sd[lane]} : MD{-KL_INF, 0.0f};
        w = warp_reduce_md<FAST>(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}

extern "C" __global__ void softmax_04_online(const float* x, float* y, int R, int C) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    // Per element, ONE exp: if v > m the old sum is rescaled, d = d e^(m-v) + 1, else
    // d += e^(v-m); both are e^(-|v-m|). m starts at -FLT_MAX, not -inf, so a -inf element
    // gives e^(-inf) = 0 with no test, and an all -inf row ends with d = 0 (0/0 = NaN, as NumPy).
    float m = -3.402823466e38f, d = 0.0f;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) {        // pass 1: fold each element in
        const float v = xr[i];
        const float e = expf(-fabsf(v - m));                   // NaN if v is NaN: d turns NaN
        const bool up = v > m;
        d = up ? fmaf(d, e, 1.0f) : d + e;
        m = up ? v : m;
    }
    const MD s = row_reduce_md<false>(MD{m, d});
    // a +inf in the row: every finite element has weight 0 and inf/inf is NaN, so the row is NaN
    const float inv = s.m == KL_INF ? __int_as_float(0x7fc00000) : 1.0f / s.d;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) yr[i] = expf(xr[i] - s.m) * inv;  // pass 2
}

// === softmax_04_ablate_two_exp ===
// Why: the first version of step 04, kept to measure the fix: each element is merged as a
// full state (v, 1) with the general combine, written the obvious way with two guarded
// exponentials, exp(m - m') and exp(v - m'). Same loads, passes and block as step 04: only
// the per-element arithmetic differs (two expf and two -inf tests instead of one expf).
__device__ __forceinline__ MD md_combine_two_exp(MD a, MD b) {
    const float m = fmaxf(a.m, b.m);
    const float fa = a.m == -KL_INF ? 0.0f : expf(a.m - m);
    const float fb = b.m == -KL_INF ? 0.0f : expf(b.m - m);
    return MD{m, a.d * fa + b.d * fb};
}

extern "C" __global__ void softmax_04_ablate_two_exp(const float* x, float* y, int R, int C) {
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    MD s = {-KL_INF, 0.0f};
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) {
        const float v = xr[i];
        s = md_combine_two_exp(s, MD{v, v == -KL_INF ? 0.0f : 1.0f});
    }
    s = row_reduce_md<false>(s);
    const float inv = 1.0f / s.d;
    for (int i = threadIdx.x; i < C; i += ROW_BLOCK) yr[i] = exp_sub(xr[i], s.m) * inv;
}

// === softmax_05_online_vec4 ===
// Why: step 04 issues one 4-byte load per element and reads the row twice. Here:
//  * float4 loads (ld.global.nc.v4.f32) move 16 bytes per instruction;
//  * when the row fits in registers (VEC_PER_THREAD float4 per thread) it is read once:
//    1 read + 1 write, the floor for softmax. Each thread keeps e = exp(x - m_local)
//    in place of x, the row group merges (m_local, d_local) once, and the output is
//    e * exp(m_local - M) / D: one exp per element in total (ex2.approx, see above);
//  * short rows get a warp each (blockDim = 32 x rows-per-block): no barrier at all.
// Longer rows stream twice (online (m, d) per float4, then the output pass). Rows whose length
// is not a multiple of 4, or whose base is not 16-byte aligned, use scalar loads (vec_ok = 0).
#ifndef VEC_PER_THREAD
#define VEC_PER_THREAD 8
#endif

__device__ __forceinline__ float4 load4(const float* __restrict__ p, int g, int C, int vec_ok) {
    const float NI = -KL_INF;
    if (vec_ok) return g < (C >> 2) ? __ldg(reinterpret_cast<const float4*>(p) + g)
                                    : make_float4(NI, NI, NI, NI);
    const int i = g * 4;
    return make_float4(i < C ? __ldg(p + i) : NI, i + 1 < C ? __ldg(p + i + 1) : NI,
                       i + 2 < C ? __ldg(p + i + 2) : NI, i + 3 < C ? __ldg(p + i + 3) : NI);
}

__device__ __forceinline__ void store4(float* __restrict__ p, int g, int C, int vec_ok, float4 v) {
#ifdef KL_STREAM_STORE
    if (vec_ok) { if (g < (C >> 2)) __stcs(reinterpret_cast<float4*>(p) + g, v); return; }
#else
    if (vec_ok) { if (g < (C >> 2)) reinterpret_cast<float4*>(p)[g] = v; return; }
#endif
    const int i = g * 4;
    if (i < C) p[i] = v.x;
    if (i + 1 < C) p[i + 1] = v.y;
    if (i + 2 < C) p[i + 2] = v.z;
    if (i + 3 < C) p[i + 3] = v.w;
}

__device__ __forceinline__ float max4(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }

// exp(v - m) for 4 values, with m the thread's own max (m = -inf is replaced by 0 so that
// -inf inputs give 0 and NaN inputs stay NaN); returns their sum.
// (v - m) is formed first: folding m into one FMA (v*log2e - m*log2e) would round m*log2e
// and cost up to 1e-3 relative error when |m| ~ 1e4.
template <bool FAST>
__device__ __forceinline__ float exp4_inplace(float4& v, float m) {
    if (m == -KL_INF) m = 0.0f;
    v.x = kexp<FAST>(v.x - m); v.y = kexp<FAST>(v.y - m);
    v.z = kexp<FAST>(v.z - m); v.w = kexp<FAST>(v.w - m);
    return (v.x + v.y) + (v.z + v.w);
}

__device__ __forceinline__ float4 scale4(float4 v, float k) {
    return make_float4(v.x * k, v.y * k, v.z * k, v.w * k);
}

// Turn the row's (M, D) into this thread's output scale exp(m_local - M) / D.
template <bool FAST>
__device__ __forceinline__ float out_scale(float m_local, MD row) {
    return (m_local == -KL_INF ? 0.0f : kexp<FAST>(m_local - row.m)) / row.d;
}

// The body of step 05, with two of its changes as switches so the lab can turn each off alone
// (the ablation kernels below): FAST = ex2.approx instead of expf; CACHE = keep the row in
// registers (1 read) when it fits, instead of streaming it twice. The third change, 16-byte
// loads, is the launcher's vec_ok flag (0 = the same elements through scalar loads), and the
// fourth, the block size, is the launch geometry.
template <bool FAST, bool CACHE>
__device__ __forceinline__ void online_vec4_body(const float* __restrict__ x, float* __restrict__ y,
                                                 int R, int C, int vec_ok) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= R) return;                  // only warp-per-row blocks have blockDim.y > 1
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;
    const int nvec = (C + 3) >> 2;
    if (CACHE && nvec <= VEC_PER_THREAD * (int)blockDim.x) {
        float4 v[VEC_PER_THREAD];                       // the row, cached in registers
        float m = -KL_INF, d = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k) {      // all loads in flight at once
            v[k] = load4(xr, threadIdx.x + k * blockDim.x, C, vec_ok);
            m = fmaxf(m, max4(v[k]));
        }
#pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k) d += exp4_inplace<FAST>(v[k], m);
        const float k_out = out_scale<FAST>(m, row_reduce_md<FAST>(MD{m, d}));
#pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k)
            store4(yr, threadIdx.x + k * blockDim.x, C, vec_ok, scale4(v[k], k_out));
    } else {                                            // streaming: online (m, d) per float4
        MD s = {-KL_INF, 0.0f};
        for (int g = threadIdx.x; g < nvec; g += blockDim.x) {
            float4 v = load4(xr, g, C, vec_ok);
            const float m4 = max4(v);
            s = md_combine<FAST>(s, MD{m4, exp4_inplace<FAST>(v, m4)});
        }
        s = row_reduce_md<FAST>(s);
        const float inv = 1.0f / s.d;
        for (int g = threadIdx.x; g < nvec; g += blockDim.x) {
            float4 v = load4(xr, g, C, vec_ok);
            exp4_inplace<FAST>(v, s.m);
            store4(yr, g, C, vec_ok, scale4(v, inv));
        }
    }
}

extern "C" __global__ void softmax_05_online_vec4(const float* __restrict__ x, float* __restrict__ y,
                                                  int R, int C, int vec_ok) {
    online_vec4_body<true, true>(x, y, R, C, vec_ok);
}

// === softmax_05_ablate_expf ===
// Why: step 05 changed four things at once (16-byte loads, the row in registers, ex2.approx,
// the block size). This is step 05 with expf in place of ex2.approx and nothing else changed:
// its time over step 05's is what the cheaper exponential is worth.
extern "C" __global__ void softmax_05_ablate_expf(const float* __restrict__ x, float* __restrict__ y,
                                                  int R, int C, int vec_ok) {
    online_vec4_body<false, true>(x, y, R, C, vec_ok);
}

// === softmax_05_ablate_stream ===
// Why: step 05 with the register cache switched off: the row is streamed twice (2 reads +
// 1 write, as step 04) with everything else unchanged. Its time over step 05's is what
// reading the row once is worth.
extern "C" __global__ void softmax_05_ablate_stream(const float* __restrict__ x, float* __restrict__ y,
                                                    int R, int C, int vec_ok) {
    online_vec4_body<true, false>(x, y, R, C, vec_ok);
}

// === softmax_06_fp16_vec8 ===
// Why: inference keeps activations in fp16. Half the bytes per element means at best half
// the time for a memory-bound kernel (lab 01 measures how close it gets), if each load still
// moves 16 bytes: one uint4 carries
// 8 halves. The math stays in fp32 (exp of a half would lose the sum's precision).
// Same structure as step 05: the row cached in registers (as fp32 exps) when it fits.
#ifndef H8_PER_THREAD
#define H8_PER_THREAD 4
#endif

// 8 halves -> 8 floats; -inf padding beyond C. Scalar loads when vec_ok = 0.
__device__ __forceinline__ void load8(const __half* __restrict__ p, int g, int C, int vec_ok, float4& lo, float4& hi) {
    const float NI = -KL_INF;
    if (vec_ok) {
        if (g < (C >> 3)) {
            Half8 h;
            h.u = __ldg(reinterpret_cast<const uint4*>(p) + g);
            const float2 a = __half22float2(h.h2[0]), b = __half22float2(h.h2[1]);
            const float2 c = __half22float2(h.h2[2]), d = __half22float2(h.h2[3]);
            lo = make_float4(a.x, a.y, b.x, b.y);
            hi = make_float4(c.x, c.y, d.x, d.y);
        } else {
            lo = hi = make_float4(NI, NI, NI, NI);
        }
        return;
    }
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = g * 8 + j < C ? __half2float(p[g * 8 + j]) : NI;
    lo = make_float4(f[0], f[1], f[2], f[3]);
    hi = make_float4(f[4], f[5], f[6], f[7]);
}

__device__ __forceinline__ void store8(__half* __restrict__ p, int g, int C, int vec_ok, float4 lo, float4 hi) {
    Half8 h;
    h.h2[0] = __floats2half2_rn(lo.x, lo.y); h.h2[1] = __floats2half2_rn(lo.z, lo.w);
    h.h2[2] = __floats2half2_rn(hi.x, hi.y); h.h2[3] = __floats2half2_rn(hi.z, hi.w);
#ifdef KL_STREAM_STORE
    if (vec_ok) { if (g < (C >> 3)) __stcs(reinterpret_cast<uint4*>(p) + g, h.u); return; }
#else
    if (vec_ok) { if (g < (C >> 3)) reinterpret_cast<uint4*>(p)[g] = h.u; return; }
#endif
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int i = g * 8 + 2 * j;
        if (i < C) p[i] = __low2half(h.h2[j]);
        if (i + 1 < C) p[i + 1] = __high2half(h.h2[j]);
    }
}

// Steps 06 and 07 share the per-row work once the row is in registers as fp32: the max,
// one exp per element, the (m, d) merge across the row's threads, and the scaled store.
__device__ __forceinline__ void fp16_row_from_regs(float4 (&lo)[H8_PER_THREAD], float4 (&hi)[H8_PER_THREAD],
                                                   __half* __restrict__ yr, int C, int vec_ok) {
    float m = -KL_INF, d = 0.0f;
#pragma unroll
    for (int k = 0; k < H8_PER_THREAD; ++k) m = fmaxf(m, fmaxf(max4(lo[k]), max4(hi[k])));
#pragma unroll
    for (int k = 0; k < H8_PER_THREAD; ++k) d += exp4_inplace<true>(lo[k], m) + exp4_inplace<true>(hi[k], m);
    const float k_out = out_scale<true>(m, row_reduce_md<true>(MD{m, d}));
#pragma unroll
    for (int k = 0; k < H8_PER_THREAD; ++k)
        store8(yr, threadIdx.x + k * blockDim.x, C, vec_ok, scale4(lo[k], k_out), scale4(hi[k], k_out));
}

// Rows too long for the registers: online (m, d) per 8 halves, then a second streaming pass.
__device__ __forceinline__ void fp16_row_stream(const __half* __restrict__ xr, __half* __restrict__ yr,
                                                int C, int vec_ok) {
    const int nvec = (C + 7) >> 3;
    MD s = {-KL_INF, 0.0f};
    float4 lo, hi;
    for (int g = threadIdx.x; g < nvec; g += blockDim.x) {
        load8(xr, g, C, vec_ok, lo, hi);
        const float m8 = fmaxf(max4(lo), max4(hi));
        s = md_combine<true>(s, MD{m8, exp4_inplace<true>(lo, m8) + exp4_inplace<true>(hi, m8)});
    }
    s = row_reduce_md<true>(s);
    const float inv = 1.0f / s.d;
    for (int g = threadIdx.x; g < nvec; g += blockDim.x) {
        load8(xr, g, C, vec_ok, lo, hi);
        exp4_inplace<true>(lo, s.m);
        exp4_inplace<true>(hi, s.m);
        store8(yr, g, C, vec_ok, scale4(lo, inv), scale4(hi, inv));
    }
}

extern "C" __global__ void softmax_06_fp16_vec8(const __half* __restrict__ x, __half* __restrict__ y,
                                                int R, int C, int vec_ok) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= R) return;
    const __half* xr = x + (size_t)row * C;
    __half* yr = y + (size_t)row * C;
    if (((C + 7) >> 3) <= H8_PER_THREAD * (int)blockDim.x) {
        float4 lo[H8_PER_THREAD], hi[H8_PER_THREAD];
#pragma unroll
        for (int k = 0; k < H8_PER_THREAD; ++k) load8(xr, threadIdx.x + k * blockDim.x, C, vec_ok, lo[k], hi[k]);
        fp16_row_from_regs(lo, hi, yr, C, vec_ok);
    } else {
        fp16_row_stream(xr, yr, C, vec_ok);
    }
}

// === softmax_07_fp16_pipelined ===
// Why: step 06 moves half the bytes of step 05 but reaches a smaller fraction of the roof.
// Each block handles one row and then exits: it loads (a DRAM round trip with nothing else
// to do), reduces, stores. With few waves of blocks, all blocks on an SM are in the same
// phase, so during the reduce-and-store phase no loads are in flight. Two changes: the grid
// holds only as many blocks as fit on the GPU at once, each block walks rows with a stride;
// and the NEXT row's 16-byte loads are issued (into raw registers) before THIS row's
// reduction (software pipelining). The ablation without the prefetch separates the two.
// The 16-byte register path only: the launcher sends unaligned rows, and rows too long for
// the registers, to step 06.
__device__ __forceinline__ uint4 ld_raw8(const __half* __restrict__ p, int g, int C) {
    return g < (C >> 3) ? __ldg(reinterpret_cast<const uint4*>(p) + g)
                        : make_uint4(0xFC00FC00u, 0xFC00FC00u, 0xFC00FC00u, 0xFC00FC00u);  // 8 x -inf
}

__device__ __forceinline__ void unpack8(uint4 u, float4& lo, float4& hi) {
    Half8 h;
    h.u = u;
    const float2 a = __half22float2(h.h2[0]), b = __half22float2(h.h2[1]);
    const float2 c = __half22float2(h.h2[2]), d = __half22float2(h.h2[3]);
    lo = make_float4(a.x, a.y, b.x, b.y);
    hi = make_float4(c.x, c.y, d.x, d.y);
}

template <bool PREFETCH>
__device__ __forceinline__ void fp16_rows_resident(const __half* __restrict__ x, __half* __restrict__ y, int R, int C) {
    const int stride = gridDim.x * blockDim.y;
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    uint4 next[H8_PER_THREAD];
    if (PREFETCH && row < R) {
#pragma unroll
        for (int k = 0; k < H8_PER_THREAD; ++k) next[k] = ld_raw8(x + (size_t)row * C, threadIdx.x + k * blockDim.x, C);
    }
#pragma unroll 1
    for (; row < R; row += stride) {
        float4 lo[H8_PER_THREAD], hi[H8_PER_THREAD];
        if (!PREFETCH) {                                 // the ablation: this row's loads, then wait for them
#pragma unroll
            for (int k = 0; k < H8_PER_THREAD; ++k) next[k] = ld_raw8(x + (size_t)row * C, threadIdx.x + k * blockDim.x, C);
        }
#pragma unroll
        for (int k = 0; k < H8_PER_THREAD; ++k) unpack8(next[k], lo[k], hi[k]);
        if (PREFETCH && row + stride < R) {              // the next row's loads, in flight now
#pragma unroll
            for (int k = 0; k < H8_PER_THREAD; ++k)
                next[k] = ld_raw8(x + (size_t)(row + stride) * C, threadIdx.x + k * blockDim.x, C);
        }
        fp16_row_from_regs(lo, hi, y + (size_t)row * C, C, 1);
    }
}

extern "C" __global__ void softmax_07_fp16_pipelined(const __half* __restrict__ x, __half* __restrict__ y,
                                                     int R, int C, int vec_ok) {
    fp16_rows_resident<true>(x, y, R, C);
}

// === softmax_07_ablate_no_prefetch ===
// Why: step 07 makes two changes to step 06: a grid of only the resident blocks, each walking rows,
// and the next row's loads issued before this row's reduction. This is step 07 without the second:
// 06 -> this is the resident grid alone, this -> 07 the prefetch alone.
extern "C" __global__ void softmax_07_ablate_no_prefetch(const __half* __restrict__ x, __half* __restrict__ y,
                                                         int R, int C, int vec_ok) {
    fp16_rows_resident<false>(x, y, R, C);
}

// === softmax_09_rows_per_warp ===
// Why: at 32 columns steps 05 and 07 give a row a whole warp (or block) and use 8 (or 4) of its 32
// lanes: three quarters of every warp idles, and a launch of a million rows is a million row
// groups of mostly idle lanes. Here a row gets only as many lanes as it has 16-byte vectors
// (lpr: 1, 2, 4, ..., 32), so one warp holds 32 / lpr rows: 4 rows of 32 floats, or 8 rows of 32
// halves. Everything else is step 05's (and, for fp16, step 06's) register path: the row read once
// into registers, the max and the sum reduced over the row's lanes with shuffles (width lpr), one
// ex2 per element, one 16-byte store. Rows longer than 32 lanes x 8 float4 (or x 4 half8) = 1024
// elements go to steps 05 / 07: the launcher is the dispatch table.
#ifndef RPW_REGS
#define RPW_REGS 8     // float4 registers per lane: the row's share of a lane, at most
#endif
__device__ __forceinline__ float group_max(float v, int lpr) {
    for (int o = lpr >> 1; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float group_sum(float v, int lpr) {
    for (int o = lpr >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <bool HALF>
__device__ __forceinline__ void rows_per_warp_body(const void* __restrict__ xv, void* __restrict__ yv, int R,
                                                   int C, int vec_ok, int lpr, int nv) {
    // nv: 16-byte loads per lane (fp32: float4, fp16: 8 halves into two float4); every lane of a
    // warp takes part in the shuffles, so lanes past the last row load -inf and store nothing.
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = t / lpr;
    const int sub = (int)(t & (lpr - 1));
    const bool live = row < R;
    const float NI = -KL_INF;
    float4 v[RPW_REGS];
#pragma unroll
    for (int k = 0; k < RPW_REGS; ++k) v[k] = make_float4(NI, NI, NI, NI);
    if (live) {
        if (HALF) {
            const __half* xr = static_cast<const __half*>(xv) + row * C;
#pragma unroll
            for (int k = 0; k < RPW_REGS / 2; ++k)
                if (k < nv) load8(xr, sub + k * lpr, C, vec_ok, v[2 * k], v[2 * k + 1]);
        } else {
            const float* xr = static_cast<const float*>(xv) + row * C;
#pragma unroll
            for (int k = 0; k < RPW_REGS; ++k)
                if (k < nv) v[k] = load4(xr, sub + k * lpr, C, vec_ok);
        }
    }
    float m = NI;
#pragma unroll
    for (int k = 0; k < RPW_REGS; ++k) m = fmaxf(m, max4(v[k]));
    m = group_max(m, lpr);
    float d = 0.0f;
#pragma unroll
    for (int k = 0; k < RPW_REGS; ++k) d += exp4_inplace<true>(v[k], m);
    const float inv = 1.0f / group_sum(d, lpr);   // NaN and +inf rows: d is NaN; an all -inf row: 1/0, 0 x inf = NaN
    if (!live) return;
    if (HALF) {
        __half* yr = static_cast<__half*>(yv) + row * C;
#pragma unroll
        for (int k = 0; k < RPW_REGS / 2; ++k)
            if (k < nv) store8(yr, sub + k * lpr, C, vec_ok, scale4(v[2 * k], inv), scale4(v[2 * k + 1], inv));
    } else {
        float* yr = static_cast<float*>(yv) + row * C;
#pragma unroll
        for (int k = 0; k < RPW_REGS; ++k)
            if (k < nv) store4(yr, sub + k * lpr, C, vec_ok, scale4(v[k], inv));
    }
}

// Rows of one or two 16-byte loads per lane (nv <= 2: up to 256 floats; nv = 1: up to 256 halves) leave
// a lane too few bytes in flight for Little's law. There each lane group takes several rows (4 fp32,
// 8 fp16); the warp's j-th load reads a run of 32 / lpr consecutive rows (512 contiguous bytes).
#ifndef RPW_ROWS_F32
#define RPW_ROWS_F32 4
#endif
#ifndef RPW_ROWS_F16
#define RPW_ROWS_F16 8
#endif
// fp32: the rows stay as floats, and each exponential is computed once and kept for the output.
template <int NV>
__device__ __forceinline__ void short_rows_f32(const float* __restrict__ x, float* __restrict__ y, int R, int C,
                                               int vec_ok, int lpr) {
    constexpr int RL = RPW_ROWS_F32;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int rpw = 32 / lpr, sub = (int)(t & (lpr - 1));
    const long long row0 = (t >> 5) * rpw * RL + (int)(t & 31) / lpr;
    const float NI = -KL_INF;
    float4 v[RL][NV];
#pragma unroll
    for (int j = 0; j < RL; ++j) {                     // every load in flight at once
        const long long row = row0 + j * rpw;
#pragma unroll
        for (int k = 0; k < NV; ++k)
            v[j][k] = row < R ? load4(x + row * C, sub + k * lpr, C, vec_ok) : make_float4(NI, NI, NI, NI);
    }
#pragma unroll
    for (int j = 0; j < RL; ++j) {
        float m = NI, d = 0.0f;
#pragma unroll
        for (int k = 0; k < NV; ++k) m = fmaxf(m, max4(v[j][k]));
        m = group_max(m, lpr);
#pragma unroll
        for (int k = 0; k < NV; ++k) d += exp4_inplace<true>(v[j][k], m);
        const float inv = 1.0f / group_sum(d, lpr);    // NaN and +inf rows: d is NaN; an all -inf row: 0 x inf = NaN
        const long long row = row0 + j * rpw;
        if (row >= R) continue;
#pragma unroll
        for (int k = 0; k < NV; ++k) store4(y + row * C, sub + k * lpr, C, vec_ok, scale4(v[j][k], inv));
    }
}

// fp16: the rows stay as raw 16-byte words (8 halves each, 8 rows a lane group: 32 registers), and
// each exponential is computed twice (for the sum, then for the output): more bytes in flight for the
// registers, which fp16's half-size rows need.
__device__ __forceinline__ void short_rows_f16(const __half* __restrict__ x, __half* __restrict__ y, int R, int C,
                                               int vec_ok, int lpr) {
    constexpr int RL = RPW_ROWS_F16;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int rpw = 32 / lpr, sub = (int)(t & (lpr - 1));
    const long long row0 = (t >> 5) * rpw * RL + (int)(t & 31) / lpr;
    uint4 raw[RL];
    float4 lo, hi;
#pragma unroll
    for (int j = 0; j < RL; ++j) {                     // every load in flight at once
        const long long row = row0 + j * rpw;
        if (row >= R) {
            raw[j] = make_uint4(0xFC00FC00u, 0xFC00FC00u, 0xFC00FC00u, 0xFC00FC00u);   // 8 x -inf
        } else if (vec_ok) {
            raw[j] = ld_raw8(x + row * C, sub, C);
        } else {                                       // scalar loads, repacked
            load8(x + row * C, sub, C, 0, lo, hi);
            Half8 h;
            h.h2[0] = __floats2half2_rn(lo.x, lo.y); h.h2[1] = __floats2half2_rn(lo.z, lo.w);
            h.h2[2] = __floats2half2_rn(hi.x, hi.y); h.h2[3] = __floats2half2_rn(hi.z, hi.w);
            raw[j] = h.u;
        }
    }
#pragma unroll
    for (int j = 0; j < RL; ++j) {
        unpack8(raw[j], lo, hi);
        const float m = group_max(fmaxf(max4(lo), max4(hi)), lpr);
        const float inv = 1.0f / group_sum(exp4_inplace<true>(lo, m) + exp4_inplace<true>(hi, m), lpr);
        const long long row = row0 + j * rpw;
        if (row >= R) continue;
        unpack8(raw[j], lo, hi);
        exp4_inplace<true>(lo, m);
        exp4_inplace<true>(hi, m);
        store8(y + row * C, sub, C, vec_ok, scale4(lo, inv), scale4(hi, inv));
    }
}

extern "C" __global__ void softmax_09_rows_per_warp(const float* __restrict__ x, float* __restrict__ y, int R,
                                                    int C, int vec_ok, int lpr, int nv) {
    if (nv == 1) short_rows_f32<1>(x, y, R, C, vec_ok, lpr);
    else if (nv == 2) short_rows_f32<2>(x, y, R, C, vec_ok, lpr);
    else rows_per_warp_body<false>(x, y, R, C, vec_ok, lpr, nv);
}

// === softmax_09_rows_per_warp_fp16 ===
// Why: the same kernel for fp16 rows: 8 halves per 16-byte load, converted to fp32 in registers
// (step 06's load8/store8), so a row of 32 halves takes 4 lanes and a warp holds 8 rows.
extern "C" __global__ void softmax_09_rows_per_warp_fp16(const __half* __restrict__ x, __half* __restrict__ y,
                                                         int R, int C, int vec_ok, int lpr, int nv) {
    if (nv == 1) short_rows_f16(x, y, R, C, vec_ok, lpr);
    else rows_per_warp_body<true>(x, y, R, C, vec_ok, lpr, nv);
}

// === softmax_10_cluster ===
// Why: a row longer than one block's registers (1024 threads x 32 elements = 32768) makes steps 05
// and 07 stream it twice: 2 reads + 1 write, at most 2/3 of the copy roof. A thread-block cluster
// (sm_90) spreads one row over CS blocks on CS SMs, each holding its chunk in registers; the blocks
// exchange their (m, d) through distributed shared memory (each reads the others' with
// ld.shared::cluster), combine them with lab 01's rule, and write their chunk: 1 read + 1 write
// for rows up to 8 x 32768 elements. On GPUs before sm_90 the launcher never calls it.
#if __CUDA_ARCH__ >= 900
#define KL_CLUSTER(n) __cluster_dims__(n, 1, 1)
#else
#define KL_CLUSTER(n)
#endif
#ifndef CL_REGS
#define CL_REGS 8      // float4 registers per thread: 32 elements
#endif

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r = 0;
#if __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
    return r;
}
__device__ __forceinline__ void cluster_sync() {     // every thread of every block of the cluster
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ float ld_cluster(const float* p, unsigned rank) {   // block `rank`'s copy of *p
    float v = 0.0f;
#if __CUDA_ARCH__ >= 900
    unsigned a = (unsigned)__cvta_generic_to_shared(p), r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r) : "memory");
#endif
    return v;
}

// (m, d) of this block's chunk -> the row's (M, D), through the cluster's shared memory.
template <int CS>
__device__ __forceinline__ MD cluster_row_md(MD mine) {
    __shared__ float part[2];                          // this block's (m, d), read by the whole cluster
    const MD blk = row_reduce_md<true>(mine);
    if (threadIdx.x == 0) { part[0] = blk.m; part[1] = blk.d; }
    cluster_sync();                                    // every block's part is written
    MD row_md = {-KL_INF, 0.0f};
#pragma unroll
    for (int r = 0; r < CS; ++r) row_md = md_combine<true>(row_md, MD{ld_cluster(&part[0], r), ld_cluster(&part[1], r)});
    cluster_sync();                                    // no block leaves while another still reads its part
    return row_md;
}

// fp16 keeps its chunk as raw halves (8 x 16 bytes = 64 halves a thread, twice fp32's count in the same
// registers), so a block of half the threads holds the same chunk: two blocks an SM where fp32 has one.
// The max is taken in fp16 (exact), and exp is computed twice (once for the sum, once for the output).
#ifndef CLH_REGS
#define CLH_REGS 8
#endif
template <int CS>
__device__ __forceinline__ void cluster_body_h(const __half* __restrict__ x, __half* __restrict__ y, int C,
                                               int vec_ok, int chunk) {
    const long long row = blockIdx.x / CS;
    const int c0 = (int)cluster_rank() * chunk, len = max(0, min(C, c0 + chunk) - c0);
    const __half* xr = x + row * C + c0;
    float4 lo, hi;
    uint4 raw[CLH_REGS];
#pragma unroll
    for (int k = 0; k < CLH_REGS; ++k) {
        const int g = threadIdx.x + k * blockDim.x;
        if (vec_ok) {
            raw[k] = ld_raw8(xr, g, len);
        } else {                                       // scalar loads, repacked (-inf past the end)
            load8(xr, g, len, 0, lo, hi);
            Half8 h;
            h.h2[0] = __floats2half2_rn(lo.x, lo.y); h.h2[1] = __floats2half2_rn(lo.z, lo.w);
            h.h2[2] = __floats2half2_rn(hi.x, hi.y); h.h2[3] = __floats2half2_rn(hi.z, hi.w);
            raw[k] = h.u;
        }
    }
    float m = -KL_INF, d = 0.0f;
#pragma unroll
    for (int k = 0; k < CLH_REGS; ++k) { unpack8(raw[k], lo, hi); m = fmaxf(m, fmaxf(max4(lo), max4(hi))); }
#pragma unroll
    for (int k = 0; k < CLH_REGS; ++k) { unpack8(raw[k], lo, hi); d += exp4_inplace<true>(lo, m) + exp4_inplace<true>(hi, m); }
    const MD row_md = cluster_row_md<CS>(MD{m, d});
    const float inv = 1.0f / row_md.d;
    __half* yr = y + row * C + c0;
#pragma unroll
    for (int k = 0; k < CLH_REGS; ++k) {
        unpack8(raw[k], lo, hi);
        exp4_inplace<true>(lo, row_md.m);
        exp4_inplace<true>(hi, row_md.m);
        store8(yr, threadIdx.x + k * blockDim.x, len, vec_ok, scale4(lo, inv), scale4(hi, inv));
    }
}

// A block's chunk of one row, in registers: its (m, d), the row's through the cluster, the scaled store.
template <int CS, int N>
__device__ __forceinline__ void cluster_chunk_out(float4 (&v)[N], float* __restrict__ y, long long at, int len, int vec_ok) {
    float m = -KL_INF, d = 0.0f;
#pragma unroll
    for (int k = 0; k < N; ++k) m = fmaxf(m, max4(v[k]));
#pragma unroll
    for (int k = 0; k < N; ++k) d += exp4_inplace<true>(v[k], m);
    const float k_out = out_scale<true>(m, cluster_row_md<CS>(MD{m, d}));
    float* yr = y + at;
#pragma unroll
    for (int k = 0; k < N; ++k) store4(yr, threadIdx.x + k * blockDim.x, len, vec_ok, scale4(v[k], k_out));
}

template <int CS>
__device__ __forceinline__ void cluster_body(const float* __restrict__ x, float* __restrict__ y, int C, int vec_ok,
                                             int chunk) {
    const long long row = blockIdx.x / CS;
    const int c0 = (int)cluster_rank() * chunk, len = max(0, min(C, c0 + chunk) - c0);   // chunk: a multiple of 8
    const float* xr = x + row * C + c0;
    float4 v[CL_REGS];
#pragma unroll
    for (int k = 0; k < CL_REGS; ++k) v[k] = load4(xr, threadIdx.x + k * blockDim.x, len, vec_ok);
    cluster_chunk_out<CS>(v, y, row * C + c0, len, vec_ok);
}

// A cluster's size is fixed at compile time (__cluster_dims__), so each cluster step is one kernel per
// size: KL_CLUSTER_KERNELS(name, T, threads, ARGS, body) stamps name_2, name_4 and name_8 from one body,
// each taking ARGS(T) and running `body` with the constant CS = 2, 4 or 8 (the launcher picks the size).
#define KL_CLUSTER_KERNEL(name, cs, T, threads, ARGS, ...)                                             \
    extern "C" __global__ __launch_bounds__(threads) void KL_CLUSTER(cs) name##_##cs(ARGS(T)) {         \
        constexpr int CS = cs;                                                                         \
        __VA_ARGS__;                                                                                   \
    }
#define KL_CLUSTER_KERNELS(name, T, threads, ARGS, ...)                                                \
    KL_CLUSTER_KERNEL(name, 2, T, threads, ARGS, __VA_ARGS__)                                          \
    KL_CLUSTER_KERNEL(name, 4, T, threads, ARGS, __VA_ARGS__)                                          \
    KL_CLUSTER_KERNEL(name, 8, T, threads, ARGS, __VA_ARGS__)
#define CL10_ARGS(T) const T* __restrict__ x, T* __restrict__ y, int C, int vec_ok, int chunk
KL_CLUSTER_KERNELS(softmax_10_cluster, float, 1024, CL10_ARGS, cluster_body<CS>(x, y, C, vec_ok, chunk))

// === softmax_10_cluster_fp16 ===
// Why: the same for fp16; the chunk stays in registers as raw halves (64 a thread).
KL_CLUSTER_KERNELS(softmax_10_cluster_fp16, __half, 512, CL10_ARGS, cluster_body_h<CS>(x, y, C, vec_ok, chunk))


// === softmax_11_cluster_resident ===
// Why: step 10 launches one cluster per row; each block loads its chunk (a DRAM round trip with
// nothing else to do), reduces, exchanges (m, d) with the cluster, stores and exits, and the few
// blocks on an SM do so in step. Step 07's first change, given to the cluster: the grid holds only
// the clusters the GPU runs at once (the launcher asks the driver), each walking rows with a stride,
// so a cluster's next row starts while others still reduce. fp16 also takes its max in fp16 (__hmax2
// on the raw halves, exact): step 10's fp32 max let the compiler keep an fp32 copy of the chunk
// live, 128 registers a thread, two blocks an SM; ablation 11_ablate_fp32_max times that change alone.
// Same chunk a thread as step 10 (8 16-byte words) and at most 512 threads a block: fp32 rows over
// 8 x 512 x 32 elements, and rows that are not 16-byte aligned, go to step 10.
#ifndef CL11_REGS
#define CL11_REGS 8
#endif
template <int CS, bool PREFETCH>
__device__ __forceinline__ void cluster_rows(const float* __restrict__ x, float* __restrict__ y, int R, int C, int chunk) {
    const int c0 = (int)cluster_rank() * chunk, len = max(0, min(C, c0 + chunk) - c0);
    const int stride = gridDim.x / CS;
    long long row = blockIdx.x / CS;
    float4 next[CL11_REGS];
    auto load = [&](float4 (&v)[CL11_REGS], long long r) {
#pragma unroll
        for (int k = 0; k < CL11_REGS; ++k) v[k] = load4(x + r * C + c0, threadIdx.x + k * blockDim.x, len, 1);
    };
    if (PREFETCH && row < R) load(next, row);
#pragma unroll 1
    for (; row < R; row += stride) {
        float4 v[CL11_REGS];
        if (PREFETCH) {
#pragma unroll
            for (int k = 0; k < CL11_REGS; ++k) v[k] = next[k];
            if (row + stride < R) load(next, row + stride);       // in flight during this row's work
        } else {
            load(v, row);                                          // the ablation: load, then wait
        }
        cluster_chunk_out<CS>(v, y, row * C + c0, len, 1);     // step 10's reduction and store
    }
}

template <int N> __device__ __forceinline__ float max_h8(const uint4 (&raw)[N]) {
    __half2 mh = __halves2half2(__ushort_as_half(0xFC00), __ushort_as_half(0xFC00));     // -inf
#pragma unroll
    for (int k = 0; k < N; ++k) {
        Half8 h;
        h.u = raw[k];
#pragma unroll
        for (int j = 0; j < 4; ++j) mh = __hmax2(mh, h.h2[j]);                 // NaN-ignoring, as fmaxf
    }
    return fmaxf(__low2float(mh), __high2float(mh));
}
template <int CS, bool PREFETCH, bool ONE_EXP = false, bool H_MAX = true>
__device__ __forceinline__ void cluster_rows_h(const __half* __restrict__ x, __half* __restrict__ y, int R, int C,
                                               int chunk) {
    const int c0 = (int)cluster_rank() * chunk, len = max(0, min(C, c0 + chunk) - c0);
    const int stride = gridDim.x / CS;
    long long row = blockIdx.x / CS;
    uint4 next[CL11_REGS];
    auto load = [&](uint4 (&v)[CL11_REGS], long long r) {
#pragma unroll
        for (int k = 0; k < CL11_REGS; ++k) v[k] = ld_raw8(x + r * C + c0, threadIdx.x + k * blockDim.x, len);
    };
    if (PREFETCH && row < R) load(next, row);
#pragma unroll 1
    for (; row < R; row += stride) {
        uint4 raw[CL11_REGS];
        if (PREFETCH) {
#pragma unroll
            for (int k = 0; k < CL11_REGS; ++k) raw[k] = next[k];
            if (row + stride < R) load(next, row + stride);
        } else {
            load(raw, row);
        }
        float4 lo, hi;
        float d = 0.0f, m = -KL_INF;
        if (H_MAX) {
            m = max_h8(raw);                  // in fp16 (exact): no fp32 copy of the chunk stays live
        } else {                              // the ablation: step 10's max over unpacked floats
#pragma unroll
            for (int k = 0; k < CL11_REGS; ++k) { unpack8(raw[k], lo, hi); m = fmaxf(m, fmaxf(max4(lo), max4(hi))); }
        }
#pragma unroll
        for (int k = 0; k < CL11_REGS; ++k) {
            unpack8(raw[k], lo, hi);
            d += exp4_inplace<true>(lo, m) + exp4_inplace<true>(hi, m);
            if (ONE_EXP) {                      // keep exp(x - m) as halves where x was (in [0, 1])
                Half8 h;
                h.h2[0] = __floats2half2_rn(lo.x, lo.y); h.h2[1] = __floats2half2_rn(lo.z, lo.w);
                h.h2[2] = __floats2half2_rn(hi.x, hi.y); h.h2[3] = __floats2half2_rn(hi.z, hi.w);
                raw[k] = h.u;
            }
        }
        const MD row_md = cluster_row_md<CS>(MD{m, d});
        const float inv = 1.0f / row_md.d;
        const float k_out = ONE_EXP ? out_scale<true>(m, row_md) : inv;   // e^(m - M) / D
        __half* yr = y + row * C + c0;
#pragma unroll
        for (int k = 0; k < CL11_REGS; ++k) {
            unpack8(raw[k], lo, hi);
            if (!ONE_EXP) {
                exp4_inplace<true>(lo, row_md.m);
                exp4_inplace<true>(hi, row_md.m);
            }
            store8(yr, threadIdx.x + k * blockDim.x, len, 1, scale4(lo, k_out), scale4(hi, k_out));
        }
    }
}
#define CL11_ARGS(T) const T* __restrict__ x, T* __restrict__ y, int R, int C, int chunk
KL_CLUSTER_KERNELS(softmax_11_cluster_resident, float, 512, CL11_ARGS, cluster_rows<CS, false>(x, y, R, C, chunk))

// === softmax_11_cluster_resident_fp16 ===
// Why: the same for fp16 (the max in fp16).
KL_CLUSTER_KERNELS(softmax_11_cluster_resident_fp16, __half, 512, CL11_ARGS, cluster_rows_h<CS, false>(x, y, R, C, chunk))

// === softmax_11_ablate_fp32_max_fp16 ===
// Why: step 11 (fp16) with step 10's max over unpacked floats: the resident clusters alone. 10 -> this is the resident grid, this -> 11 the fp16 max (registers).
KL_CLUSTER_KERNELS(softmax_11_ablate_fp32_max_fp16, __half, 512, CL11_ARGS,
                   cluster_rows_h<CS, false, false, false>(x, y, R, C, chunk))

// === softmax_12_cluster_prefetch ===
// Why: step 07's second change, given to step 11: every block issues the loads of its chunk of the NEXT
// row (into raw registers) before this row's reduction, exchange and store, so DRAM has work while
// the cluster synchronises. The price: two rows' words live at once, twice the registers, half the
// blocks an SM. Step 11 is its ablation; lab 01 measures which side wins.
KL_CLUSTER_KERNELS(softmax_12_cluster_prefetch, float, 512, CL11_ARGS, cluster_rows<CS, true>(x, y, R, C, chunk))

// === softmax_12_cluster_prefetch_fp16 ===
// Why: the same for fp16.
KL_CLUSTER_KERNELS(softmax_12_cluster_prefetch_fp16, __half, 512, CL11_ARGS, cluster_rows_h<CS, true>(x, y, R, C, chunk))

// === softmax_13_cluster_one_exp_fp16 ===
// Why: steps 10 to 12 keep an fp16 row as raw halves and compute each exponential twice (once for the
// sum, once for the output), where fp32 keeps its exponentials: twice fp32's ex2 per element, on the
// XU pipe. Here the sum pass packs e = exp(x - m), in [0, 1], back into the halves where x was (fp16
// keeps it to 2^-11 relative) and the output pass scales them by e^(m - M) / D: one ex2 per element,
// the same registers. All else is step 11 (its ablation). fp16 only.
KL_CLUSTER_KERNELS(softmax_13_cluster_one_exp_fp16, __half, 512, CL11_ARGS, cluster_rows_h<CS, false, true>(x, y, R, C, chunk))

// === softmax_08_safe_v1 ===
// Why: the tutorial's softmax_safe_v1_kernel as it means it, fixed so it compiles: the printed code
// declares `__shared__ float s_data;` (one float) and indexes it, and reads the result as `s_data`;
// here s_data is an array and the results are s_data[0]. Each thread holds ONE element: it reads it
// once into a register, keeps its exponential in a register for the output, and writes it once
// (1 read + 1 write of the row), with a max tree and a sum tree in shared memory, a __syncthreads()
// per level. The price is the row length: C <= block size (at most 1024 threads); the launcher
// refuses longer rows with a ValueError. Step 02 is the course's version for any C: it strides over
// the row, so it reads it three times (max, sum, write). Block = C rounded up to a power of two (the
// tree halves it), at least a warp; the tutorial's BLOCK_SIZE template, chosen per launch.
#ifndef SAFE_V1_MAX_BLOCK
#define SAFE_V1_MAX_BLOCK 1024
#endif
extern "C" __global__ void softmax_08_safe_v1(const float* input, float* output, int R, int C) {
    __shared__ float s_data[SAFE_V1_MAX_BLOCK];
    const int row_idx = blockIdx.x;
    if (row_idx >= R) return;
    const int tid = threadIdx.x;
    const size_t at = (size_t)row_idx * C + tid;       // the tutorial's int row_idx * C + tid, widened
    const float val = (tid < C) ? input[at] : -KL_INF;
    // pass 1: the row max
    s_data[tid] = val;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s_data[tid] = fmaxf(s_data[tid], s_data[tid + stride]);
        __syncthreads();
    }
    const float max_val = s_data[0];                   // printed: `s_data` (does not compile)
    __syncthreads();
    // pass 2: the sum of exponentials; val is still in a register, no second global read
    const float exp_val = (tid < C) ? expf(val - max_val) : 0.0f;
    s_data[tid] = exp_val;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s_data[tid] += s_data[tid + stride];
        __syncthreads();
    }
    const float sum_exp = s_data[0];
    // pass 3: normalise from the register
    if (tid < C) output[at] = exp_val / sum_exp;
}
