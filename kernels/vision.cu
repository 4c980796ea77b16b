// vision.cu: the vision-encoder kernels of Qwen3-VL (seed 000, OrinMLLM's vision_encoder_kernel.cu),
// each in its "before" and "after" form, plus a step beyond the seed where the seed's "after" is
// still far from the copy roof. All fp16 in and out, fp32 arithmetic.
//
// Token order: the vision tower keeps its patches in "merge-window order" (as Qwen2-VL and Qwen3-VL
// do): the four patches of every 2x2 window are consecutive tokens. kernellab/vision/ documents it.
#include "common.cuh"

// vision.fmaf_changes(step) builds this file with -DVL_PLAIN_FMAF: every __fmaf_rn(a, b, c) below is then
// written a * b + c, and the compiler contracts it as it likes (--fmad=true, the default).
#ifdef VL_PLAIN_FMAF
#define __fmaf_rn(a, b, c) ((a) * (b) + (c))
#endif

#ifndef LN_BLOCK
#define LN_BLOCK 256   // the seed's LayerNorm block (steps 01, 02)
#endif
#define LN_VEC 5       // step 03: 16-byte vectors per lane held in registers (5 x 32 x 8 = 1280 >= 1152)

__device__ __forceinline__ float vl_h(__half v) { return __half2float(v); }

// ---- GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) -----------------
#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f
// The seed's gelu_approx before: x * x * x, then a multiply and an add.
__device__ __forceinline__ float gelu_seed(float x) {
    float x3 = x * x * x;
    float inner = GELU_K0 * (x + GELU_K1 * x3);
    return 0.5f * x * (1.0f + tanhf(inner));
}
// The seed's gelu_approx after: __fmaf_rn(coeff, x_sq * x, x).
__device__ __forceinline__ float gelu_fma(float x) {
    float x_sq = x * x;
    float inner = GELU_K0 * __fmaf_rn(GELU_K1, x_sq * x, x);
    return 0.5f * x * (1.0f + tanhf(inner));
}
// Beyond the seed: 0.5 x (1 + tanh u) == x / (1 + exp(-2u)). One __expf (ex2.approx) and one
// approximate divide instead of tanhf's longer sequence; no cancellation in 1 + tanh u for x < 0.
// x = -inf gives -inf / inf = NaN, as the formula (and the float64 reference) does.
__device__ __forceinline__ float gelu_exp(float x) {
    float x_sq = x * x;
    float u2 = -2.0f * GELU_K0 * __fmaf_rn(GELU_K1, x_sq * x, x);
    return __fdividef(x, 1.0f + __expf(u2));
}

// The exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): Qwen3-VL's mergers (nn.GELU()).
__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

template <int FORM>
__device__ __forceinline__ float gelu_form(float x) {
    if (FORM == 0) return gelu_seed(x);
    if (FORM == 1) return gelu_fma(x);
    if (FORM == 3) return gelu_erf(x);
    return gelu_exp(x);
}

// Element-wise GELU / bias+GELU body. Thread i handles elements [V i, V i + V). The vector path
// (V = 2: one half2; V = 8: one 16-byte uint4) needs `vec` (aligned, and with a bias, C % V == 0 so
// a vector never straddles two rows); everything else, and the tail, goes element by element.
template <int V, int FORM, bool BIAS>
__device__ __forceinline__ void gelu_body(const __half* __restrict__ x, const __half* __restrict__ bias,
                                          __half* __restrict__ y, int n, int C, int vec) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    if (vec && i + V <= n) {
        if constexpr (V == 2) {
            float2 v = __half22float2(*reinterpret_cast<const __half2*>(x + i));
            if (BIAS) {
                float2 b = __half22float2(*reinterpret_cast<const __half2*>(bias + i % C));
                v.x += b.x; v.y += b.y;
            }
            *reinterpret_cast<__half2*>(y + i) = __floats2half2_rn(gelu_form<FORM>(v.x), gelu_form<FORM>(v.y));
        } else {
            Half8 a, o;
            a.u = __ldg(reinterpret_cast<const uint4*>(x + i));
            Half8 b;
            if (BIAS) b.u = __ldg(reinterpret_cast<const uint4*>(bias + i % C));
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float2 v = __half22float2(a.h2[k]);
                if (BIAS) {
                    float2 bb = __half22float2(b.h2[k]);
                    v.x += bb.x; v.y += bb.y;
                }
                o.h2[k] = __floats2half2_rn(gelu_form<FORM>(v.x), gelu_form<FORM>(v.y));
            }
            *reinterpret_cast<uint4*>(y + i) = o.u;
        }
    } else {
        const int end = min(i + V, n);
        for (int j = i; j < end; ++j) {
            float v = vl_h(x[j]);
            if (BIAS) v += vl_h(bias[j % C]);
            y[j] = __float2half(gelu_form<FORM>(v));
        }
    }
}

// =================================================================================================
// === vision_01_layernorm_scalar_tree ===
// Why: the seed's layernorm_with_bias_fp16_kernel before: one 256-thread block per token, each
// thread reads 2-byte halves one at a time (1152 scalar loads per row), and the block reduces sum
// and sum of squares in a dynamic shared-memory tree: log2(256) = 8 rounds, each ending in a
// __syncthreads (9 barriers with the first store). Then a second pass writes
// (x - mean) * rstd * w + b.
extern "C" __global__ void vision_01_layernorm_scalar_tree(const __half* __restrict__ x, const __half* __restrict__ w,
                                const __half* __restrict__ b, __half* __restrict__ y, int rows, int C, float eps) {
    extern __shared__ float s[];          // 2 * LN_BLOCK floats: sums, then sums of squares
    const int tid = threadIdx.x;
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    float sum = 0.0f, sq = 0.0f;
    for (int i = tid; i < C; i += LN_BLOCK) {
        float v = vl_h(xr[i]);
        sum += v;
        sq += v * v;
    }
    s[tid] = sum;
    s[LN_BLOCK + tid] = sq;
    __syncthreads();
#pragma unroll
    for (int k = LN_BLOCK / 2; k > 0; k >>= 1) {
        if (tid < k) {
            s[tid] += s[tid + k];
            s[LN_BLOCK + tid] += s[LN_BLOCK + tid + k];
        }
        __syncthreads();
    }
    const float mean = s[0] / C;
    float var = s[LN_BLOCK] / C - mean * mean;
    var = var < 0.0f ? 0.0f : var;        // (a NaN variance stays NaN)
    const float rstd = rsqrtf(var + eps);
    for (int i = tid; i < C; i += LN_BLOCK)
        yr[i] = __float2half((vl_h(xr[i]) - mean) * rstd * vl_h(w[i]) + vl_h(b[i]));
}

// === vision_02_layernorm_half2_shfl ===
// Why: step 01 spends one load instruction per 2 bytes and 9 block barriers per row. The seed's
// layernorm_with_bias_fp16_kernel after: half2 loads (__half22float2, 4 bytes each), sum and sum of
// squares reduced together with __shfl_xor_sync (5 rounds in registers), one static __shared__
// float2[32] for the per-warp partials (2 barriers), and the output as __fmaf_rn(norm, w, b).
// Odd C or a misaligned base (vec = 0) takes the scalar loop.
extern "C" __global__ void vision_02_layernorm_half2_shfl(const __half* __restrict__ x, const __half* __restrict__ w,
                               const __half* __restrict__ b, __half* __restrict__ y, int rows, int C, float eps,
                               int vec) {
    __shared__ float2 part[32];
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    float sum = 0.0f, sq = 0.0f;
    if (vec) {
        const __half2* x2 = reinterpret_cast<const __half2*>(xr);
        for (int i = tid; i < C / 2; i += LN_BLOCK) {
            float2 v = __half22float2(x2[i]);
            sum += v.x + v.y;
            sq = __fmaf_rn(v.x, v.x, __fmaf_rn(v.y, v.y, sq));
        }
    } else {
        for (int i = tid; i < C; i += LN_BLOCK) {
            float v = vl_h(xr[i]);
            sum += v;
            sq = __fmaf_rn(v, v, sq);
        }
    }
    sum = warp_reduce_sum(sum);
    sq = warp_reduce_sum(sq);
    if (lane == 0) part[wid] = make_float2(sum, sq);
    __syncthreads();
    if (wid == 0) {
        float2 p = lane < LN_BLOCK / 32 ? part[lane] : make_float2(0.0f, 0.0f);
        p.x = warp_reduce_sum(p.x);
        p.y = warp_reduce_sum(p.y);
        if (lane == 0) part[0] = p;
    }
    __syncthreads();
    const float mean = part[0].x / C;
    float var = part[0].y / C - mean * mean;
    var = var < 0.0f ? 0.0f : var;
    const float rstd = rsqrtf(var + eps);
    if (vec) {
        const __half2* x2 = reinterpret_cast<const __half2*>(xr);
        const __half2* w2 = reinterpret_cast<const __half2*>(w);
        const __half2* b2 = reinterpret_cast<const __half2*>(b);
        __half2* y2 = reinterpret_cast<__half2*>(yr);
        for (int i = tid; i < C / 2; i += LN_BLOCK) {
            float2 v = __half22float2(x2[i]), ww = __half22float2(w2[i]), bb = __half22float2(b2[i]);
            y2[i] = __floats2half2_rn(__fmaf_rn((v.x - mean) * rstd, ww.x, bb.x),
                                      __fmaf_rn((v.y - mean) * rstd, ww.y, bb.y));
        }
    } else {
        for (int i = tid; i < C; i += LN_BLOCK)
            yr[i] = __float2half(__fmaf_rn((vl_h(xr[i]) - mean) * rstd, vl_h(w[i]), vl_h(b[i])));
    }
}

// === vision_03_layernorm_warp_vec8 ===
// Why: (beyond the seed) step 02 still gives a 1152-wide row a whole 256-thread block (2.25 half2
// per thread, most of the block waiting at the two barriers) and reads the row from memory twice.
// Here one warp owns a row: each lane loads 16-byte vectors (8 halves) and keeps up to LN_VEC of
// them in registers, so the row is read once; mean and variance are two warp reductions with no
// shared memory and no barrier, and the variance is the two-pass sum((x - mean)^2), exact where
// E[x^2] - mean^2 cancels. Longer rows re-read the part beyond the registers; an odd or misaligned
// row (vec = 0) takes the scalar path.
__device__ __forceinline__ float h8_sum(const Half8& a) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float2 v = __half22float2(a.h2[k]);
        s += v.x + v.y;
    }
    return s;
}
__device__ __forceinline__ float h8_sqdev(const Half8& a, float mean) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float2 v = __half22float2(a.h2[k]);
        s = __fmaf_rn(v.x - mean, v.x - mean, s);
        s = __fmaf_rn(v.y - mean, v.y - mean, s);
    }
    return s;
}
__device__ __forceinline__ uint4 h8_norm(const Half8& a, uint4 wv, uint4 bv, float mean, float rstd) {
    Half8 w8, b8, o;
    w8.u = wv;
    b8.u = bv;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float2 v = __half22float2(a.h2[k]), ww = __half22float2(w8.h2[k]), bb = __half22float2(b8.h2[k]);
        o.h2[k] = __floats2half2_rn(__fmaf_rn((v.x - mean) * rstd, ww.x, bb.x),
                                    __fmaf_rn((v.y - mean) * rstd, ww.y, bb.y));
    }
    return o.u;
}

extern "C" __global__ void vision_03_layernorm_warp_vec8(const __half* __restrict__ x, const __half* __restrict__ w,
                              const __half* __restrict__ b, __half* __restrict__ y, int rows, int C, float eps,
                              int vec) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const __half* xr = x + (size_t)row * C;
    __half* yr = y + (size_t)row * C;
    if (vec) {
        const int nv = C >> 3;
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        const uint4* wv = reinterpret_cast<const uint4*>(w);
        const uint4* bv = reinterpret_cast<const uint4*>(b);
        uint4* yv = reinterpret_cast<uint4*>(yr);
        Half8 r[LN_VEC];
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_VEC; ++k) {
            const int i = k * 32 + lane;
            if (i < nv) {
                r[k].u = __ldg(xv + i);
                sum += h8_sum(r[k]);
            }
        }
        for (int i = LN_VEC * 32 + lane; i < nv; i += 32) {
            Half8 a;
            a.u = __ldg(xv + i);
            sum += h8_sum(a);
        }
        const float mean = warp_reduce_sum(sum) / C;
        float sq = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_VEC; ++k)
            if (k * 32 + lane < nv) sq += h8_sqdev(r[k], mean);
        for (int i = LN_VEC * 32 + lane; i < nv; i += 32) {
            Half8 a;
            a.u = __ldg(xv + i);
            sq += h8_sqdev(a, mean);
        }
        const float rstd = rsqrtf(warp_reduce_sum(sq) / C + eps);
#pragma unroll
        for (int k = 0; k < LN_VEC; ++k) {
            const int i = k * 32 + lane;
            if (i < nv) yv[i] = h8_norm(r[k], __ldg(wv + i), __ldg(bv + i), mean, rstd);
        }
        for (int i = LN_VEC * 32 + lane; i < nv; i += 32) {
            Half8 a;
            a.u = __ldg(xv + i);
            yv[i] = h8_norm(a, __ldg(wv + i), __ldg(bv + i), mean, rstd);
        }
    } else {
        float sum = 0.0f;
        for (int i = lane; i < C; i += 32) sum += vl_h(xr[i]);
        const float mean = warp_reduce_sum(sum) / C;
        float sq = 0.0f;
        for (int i = lane; i < C; i += 32) {
            float d = vl_h(xr[i]) - mean;
            sq = __fmaf_rn(d, d, sq);
        }
        const float rstd = rsqrtf(warp_reduce_sum(sq) / C + eps);
        for (int i = lane; i < C; i += 32)
            yr[i] = __float2half(__fmaf_rn((vl_h(xr[i]) - mean) * rstd, vl_h(w[i]), vl_h(b[i])));
    }
}

// =================================================================================================
// === vision_04_gelu_half2 ===
// Why: the seed's gelu_fp16_kernel before: 256 threads, one half2 (4 bytes) per thread, and the
// seed's gelu_approx before (x * x * x, tanhf). Used 4 times per image, in the merger MLP.
extern "C" __global__ void vision_04_gelu_half2(const __half* __restrict__ x, __half* __restrict__ y, int n,
                                                int vec) {
    gelu_body<2, 0, false>(x, nullptr, y, n, 1, vec);
}

// === vision_05_gelu_vec8 ===
// Why: step 04 moves 4 bytes per thread, so a 16384 x 4304 activation needs 35 M threads. The
// seed's gelu_fp16_kernel after: 8 halves (one 16-byte load, one 16-byte store) per thread, a
// quarter of the threads and memory instructions, and gelu_approx's __fmaf_rn form.
extern "C" __global__ void vision_05_gelu_vec8(const __half* __restrict__ x, __half* __restrict__ y, int n,
                                               int vec) {
    gelu_body<8, 1, false>(x, nullptr, y, n, 1, vec);
}

// === vision_06_gelu_vec8_exp ===
// Why: (beyond the seed) with 16-byte accesses the instruction count of tanhf itself is what is
// left. One change: 0.5 x (1 + tanh u) computed as x / (1 + exp(-2u)), one ex2.approx and one
// approximate divide per element. Same formula, the same tanh approximation of GELU.
extern "C" __global__ void vision_06_gelu_vec8_exp(const __half* __restrict__ x, __half* __restrict__ y, int n,
                                                   int vec) {
    gelu_body<8, 2, false>(x, nullptr, y, n, 1, vec);
}

// === vision_30_gelu_erf_vec8 ===
// Why: (beyond the seed) the seed draws every GELU of the tower in the tanh form; transformers'
// Qwen3-VL uses the exact form in its four mergers (nn.GELU(), erf), the tanh form only in the
// blocks' MLP. Step 05's layout (one 16-byte load and store per thread), erff in place of tanhf.
extern "C" __global__ void vision_30_gelu_erf_vec8(const __half* __restrict__ x, __half* __restrict__ y, int n,
                                                   int vec) {
    gelu_body<8, 3, false>(x, nullptr, y, n, 1, vec);
}

// === vision_07_bias_gelu_half2 ===
// Why: the seed's bias_gelu_fp16_kernel before: gelu(x + bias[col]) after the fc1 GEMM of every
// ViT block (intermediate 4304), one half2 per thread, col = i % C.
extern "C" __global__ void vision_07_bias_gelu_half2(const __half* __restrict__ x, const __half* __restrict__ bias,
                                                     __half* __restrict__ y, int n, int C, int vec) {
    gelu_body<2, 0, true>(x, bias, y, n, C, vec);
}

// === vision_08_bias_gelu_vec8 ===
// Why: the seed's bias_gelu_fp16_kernel after: 8 halves per thread (16-byte loads of x and of the
// bias, 4304 % 8 == 0 so a vector never straddles two rows), gelu_approx with __fmaf_rn.
extern "C" __global__ void vision_08_bias_gelu_vec8(const __half* __restrict__ x, const __half* __restrict__ bias,
                                                    __half* __restrict__ y, int n, int C, int vec) {
    gelu_body<8, 1, true>(x, bias, y, n, C, vec);
}

// === vision_09_bias_gelu_vec8_exp ===
// Why: (beyond the seed) as step 06, tanh through one __expf and one approximate divide.
extern "C" __global__ void vision_09_bias_gelu_vec8_exp(const __half* __restrict__ x,
                                                        const __half* __restrict__ bias, __half* __restrict__ y,
                                                        int n, int C, int vec) {
    gelu_body<8, 2, true>(x, bias, y, n, C, vec);
}

// =================================================================================================
// === vision_10_bias_residual_scalar ===
// Why: the seed's bias_add_residual_fp16_kernel before, the most called kernel of the tower
// (27 x 3 + 4 x 2 = 89 calls per image): one half per thread, 2 bytes per load, and the
// `residual != nullptr` test made by every thread. residual == nullptr is the QKV-bias form.
// The residual is added before the (small) bias: x + residual is exact in fp32 for fp16 inputs of
// one scale, so a sum that cancels stays exact.
extern "C" __global__ void vision_10_bias_residual_scalar(const __half* __restrict__ x,
                                                          const __half* __restrict__ bias,
                                                          const __half* __restrict__ residual,
                                                          __half* __restrict__ y, int n, int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = vl_h(x[i]);
    if (residual != nullptr) v += vl_h(residual[i]);
    y[i] = __float2half(v + vl_h(bias[i % C]));
}

// === vision_11_bias_residual_vec8 ===
// Why: step 10 spends a memory instruction per 2 bytes. The seed's bias_add_residual_fp16_kernel
// after: 8 halves per thread (16-byte loads of x, bias and residual, 16-byte store), the null test
// hoisted out of the unrolled loop into two paths. C % 8 != 0 or a misaligned base (vec = 0) goes
// element by element.
extern "C" __global__ void vision_11_bias_residual_vec8(const __half* __restrict__ x,
                                                        const __half* __restrict__ bias,
                                                        const __half* __restrict__ residual,
                                                        __half* __restrict__ y, int n, int C, int vec) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    if (vec && i + 8 <= n) {
        Half8 a, bb, o;
        a.u = __ldg(reinterpret_cast<const uint4*>(x + i));
        bb.u = __ldg(reinterpret_cast<const uint4*>(bias + i % C));
        if (residual != nullptr) {
            Half8 r;
            r.u = __ldg(reinterpret_cast<const uint4*>(residual + i));
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float2 v = __half22float2(a.h2[k]), rv = __half22float2(r.h2[k]), bv = __half22float2(bb.h2[k]);
                o.h2[k] = __floats2half2_rn(v.x + rv.x + bv.x, v.y + rv.y + bv.y);
            }
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float2 v = __half22float2(a.h2[k]), bv = __half22float2(bb.h2[k]);
                o.h2[k] = __floats2half2_rn(v.x + bv.x, v.y + bv.y);
            }
        }
        *reinterpret_cast<uint4*>(y + i) = o.u;
    } else {
        const int end = min(i + 8, n);
        for (int j = i; j < end; ++j) {
            float v = vl_h(x[j]);
            if (residual != nullptr) v += vl_h(residual[j]);
            y[j] = __float2half(v + vl_h(bias[j % C]));
        }
    }
}

// =================================================================================================
// === vision_12_patch_embed_scalar ===
// Why: the seed's patch_embed_conv3d_fp16_kernel before. The Conv3d (kernel = stride = 2 x 16 x 16,
// 3 channels) over non-overlapping patches is a matrix product: out[n, o] = bias[o] +
// sum_i patches[n, i] * weight[o, i], with patch_dim K = 1536. One thread per output channel,
// one block row per patch, a scalar loop of 1536 multiply-adds.
extern "C" __global__ void vision_12_patch_embed_scalar(const __half* __restrict__ patches,
                                                        const __half* __restrict__ weight,
                                                        const __half* __restrict__ bias,
                                                        __half* __restrict__ y, int N, int O, int K) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y;
    if (o >= O) return;
    const __half* p = patches + (size_t)n * K;
    const __half* f = weight + (size_t)o * K;
    float sum = 0.0f;
    for (int i = 0; i < K; ++i) sum += vl_h(p[i]) * vl_h(f[i]);
    y[(size_t)n * O + o] = __float2half(sum + vl_h(bias[o]));
}

// === vision_13_patch_embed_half2_fma ===
// Why: step 12 issues two 2-byte loads per multiply-add. The seed's after: half2 loads of the patch
// and the filter (768 instead of 1536 of each), __fmaf_rn for the products. Odd K or a misaligned
// base (vec = 0) keeps the scalar loop.
extern "C" __global__ void vision_13_patch_embed_half2_fma(const __half* __restrict__ patches,
                                                           const __half* __restrict__ weight,
                                                           const __half* __restrict__ bias,
                                                           __half* __restrict__ y, int N, int O, int K, int vec) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y;
    if (o >= O) return;
    const __half* p = patches + (size_t)n * K;
    const __half* f = weight + (size_t)o * K;
    float sum = 0.0f;
    if (vec) {
        const __half2* p2 = reinterpret_cast<const __half2*>(p);
        const __half2* f2 = reinterpret_cast<const __half2*>(f);
        for (int i = 0; i < K / 2; ++i) {
            float2 a = __half22float2(p2[i]), c = __half22float2(f2[i]);
            sum = __fmaf_rn(a.x, c.x, sum);
            sum = __fmaf_rn(a.y, c.y, sum);
        }
    } else {
        for (int i = 0; i < K; ++i) sum = __fmaf_rn(vl_h(p[i]), vl_h(f[i]), sum);
    }
    y[(size_t)n * O + o] = __float2half(sum + vl_h(bias[o]));
}

// =================================================================================================
// === vision_14_pos_interp_mul_add ===
// Why: the seed's pos_embed_interpolate_fp16_kernel before. The learned position table is a
// 48 x 48 grid; an image's grid_h x grid_w patches each take a bilinear mix of 4 table rows:
// out[n, c] = w0 t[i0, c] + w1 t[i1, c] + w2 t[i2, c] + w3 t[i3, c] (4 multiplies + 3 adds as
// written). idx / wts [n, 4] come from the launcher (the same host-side tables Qwen3-VL builds).
extern "C" __global__ void vision_14_pos_interp_mul_add(const __half* __restrict__ table,
                                                        const int* __restrict__ idx,
                                                        const float* __restrict__ wts,
                                                        __half* __restrict__ y, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y;
    if (c >= C) return;
    const int* id = idx + 4 * n;
    const float* wt = wts + 4 * n;
    float v = wt[0] * vl_h(table[(size_t)id[0] * C + c]) + wt[1] * vl_h(table[(size_t)id[1] * C + c]) +
              wt[2] * vl_h(table[(size_t)id[2] * C + c]) + wt[3] * vl_h(table[(size_t)id[3] * C + c]);
    y[(size_t)n * C + c] = __float2half(v);
}

// === vision_15_pos_interp_fma ===
// Why: the seed's after: the same sum as 3 __fmaf_rn + 1 multiply. (Look at step 14's PTX first:
// nvcc contracts a * b + c into fma on its own, so this step may change nothing at all.)
extern "C" __global__ void vision_15_pos_interp_fma(const __half* __restrict__ table, const int* __restrict__ idx,
                                                    const float* __restrict__ wts, __half* __restrict__ y,
                                                    int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y;
    if (c >= C) return;
    const int* id = idx + 4 * n;
    const float* wt = wts + 4 * n;
    float v = wt[3] * vl_h(table[(size_t)id[3] * C + c]);
    v = __fmaf_rn(wt[2], vl_h(table[(size_t)id[2] * C + c]), v);
    v = __fmaf_rn(wt[1], vl_h(table[(size_t)id[1] * C + c]), v);
    v = __fmaf_rn(wt[0], vl_h(table[(size_t)id[0] * C + c]), v);
    y[(size_t)n * C + c] = __float2half(v);
}

// =================================================================================================
// === vision_16_spatial_merge_scalar ===
// Why: the seed's spatial_merge_fp16_kernel before: [N, C] -> [N/4, 4C], one half per thread, and
// the seed's index remap: output token t, position j of its 4C row, reads input token 4t + j / C,
// channel j % C. In merge-window order that address is 4tC + j: the remap is the identity.
extern "C" __global__ void vision_16_spatial_merge_scalar(const __half* __restrict__ x, __half* __restrict__ y,
                                                          int n_out, int C) {
    const int t = blockIdx.x;
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= 4 * C) return;
    const int patch = j / C, h = j % C;
    y[(size_t)t * 4 * C + j] = x[((size_t)t * 4 + patch) * C + h];
}

// === vision_17_spatial_merge_vec8 ===
// Why: the seed's after: 8 halves per thread (16-byte load and store); C % 8 == 0, so a vector never
// straddles two patches. grid (N/4, ceil(4C / 8 / 256)) as the seed launches it.
extern "C" __global__ void vision_17_spatial_merge_vec8(const __half* __restrict__ x, __half* __restrict__ y,
                                                        int n_out, int C, int vec) {
    const int t = blockIdx.x;
    const int j = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if (j >= 4 * C) return;
    if (vec) {
        const int patch = j / C, h = j % C;
        *reinterpret_cast<uint4*>(y + (size_t)t * 4 * C + j) =
            __ldg(reinterpret_cast<const uint4*>(x + ((size_t)t * 4 + patch) * C + h));
    } else {
        const int end = min(j + 8, 4 * C);
        for (int k = j; k < end; ++k) y[(size_t)t * 4 * C + k] = x[((size_t)t * 4 + k / C) * C + k % C];
    }
}

// =================================================================================================
// Split + 2-D vision RoPE + transpose: qkv [N, 3, H, D] -> q, k, v [H, N, D]. Rotate-half on Q and K:
// for d < D/2, out[d] = x[d] cos - x[d + D/2] sin and out[d + D/2] = x[d + D/2] cos + x[d] sin, with
// cos/sin [N, D/2] float32 per token (kernellab/vision/reference.py: rope_tables).

// === vision_18_split_rope_scalar ===
// Why: the seed's fused_split_rope_transpose_kernel before: one 64-thread block per (head, token),
// threads d < D/2 rotate one pair of Q and one of K with 4 scalar multiplies each, and V is copied
// one half at a time. (It already replaced three kernels: split, rope and transpose.)
extern "C" __global__ void vision_18_split_rope_scalar(const __half* __restrict__ qkv, const float* __restrict__ cosv,
                                                       const float* __restrict__ sinv, __half* __restrict__ q,
                                                       __half* __restrict__ k, __half* __restrict__ v,
                                                       int N, int H, int D) {
    const int h = blockIdx.x, t = blockIdx.y, half = D / 2;
    const __half* src = qkv + (size_t)t * 3 * H * D + (size_t)h * D;
    const size_t dst = ((size_t)h * N + t) * D;
    for (int d = threadIdx.x; d < half; d += blockDim.x) {
        const float c = cosv[(size_t)t * half + d], s = sinv[(size_t)t * half + d];
        float a = vl_h(src[d]), b = vl_h(src[d + half]);
        q[dst + d] = __float2half(a * c - b * s);
        q[dst + d + half] = __float2half(b * c + a * s);
        a = vl_h(src[H * D + d]);
        b = vl_h(src[H * D + d + half]);
        k[dst + d] = __float2half(a * c - b * s);
        k[dst + d + half] = __float2half(b * c + a * s);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) v[dst + d] = src[2 * H * D + d];
}

// === vision_19_split_rope_fma ===
// Why: the seed's after: block 128, the rotation as __fmaf_rn(q1, cos, -(q2 * sin)), and V copied
// with 16-byte loads (D = 72: 9 per head). One change of launch shape, one of arithmetic, one of
// width: the lab's ablation separates them. vec = 0 (D % 8 != 0, misaligned) copies V by halves.
extern "C" __global__ void vision_19_split_rope_fma(const __half* __restrict__ qkv, const float* __restrict__ cosv,
                                                    const float* __restrict__ sinv, __half* __restrict__ q,
                                                    __half* __restrict__ k, __half* __restrict__ v,
                                                    int N, int H, int D, int vec) {
    const int h = blockIdx.x, t = blockIdx.y, half = D / 2;
    const __half* src = qkv + (size_t)t * 3 * H * D + (size_t)h * D;
    const size_t dst = ((size_t)h * N + t) * D;
    for (int d = threadIdx.x; d < half; d += blockDim.x) {
        const float c = cosv[(size_t)t * half + d], s = sinv[(size_t)t * half + d];
        float a = vl_h(src[d]), b = vl_h(src[d + half]);
        q[dst + d] = __float2half(__fmaf_rn(a, c, -(b * s)));
        q[dst + d + half] = __float2half(__fmaf_rn(b, c, a * s));
        a = vl_h(src[H * D + d]);
        b = vl_h(src[H * D + d + half]);
        k[dst + d] = __float2half(__fmaf_rn(a, c, -(b * s)));
        k[dst + d + half] = __float2half(__fmaf_rn(b, c, a * s));
    }
    if (vec) {
        const uint4* vs = reinterpret_cast<const uint4*>(src + 2 * H * D);
        uint4* vd = reinterpret_cast<uint4*>(v + dst);
        for (int d = threadIdx.x; d < D / 8; d += blockDim.x) vd[d] = __ldg(vs + d);
    } else {
        for (int d = threadIdx.x; d < D; d += blockDim.x) v[dst + d] = src[2 * H * D + d];
    }
}

// === vision_20_split_rope_vec ===
// Why: (beyond the seed) steps 18-19 give each (head, token) its own block: 144 bytes of Q in a
// 64- or 128-thread block, most threads idle, tiny blocks by the million. Here every thread moves
// 16 bytes: item (tile, part, head, token in tile, c) reads 4 + 4 halves of a Q or K pair (two
// 8-byte loads, 4 cos/sin as float4) and writes them rotated, or copies 8 halves of V (one 16-byte
// load/store). SR_TILE = 8 tokens per tile: the 72 threads of one (part, head) write 8 x 144 =
// 1152 contiguous bytes of q/k/v[head] (whole sectors), and read 144-byte runs whose neighbours
// (the next head) the next 72 threads read. vec = 0 (D % 8 != 0, misaligned) does the same items
// element by element.
#ifndef SR_TILE
#define SR_TILE 8
#endif
extern "C" __global__ void vision_20_split_rope_vec(const __half* __restrict__ qkv, const float* __restrict__ cosv,
                                                    const float* __restrict__ sinv, __half* __restrict__ q,
                                                    __half* __restrict__ k, __half* __restrict__ v,
                                                    int N, int H, int D, int vec) {
    const int P = (D + 7) / 8;                    // items per (token, part, head)
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long per_tile = 3LL * H * SR_TILE * P;
    const long long tile = item / per_tile;
    int r = (int)(item % per_tile);
    const int part = r / (H * SR_TILE * P);
    r %= H * SR_TILE * P;
    const int h = r / (SR_TILE * P);
    r %= SR_TILE * P;
    const int c = r % P;
    const long long tt = tile * SR_TILE + r / P;
    if (tt >= N) return;
    const int t = (int)tt;
    const int half = D / 2;
    const __half* src = qkv + ((size_t)t * 3 + part) * H * D + (size_t)h * D;
    const size_t dst = ((size_t)h * N + t) * D;
    if (part == 2) {
        if (vec) {
            *reinterpret_cast<uint4*>(v + dst + 8 * c) = __ldg(reinterpret_cast<const uint4*>(src + 8 * c));
        } else {
            const int end = min(8 * c + 8, D);
            for (int d = 8 * c; d < end; ++d) v[dst + d] = src[d];
        }
        return;
    }
    __half* out = part == 0 ? q : k;
    const float* cs = cosv + (size_t)t * half;
    const float* sn = sinv + (size_t)t * half;
    if (vec) {
        union { uint2 u; __half2 h2[2]; } a, b, oa, ob;
        a.u = __ldg(reinterpret_cast<const uint2*>(src + 4 * c));
        b.u = __ldg(reinterpret_cast<const uint2*>(src + half + 4 * c));
        const float4 c4 = __ldg(reinterpret_cast<const float4*>(cs + 4 * c));
        const float4 s4 = __ldg(reinterpret_cast<const float4*>(sn + 4 * c));
        const float cc[4] = {c4.x, c4.y, c4.z, c4.w}, ss[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float2 x1 = __half22float2(a.h2[j]), x2 = __half22float2(b.h2[j]);
            const float c0 = cc[2 * j], c1 = cc[2 * j + 1], s0 = ss[2 * j], s1 = ss[2 * j + 1];
            oa.h2[j] = __floats2half2_rn(__fmaf_rn(x1.x, c0, -(x2.x * s0)), __fmaf_rn(x1.y, c1, -(x2.y * s1)));
            ob.h2[j] = __floats2half2_rn(__fmaf_rn(x2.x, c0, x1.x * s0), __fmaf_rn(x2.y, c1, x1.y * s1));
        }
        *reinterpret_cast<uint2*>(out + dst + 4 * c) = oa.u;
        *reinterpret_cast<uint2*>(out + dst + half + 4 * c) = ob.u;
    } else {
        const int end = min(4 * c + 4, half);
        for (int d = 4 * c; d < end; ++d) {
            const float a = vl_h(src[d]), b = vl_h(src[d + half]);
            out[dst + d] = __float2half(__fmaf_rn(a, cs[d], -(b * sn[d])));
            out[dst + d + half] = __float2half(__fmaf_rn(b, cs[d], a * sn[d]));
        }
    }
}

// =================================================================================================
// === vision_21_transpose_half2 ===
// Why: the seed's transpose_head_token_kernel before: attention's output [H, N, D] back to
// [N, H * D] for the output projection, one half2 (4 bytes) per thread: grid N * 16 * 36.
// Item (t, h, c) moves elements [2c, 2c + 2) of one head row; items go in output order, so the
// writes are one sequential stream (whole 32-byte sectors) and the reads are 144-byte runs whose
// neighbours (token t + 1) the next threads read. Odd D or a misaligned base (vec = 0) moves
// them one at a time.
extern "C" __global__ void vision_21_transpose_half2(const __half* __restrict__ o, __half* __restrict__ y,
                                                     int H, int N, int D, int vec) {
    const int P = (D + 1) / 2;
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (long long)H * N * P) return;
    const int c = (int)(item % P);
    const long long th = item / P;
    const int h = (int)(th % H), t = (int)(th / H);
    const __half* src = o + ((size_t)h * N + t) * D;
    __half* dst = y + (size_t)t * H * D + (size_t)h * D;
    if (vec) {
        *reinterpret_cast<__half2*>(dst + 2 * c) = *reinterpret_cast<const __half2*>(src + 2 * c);
    } else {
        const int end = min(2 * c + 2, D);
        for (int d = 2 * c; d < end; ++d) dst[d] = src[d];
    }
}

// === vision_22_transpose_vec8 ===
// Why: the seed's after: 8 halves (16 bytes) per thread, a quarter of the threads (grid N * 16 * 9
// for D = 72), with the seed's fallback `vec_size = (head_dim & 7) == 0 ? 8 : 2` (the launcher picks
// vec = 8, 2, or 1 for odd D or a misaligned base; uniform across the grid, so no divergence).
extern "C" __global__ void vision_22_transpose_vec8(const __half* __restrict__ o, __half* __restrict__ y,
                                                    int H, int N, int D, int vec) {
    const int P = (D + vec - 1) / vec;
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (long long)H * N * P) return;
    const int c = (int)(item % P);
    const long long th = item / P;
    const int h = (int)(th % H), t = (int)(th / H);
    const __half* src = o + ((size_t)h * N + t) * D;
    __half* dst = y + (size_t)t * H * D + (size_t)h * D;
    if (vec == 8) {
        *reinterpret_cast<uint4*>(dst + 8 * c) = __ldg(reinterpret_cast<const uint4*>(src + 8 * c));
    } else if (vec == 2) {
        *reinterpret_cast<__half2*>(dst + 2 * c) = *reinterpret_cast<const __half2*>(src + 2 * c);
    } else {
        dst[c] = src[c];
    }
}

// =================================================================================================
// === vision_23_softmax_half2_shfl ===
// Why: the seed's vision_softmax_fp16_kernel, which the report keeps unchanged ("already
// optimised"): one 256-thread block per row of the 16 x N x N attention scores, half2 loads, fp32
// max and sum through warp shuffles (block_reduce), three passes over the row. The lab sets it
// against lab 01's fp16 step. Odd rows or a misaligned base (vec = 0) read halves.
extern "C" __global__ void vision_23_softmax_half2_shfl(const __half* __restrict__ x, __half* __restrict__ y, int rows, int C, int vec) {
    __shared__ float scratch[33];
    const __half* xr = x + (size_t)blockIdx.x * C;
    __half* yr = y + (size_t)blockIdx.x * C;
    const __half2* x2 = reinterpret_cast<const __half2*>(xr);
    __half2* y2 = reinterpret_cast<__half2*>(yr);
    const int n2 = vec ? C / 2 : 0;
    float m = -KL_INF;
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        float2 v = __half22float2(x2[i]);
        m = fmaxf(m, fmaxf(v.x, v.y));
    }
    for (int i = 2 * n2 + threadIdx.x; i < C; i += blockDim.x) m = fmaxf(m, vl_h(xr[i]));
    m = block_reduce_max(m, scratch);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        float2 v = __half22float2(x2[i]);
        s += __expf(v.x - m) + __expf(v.y - m);
    }
    for (int i = 2 * n2 + threadIdx.x; i < C; i += blockDim.x) s += __expf(vl_h(xr[i]) - m);
    s = block_reduce_sum(s, scratch);
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        float2 v = __half22float2(x2[i]);
        y2[i] = __floats2half2_rn(__expf(v.x - m) * inv, __expf(v.y - m) * inv);
    }
    for (int i = 2 * n2 + threadIdx.x; i < C; i += blockDim.x) yr[i] = __float2half(__expf(vl_h(xr[i]) - m) * inv);
}

// =================================================================================================
// === vision_24_replace_image_tokens ===
// Why: the seed's replace_image_tokens_kernel: the merger's output rows replace the text
// embedding's image-placeholder rows, emb[pos[i], :] = feats[i, :], in place. One block per image
// token, 16-byte copies where the row allows (vec), halves otherwise. vision.replace_image_tokens
// raises on an out-of-range position before the launch; the kernel still never writes outside
// the embedding (such a row is skipped), so a timed call needs no device-to-host check.
extern "C" __global__ void vision_24_replace_image_tokens(__half* __restrict__ emb, const __half* __restrict__ feats,
                                                          const int* __restrict__ pos, int n_img, int rows, int C,
                                                          int vec) {
    const int i = blockIdx.x;
    const int p = pos[i];
    if (p < 0 || p >= rows) return;
    const size_t row = (size_t)p;
    if (vec) {
        const uint4* s = reinterpret_cast<const uint4*>(feats + (size_t)i * C);
        uint4* d = reinterpret_cast<uint4*>(emb + row * C);
        for (int j = threadIdx.x; j < C / 8; j += blockDim.x) d[j] = __ldg(s + j);
    } else {
        for (int j = threadIdx.x; j < C; j += blockDim.x) emb[row * C + j] = feats[(size_t)i * C + j];
    }
}

// =================================================================================================
// Steps 25-28: beyond the report, each against the step it follows (09, 17, 20, 22); the lab's targets
// table says, per recorded device, which target each meets.

// === vision_25_bias_gelu_vec8_x2 ===
// Why: (beyond the seed) step 09 moves one 16-byte vector per thread: the load of x and the load
// of the bias are the only bytes it has in flight before it must wait. Here each thread issues
// the loads of BG_U vectors (blockDim.x vectors apart, so a warp's accesses stay contiguous)
// before it uses the first, the same GELU (x / (1 + exp(-2u))) on each. A block whose vectors
// are not all whole (the tail) or a misaligned base (vec = 0) goes element by element.
// A second change rides along: the index arithmetic is unsigned 32-bit (I = unsigned: `i % C` is
// rem.u32), where step 09's is signed int (rem.s32). The body takes both as switches (U vectors
// per thread, the index type I); the ablations below undo one each.
#ifndef BG_U
#define BG_U 2
#endif
template <int U, typename I>
__device__ __forceinline__ void bias_gelu_x(const __half* __restrict__ x, const __half* __restrict__ bias,
                                            __half* __restrict__ y, int n, int C, int vec) {
    const I bd = blockDim.x;
    const I base = (I)blockIdx.x * bd * U + (I)threadIdx.x;      // vector index
    const I last = (base + (U - 1) * bd) * (I)8;
    if (vec && last + (I)8 <= (I)n) {
        Half8 a[U], b[U];
#pragma unroll
        for (int k = 0; k < U; ++k) {
            const I i = (base + k * bd) * (I)8;
            a[k].u = __ldg(reinterpret_cast<const uint4*>(x + i));
            b[k].u = __ldg(reinterpret_cast<const uint4*>(bias + i % (I)C));
        }
#pragma unroll
        for (int k = 0; k < U; ++k) {
            Half8 o;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float2 v = __half22float2(a[k].h2[j]), bb = __half22float2(b[k].h2[j]);
                o.h2[j] = __floats2half2_rn(gelu_exp(v.x + bb.x), gelu_exp(v.y + bb.y));
            }
            *reinterpret_cast<uint4*>(y + (base + k * bd) * (I)8) = o.u;
        }
    } else {
        for (int k = 0; k < U; ++k) {
            const I i = (base + k * bd) * (I)8;
            if (i >= (I)n) break;
            const I end = min(i + (I)8, (I)n);
            for (I j = i; j < end; ++j)
                y[j] = __float2half(gelu_exp(vl_h(x[j]) + vl_h(bias[j % (I)C])));
        }
    }
}

extern "C" __global__ void vision_25_bias_gelu_vec8_x2(const __half* __restrict__ x,
                                                       const __half* __restrict__ bias, __half* __restrict__ y,
                                                       int n, int C, int vec) {
    bias_gelu_x<BG_U, unsigned>(x, bias, y, n, C, vec);
}

// === vision_25_ablate_one_vector ===
// Why: ablation of step 25: its body with one vector per thread (U = 1, the grid twice as large),
// the unsigned indices kept. Against step 25: what the second vector in flight is worth alone.
extern "C" __global__ void vision_25_ablate_one_vector(const __half* __restrict__ x, const __half* __restrict__ bias,
                                                       __half* __restrict__ y, int n, int C, int vec) {
    bias_gelu_x<1, unsigned>(x, bias, y, n, C, vec);
}

// === vision_25_ablate_signed_index ===
// Why: ablation of step 25: its body with step 09's signed int indices (rem.s32 for the bias
// column), two vectors per thread kept. Against step 25: what the unsigned arithmetic is worth alone.
extern "C" __global__ void vision_25_ablate_signed_index(const __half* __restrict__ x,
                                                         const __half* __restrict__ bias, __half* __restrict__ y,
                                                         int n, int C, int vec) {
    bias_gelu_x<BG_U, int>(x, bias, y, n, C, vec);
}

// === vision_26_spatial_merge_stream ===
// Why: (beyond the seed) in merge-window order the merge's remap is the identity (step 16), so
// the merge is a flat copy of N * C halves, and step 17's per-thread `j / C`, `j % C` and its
// one vector per thread need not be there (whether dropping them pays is the lab's measured
// sentence, per GPU). Here each thread issues SM_U independent 16-byte loads
// (gridDim x blockDim vectors apart, so a warp's accesses stay contiguous) before its first
// store. The launcher gives it N * C / (8 x 256 x SM_U) blocks, so every thread makes exactly one
// pass; the loop is grid-stride, so the ablation `ablate_26_resident_grid` runs the same kernel
// over one wave of resident blocks (bench.resident_grid) instead. vec = 0 (C % 8 != 0,
// misaligned) copies halves.
#ifndef SM_U
#define SM_U 4
#endif
extern "C" __global__ void vision_26_spatial_merge_stream(const __half* __restrict__ x, __half* __restrict__ y,
                                                          int n_out, int C, int vec) {
    const long long n = 4LL * n_out * C;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (vec) {
        const uint4* s = reinterpret_cast<const uint4*>(x);
        uint4* d = reinterpret_cast<uint4*>(y);
        const long long n8 = n >> 3;
#pragma unroll 1
        for (; i + (SM_U - 1) * stride < n8; i += SM_U * stride) {
            uint4 v[SM_U];
#pragma unroll
            for (int k = 0; k < SM_U; ++k) v[k] = __ldg(s + i + k * stride);
#pragma unroll
            for (int k = 0; k < SM_U; ++k) d[i + k * stride] = v[k];
        }
        for (; i < n8; i += stride) d[i] = __ldg(s + i);
    } else {
        for (; i < n; i += stride) y[i] = x[i];
    }
}

// === vision_27_split_rope_tile ===
// Why: (beyond the seed) step 20 decodes every thread's item with 64-bit divisions (item /
// per_tile, item % per_tile: a long software sequence each) and moves one item per thread. Here a
// 2-D grid, (token tile of SR2_TILE tokens, part q/k/v), gives each block its part for free, the
// rest of the index is 32-bit, and each thread issues the loads of SR2_U items before it stores
// the first. Items inside a block go (head, token, c), so the writes of one head are one
// contiguous run of SR2_TILE x D halves. Needs D % 8 == 0 and 16-byte alignment (the launcher
// falls back to step 20 otherwise).
// That is four changes at once; the body takes each as a switch (TILE tokens per block, U items in
// flight, J the type of the item decode, ONEPASS: a grid.z of blocks so each thread makes one pass
// instead of looping over the tile), and the ablations below undo one each.
#ifndef SR2_TILE
#define SR2_TILE 16
#endif
#ifndef SR2_U
#define SR2_U 3
#endif
template <int TILE, int U, typename J, bool ONEPASS>
__device__ __forceinline__ void split_rope_tile(const __half* __restrict__ qkv, const float* __restrict__ cosv,
                                                const float* __restrict__ sinv, __half* __restrict__ q,
                                                __half* __restrict__ k, __half* __restrict__ v,
                                                int N, int H, int D) {
    const int P = D >> 3, part = blockIdx.y, half = D >> 1;
    const int t0 = blockIdx.x * TILE;
    const int nt = min(TILE, N - t0);
    const int TP = nt * P, total = H * TP;
    if (part == 2) {
#pragma unroll 1
        for (int l0 = (ONEPASS ? blockIdx.z * U * blockDim.x : 0) + threadIdx.x; l0 < total;
             l0 += (ONEPASS ? gridDim.z : 1) * U * blockDim.x) {
            uint4 val[U];
            size_t at[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int l = l0 + u * blockDim.x;
                if (l < total) {
                    const J h = J(l) / TP, r = J(l) - h * TP, t = r / P, c = r - t * P;
                    at[u] = ((size_t)h * N + t0) * D + 8 * r;
                    val[u] = __ldg(reinterpret_cast<const uint4*>(qkv + ((size_t)(t0 + t) * 3 + 2) * H * D
                                                                  + (size_t)h * D + 8 * c));
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (l0 + u * blockDim.x < total) *reinterpret_cast<uint4*>(v + at[u]) = val[u];
        }
        return;
    }
    __half* out = part == 0 ? q : k;
#pragma unroll 1
    for (int l0 = (ONEPASS ? blockIdx.z * U * blockDim.x : 0) + threadIdx.x; l0 < total;
         l0 += (ONEPASS ? gridDim.z : 1) * U * blockDim.x) {
        union { uint2 u; __half2 h2[2]; } a[U], b[U];
        float4 c4[U], s4[U];
        size_t at[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int l = l0 + u * blockDim.x;
            if (l < total) {
                const J h = J(l) / TP, r = J(l) - h * TP, t = r / P, c = r - t * P;
                const __half* src = qkv + ((size_t)(t0 + t) * 3 + part) * H * D + (size_t)h * D;
                at[u] = ((size_t)h * N + t0 + t) * D + 4 * c;
                a[u].u = __ldg(reinterpret_cast<const uint2*>(src + 4 * c));
                b[u].u = __ldg(reinterpret_cast<const uint2*>(src + half + 4 * c));
                c4[u] = __ldg(reinterpret_cast<const float4*>(cosv + (size_t)(t0 + t) * half + 4 * c));
                s4[u] = __ldg(reinterpret_cast<const float4*>(sinv + (size_t)(t0 + t) * half + 4 * c));
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (l0 + u * blockDim.x >= total) continue;
            union { uint2 u; __half2 h2[2]; } oa, ob;
            const float cc[4] = {c4[u].x, c4[u].y, c4[u].z, c4[u].w}, ss[4] = {s4[u].x, s4[u].y, s4[u].z, s4[u].w};
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float2 x1 = __half22float2(a[u].h2[j]), x2 = __half22float2(b[u].h2[j]);
                const float c0 = cc[2 * j], c1 = cc[2 * j + 1], s0 = ss[2 * j], s1 = ss[2 * j + 1];
                oa.h2[j] = __floats2half2_rn(__fmaf_rn(x1.x, c0, -(x2.x * s0)), __fmaf_rn(x1.y, c1, -(x2.y * s1)));
                ob.h2[j] = __floats2half2_rn(__fmaf_rn(x2.x, c0, x1.x * s0), __fmaf_rn(x2.y, c1, x1.y * s1));
            }
            *reinterpret_cast<uint2*>(out + at[u]) = oa.u;
            *reinterpret_cast<uint2*>(out + at[u] + half) = ob.u;
        }
    }
}

#define SPLIT_ROPE_ARGS const __half* __restrict__ qkv, const float* __restrict__ cosv, \
    const float* __restrict__ sinv, __half* __restrict__ q, __half* __restrict__ k, __half* __restrict__ v, \
    int N, int H, int D
extern "C" __global__ void vision_27_split_rope_tile(SPLIT_ROPE_ARGS) {
    split_rope_tile<SR2_TILE, SR2_U, int, false>(qkv, cosv, sinv, q, k, v, N, H, D);
}

// === vision_27_ablate_one_in_flight ===
// Why: ablation of step 27: one item's loads in flight per thread (U = 1, the thread loops three
// times as often), everything else kept. Against step 27: what 3 items in flight are worth alone.
extern "C" __global__ void vision_27_ablate_one_in_flight(SPLIT_ROPE_ARGS) {
    split_rope_tile<SR2_TILE, 1, int, false>(qkv, cosv, sinv, q, k, v, N, H, D);
}

// === vision_27_ablate_index64 ===
// Why: ablation of step 27: each item decoded (head, token, c) with 64-bit divisions, as step 20
// decodes its items. Against step 27: what the 32-bit index arithmetic is worth alone.
extern "C" __global__ void vision_27_ablate_index64(SPLIT_ROPE_ARGS) {
    split_rope_tile<SR2_TILE, SR2_U, long long, false>(qkv, cosv, sinv, q, k, v, N, H, D);
}

// === vision_27_ablate_tile8 ===
// Why: ablation of step 27: step 20's tile of 8 tokens per block (twice the blocks, half the items
// each). Against step 27: what the 16-token tile is worth alone.
extern "C" __global__ void vision_27_ablate_tile8(SPLIT_ROPE_ARGS) {
    split_rope_tile<8, SR2_U, int, false>(qkv, cosv, sinv, q, k, v, N, H, D);
}

// === vision_27_ablate_one_pass ===
// Why: ablation of step 27: a (tile, part) spread over grid.z blocks so that each thread makes one
// pass of SR2_U items, as step 20's threads each make one pass, instead of looping over the tile.
// Against step 27: what the loop (fewer, longer-lived blocks) is worth alone.
extern "C" __global__ void vision_27_ablate_one_pass(SPLIT_ROPE_ARGS) {
    split_rope_tile<SR2_TILE, SR2_U, int, true>(qkv, cosv, sinv, q, k, v, N, H, D);
}

// === vision_28_transpose_tile ===
// Why: (beyond the seed) step 22 decodes each thread's item with 64-bit divisions and reads
// 144-byte runs scattered over the 16 heads. Here a block owns TR_TILE tokens: it reads, per
// head, the one contiguous run o[h, t0 : t0 + TR_TILE, :] (16-byte loads, TR_U of them issued
// before the first is used), stages them in shared memory in output order, and after one barrier
// writes y[t0 : t0 + TR_TILE, :] as one contiguous run: both sides coalesced, 32-bit indices.
// Needs D % 8 == 0, 16-byte alignment and H x D <= 1536 (shared memory); else the launcher takes
// step 22. At 4096 tokens the grid is 256 blocks of 256 threads: less than one wave on a GPU
// with more than 256 block slots (SMs x blocks per SM).
// Four changes at once; the body takes each as a switch (TILE tokens per block, U loads in
// flight, J the type of the item decode, STAGE: through shared memory or straight to y), and the
// ablations below undo one each.
#ifndef TR_TILE
#define TR_TILE 16
#endif
#define TR_U 3
template <int TILE, int U, typename J, bool STAGE>
__device__ __forceinline__ void transpose_tile(const __half* __restrict__ o, __half* __restrict__ y,
                                               int H, int N, int D) {
    extern __shared__ uint4 st[];
    const int P = D >> 3, HP = H * P;
    const int t0 = blockIdx.x * TILE;
    const int nt = min(TILE, N - t0);
    const int TP = nt * P, total = H * TP;
#pragma unroll 1
    for (int l0 = threadIdx.x; l0 < total; l0 += U * blockDim.x) {
        uint4 val[U];
        int at[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int l = l0 + u * blockDim.x;
            if (l < total) {
                const J h = J(l) / TP, r = J(l) - h * TP, t = r / P, c = r - t * P;
                at[u] = t * HP + h * P + c;
                val[u] = __ldg(reinterpret_cast<const uint4*>(o + ((size_t)h * N + t0) * D) + r);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (l0 + u * blockDim.x < total) {
                if (STAGE) st[at[u]] = val[u];
                else reinterpret_cast<uint4*>(y + (size_t)t0 * H * D)[at[u]] = val[u];
            }
    }
    if (STAGE) {
        __syncthreads();
        uint4* dst = reinterpret_cast<uint4*>(y + (size_t)t0 * H * D);
        for (int l = threadIdx.x; l < total; l += blockDim.x) dst[l] = st[l];
    }
}

extern "C" __global__ void vision_28_transpose_tile(const __half* __restrict__ o, __half* __restrict__ y,
                                                    int H, int N, int D) {
    transpose_tile<TR_TILE, TR_U, int, true>(o, y, H, N, D);
}

// === vision_28_ablate_one_in_flight ===
// Why: ablation of step 28: one 16-byte load in flight per thread (U = 1). Against step 28: what
// 3 loads in flight are worth alone.
extern "C" __global__ void vision_28_ablate_one_in_flight(const __half* __restrict__ o, __half* __restrict__ y,
                                                          int H, int N, int D) {
    transpose_tile<TR_TILE, 1, int, true>(o, y, H, N, D);
}

// === vision_28_ablate_index64 ===
// Why: ablation of step 28: each item decoded (head, token, c) with 64-bit divisions, as step 22
// decodes its items. Against step 28: what the 32-bit index arithmetic is worth alone.
extern "C" __global__ void vision_28_ablate_index64(const __half* __restrict__ o, __half* __restrict__ y,
                                                    int H, int N, int D) {
    transpose_tile<TR_TILE, TR_U, long long, true>(o, y, H, N, D);
}

// === vision_28_ablate_no_smem ===
// Why: ablation of step 28: each loaded vector stored straight to its place in y (no shared memory,
// no barrier): the reads stay one run per head, the writes become 144-byte runs that jump by H x D,
// as step 29's. Against step 28: what staging the tile in shared memory is worth alone.
extern "C" __global__ void vision_28_ablate_no_smem(const __half* __restrict__ o, __half* __restrict__ y,
                                                    int H, int N, int D) {
    transpose_tile<TR_TILE, TR_U, int, false>(o, y, H, N, D);
}

// === vision_28_ablate_tile8 ===
// Why: ablation of step 28: 8 tokens per block (twice the blocks, half the shared memory each; at
// 4096 tokens, 512 blocks). Against step 28: what the 16-token tile is worth alone.
extern "C" __global__ void vision_28_ablate_tile8(const __half* __restrict__ o, __half* __restrict__ y,
                                                  int H, int N, int D) {
    transpose_tile<8, TR_U, int, true>(o, y, H, N, D);
}

// === vision_30_transpose_tile8 ===
// Why: (beyond the seed) step 28 with ONE change, the one its ablation table found costing: 8 tokens
// a block instead of 16: twice the blocks, each staging half as much before its barrier, so an SM
// holds more of them. The same body and tile as 28_ablate_tile8, promoted to a step; the pair
// 28 -> 30 is that one change, and the lab measures what it is worth on each GPU.
extern "C" __global__ void vision_30_transpose_tile8(const __half* __restrict__ o, __half* __restrict__ y,
                                                     int H, int N, int D) {
    transpose_tile<8, TR_U, int, true>(o, y, H, N, D);
}

// === vision_29_transpose_input_order ===
// Why: the seed's walk of its transpose (section 4.4, transpose_head_token_kernel; the report lists it
// with transpose_token_head_kernel in section 2.10): thread idx -> (h, t, d_vec) in INPUT order, so
// neighbouring threads read one contiguous stream of o[H, N, D] (coalesced) while their writes jump:
// every P = D / 8 threads the token t moves on and the write address moves H * D halves. Steps 21/22
// walk in output order (idx -> (t, h, c)): the writes are one stream and the reads jump by N * D
// between heads. Same loads (8, 2 or 1 halves, the seed's fallback), same grid; only the walk differs.
extern "C" __global__ void vision_29_transpose_input_order(const __half* __restrict__ o, __half* __restrict__ y,
                                                           int H, int N, int D, int vec) {
    const int P = (D + vec - 1) / vec;
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (long long)H * N * P) return;
    const int c = (int)(item % P);
    const long long ht = item / P;                 // h * N + t: the input row
    const int t = (int)(ht % N), h = (int)(ht / N);
    const __half* src = o + (size_t)ht * D;
    __half* dst = y + ((size_t)t * H + h) * D;
    if (vec == 8) {
        *reinterpret_cast<uint4*>(dst + 8 * c) = __ldg(reinterpret_cast<const uint4*>(src + 8 * c));
    } else if (vec == 2) {
        *reinterpret_cast<__half2*>(dst + 2 * c) = *reinterpret_cast<const __half2*>(src + 2 * c);
    } else {
        dst[c] = src[c];
    }
}

// === vision_31_transpose_input_half2 ===
// Why: the seed's transpose_head_token_kernel "before" as the report gives it: 256 threads, one
// half2 (4 bytes) per thread, grid (N * 16 * 36 + 255) / 256 (seed 000, table 1), walked as its after
// is walked (section 4.4: idx -> (h, t, d_vec), INPUT order), since the report's only change to it is
// the width (section 2.10). Its after is step 29: 31 -> 29 is that one change, 2 -> 8 halves per
// thread. Step 21 is the course's half2 walked in output order. Odd D or a misaligned base moves the
// same items one half at a time; the launcher passes vec = 0 then.
extern "C" __global__ void vision_31_transpose_input_half2(const __half* __restrict__ o, __half* __restrict__ y,
                                                           int H, int N, int D, int vec) {
    const int P = (D + 1) / 2;
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (long long)H * N * P) return;
    const int c = (int)(item % P);
    const long long ht = item / P;                 // h * N + t: the input row
    const int t = (int)(ht % N), h = (int)(ht / N);
    const __half* src = o + (size_t)ht * D;
    __half* dst = y + ((size_t)t * H + h) * D;
    if (vec) {
        *reinterpret_cast<__half2*>(dst + 2 * c) = *reinterpret_cast<const __half2*>(src + 2 * c);
    } else {
        const int end = min(2 * c + 2, D);
        for (int d = 2 * c; d < end; ++d) dst[d] = src[d];
    }
}

// === vision_32_transpose_token_head_half2 ===
// Why: the seed's transpose_token_head_kernel, the inverse of transpose_head_token_kernel: [N, H * D]
// (tokens, heads side by side) -> [H, N, D] (a head's tokens contiguous), the layout an attention
// kernel reads per head. The report optimised it beside its sibling (section 2.10: float4, 8 halves
// per thread, with the half2 fallback) and then deleted it as unused (section 6.1: only the unused
// vision_flash_attention_cu called it). This is its "before": one half2 (4 bytes) per thread, the
// sibling's walk idx -> (h, t, d_vec), here the OUTPUT order: the writes are one stream, the reads
// 144-byte runs H * D halves apart. Odd D or a misaligned base: one half at a time; vec = 0 then.
extern "C" __global__ void vision_32_transpose_token_head_half2(const __half* __restrict__ x, __half* __restrict__ o,
                                                               int H, int N, int D, int vec) {
    const int P = (D + 1) / 2;
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (long long)H * N * P) return;
    const int c = (int)(item % P);
    const long long ht = item / P;                 // h * N + t: the output row
    const int t = (int)(ht % N), h = (int)(ht / N);
    const __half* src = x + ((size_t)t * H + h) * D;
    __half* dst = o + (size_t)ht * D;
    if (vec) {
        *reinterpret_cast<__half2*>(dst + 2 * c) = *reinterpret_cast<const __half2*>(src + 2 * c);
    } else {
        const int end = min(2 * c + 2, D);
        for (int d = 2 * c; d < end; ++d) dst[d] = src[d];
    }
}

// === vision_33_transpose_token_head_vec8 ===
// Why: the seed's transpose_token_head_kernel after (section 2.10): 8 halves (16 bytes) per thread,
// a quarter of step 32's threads (N * 16 * 9 for D = 72), with the report's fallback
// `vec_size = (head_dim & 7) == 0 ? 8 : 2` (the launcher picks vec = 8, 2, or 1 for odd D or a
// misaligned base; uniform across the grid). Same walk as step 32: 32 -> 33 is the width alone.
extern "C" __global__ void vision_33_transpose_token_head_vec8(const __half* __restrict__ x, __half* __restrict__ o,
                                                               int H, int N, int D, int vec) {
    const int P = (D + vec - 1) / vec;
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (long long)H * N * P) return;
    const int c = (int)(item % P);
    const long long ht = item / P;
    const int t = (int)(ht % N), h = (int)(ht / N);
    const __half* src = x + ((size_t)t * H + h) * D;
    __half* dst = o + (size_t)ht * D;
    if (vec == 8) {
        *reinterpret_cast<uint4*>(dst + 8 * c) = __ldg(reinterpret_cast<const uint4*>(src + 8 * c));
    } else if (vec == 2) {
        *reinterpret_cast<__half2*>(dst + 2 * c) = *reinterpret_cast<const __half2*>(src + 2 * c);
    } else {
        dst[c] = src[c];
    }
}

// === vision_34_split_rope_scalar_f16tab ===
// Why: the seed's fused_split_rope_transpose_kernel "before" with the seed's own tables: cos and sin
// are fp16 [N, D] (the angles of pairs 0..D/2-1 written twice, as HF's cat(freqs, freqs)), and a
// thread reads "cos[d], sin[d], cos[d+36], sin[d+36] -> 4 x half (8 bytes)" (seed 000, section 4.3).
// Steps 18-19 read fp32 [N, D/2] tables instead (one cos and one sin per pair, exact to fp32): twice
// the bytes per value, half the values. Otherwise as step 18: one 64-thread block per (head, token),
// threads d < D/2 rotate one Q pair and one K pair with 4 scalar multiplies each; V is copied by halves.
extern "C" __global__ void vision_34_split_rope_scalar_f16tab(const __half* __restrict__ qkv,
                                                              const __half* __restrict__ cosv,
                                                              const __half* __restrict__ sinv, __half* __restrict__ q,
                                                              __half* __restrict__ k, __half* __restrict__ v,
                                                              int N, int H, int D) {
    const int h = blockIdx.x, t = blockIdx.y, half = D / 2;
    const __half* src = qkv + (size_t)t * 3 * H * D + (size_t)h * D;
    const __half* ct = cosv + (size_t)t * D;
    const __half* st = sinv + (size_t)t * D;
    const size_t dst = ((size_t)h * N + t) * D;
    for (int d = threadIdx.x; d < half; d += blockDim.x) {
        const float c1 = vl_h(ct[d]), s1 = vl_h(st[d]), c2 = vl_h(ct[d + half]), s2 = vl_h(st[d + half]);
        float a = vl_h(src[d]), b = vl_h(src[d + half]);
        q[dst + d] = __float2half(a * c1 - b * s1);
        q[dst + d + half] = __float2half(b * c2 + a * s2);
        a = vl_h(src[H * D + d]);
        b = vl_h(src[H * D + d + half]);
        k[dst + d] = __float2half(a * c1 - b * s1);
        k[dst + d + half] = __float2half(b * c2 + a * s2);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) v[dst + d] = src[2 * H * D + d];
}

// === vision_35_split_rope_fma_f16tab ===
// Why: the seed's fused_split_rope_transpose_kernel after with the seed's fp16 [N, D] tables (section
// 4.3): block 128, each rotation `__fmaf_rn(q1, cos_val, -(q2 * sin_val))`, V copied with 16-byte loads
// by threads 0..8 (D = 72). Step 34 -> 35 is the report's pair with the report's tables; steps 18 -> 19
// are the same pair over the course's fp32 tables. With D % 8 != 0 or a misaligned base, vec = 0;
// V is then copied by halves.
extern "C" __global__ void vision_35_split_rope_fma_f16tab(const __half* __restrict__ qkv,
                                                           const __half* __restrict__ cosv,
                                                           const __half* __restrict__ sinv, __half* __restrict__ q,
                                                           __half* __restrict__ k, __half* __restrict__ v,
                                                           int N, int H, int D, int vec) {
    const int h = blockIdx.x, t = blockIdx.y, half = D / 2;
    const __half* src = qkv + (size_t)t * 3 * H * D + (size_t)h * D;
    const __half* ct = cosv + (size_t)t * D;
    const __half* st = sinv + (size_t)t * D;
    const size_t dst = ((size_t)h * N + t) * D;
    for (int d = threadIdx.x; d < half; d += blockDim.x) {
        const float c1 = vl_h(ct[d]), s1 = vl_h(st[d]), c2 = vl_h(ct[d + half]), s2 = vl_h(st[d + half]);
        float a = vl_h(src[d]), b = vl_h(src[d + half]);
        q[dst + d] = __float2half(__fmaf_rn(a, c1, -(b * s1)));
        q[dst + d + half] = __float2half(__fmaf_rn(b, c2, a * s2));
        a = vl_h(src[H * D + d]);
        b = vl_h(src[H * D + d + half]);
        k[dst + d] = __float2half(__fmaf_rn(a, c1, -(b * s1)));
        k[dst + d + half] = __float2half(__fmaf_rn(b, c2, a * s2));
    }
    if (vec) {
        const uint4* vs = reinterpret_cast<const uint4*>(src + 2 * H * D);
        uint4* vd = reinterpret_cast<uint4*>(v + dst);
        for (int d = threadIdx.x; d < D / 8; d += blockDim.x) vd[d] = __ldg(vs + d);
    } else {
        for (int d = threadIdx.x; d < D; d += blockDim.x) v[dst + d] = src[2 * H * D + d];
    }
}

// === vision_36_layernorm_row_block ===
// Why: (beyond the seed) step 03 keeps LN_VEC vectors a lane in registers, enough for the tower's
// 1152-wide rows; a longer row is read from memory three times (hidden 16384: 59 of every 64
// vectors a lane re-read twice, from L2 or DRAM). Here one block owns a row, sized by the launcher
// so each thread holds at most LN36_VPT 16-byte vectors (threads = 32 x ceil(C / (256 x LN36_VPT))):
// every row up to LN36_THREADS x 8 x LN36_VPT halves is read once. The change is that one thing:
// mean and variance are the same two-pass sums, reduced across the block's warps through 32 floats
// of shared memory (every warp reduces the partials itself, so two barriers per reduction).
// The launcher sends rows that step 03 already holds (C <= 32 x 8 x LN_VEC), odd or misaligned rows
// and rows beyond this kernel's registers to step 03.
#ifndef LN36_VPT
#define LN36_VPT 4        // step 36: 16-byte vectors a thread holds (as RMSNorm's step 08)
#endif
#ifndef LN36_THREADS
#define LN36_THREADS 1024 // step 36: the largest block (rows up to 1024 x 8 x 4 = 32768 halves)
#endif
__device__ __forceinline__ float ln36_block_sum(float v, float* part) {
    const int lane = threadIdx.x & 31;
    v = warp_reduce_sum(v);
    if (lane == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_reduce_sum(lane < (blockDim.x >> 5) ? part[lane] : 0.0f);
    __syncthreads();   // part is written again by the next reduction
    return v;
}

extern "C" __global__ __launch_bounds__(LN36_THREADS) void vision_36_layernorm_row_block(
    const __half* __restrict__ x, const __half* __restrict__ w, const __half* __restrict__ b, __half* __restrict__ y,
    int C, float eps) {
    __shared__ float part[32];
    const int nv = C >> 3;
    const uint4* xv = reinterpret_cast<const uint4*>(x + (size_t)blockIdx.x * C);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    const uint4* bv = reinterpret_cast<const uint4*>(b);
    uint4* yv = reinterpret_cast<uint4*>(y + (size_t)blockIdx.x * C);
    Half8 r[LN36_VPT];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < LN36_VPT; ++k) {
        const int i = k * blockDim.x + threadIdx.x;
        if (i < nv) {
            r[k].u = __ldg(xv + i);
            sum += h8_sum(r[k]);
        }
    }
    const float mean = ln36_block_sum(sum, part) / C;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < LN36_VPT; ++k)
        if (k * blockDim.x + threadIdx.x < nv) sq += h8_sqdev(r[k], mean);
    const float rstd = rsqrtf(ln36_block_sum(sq, part) / C + eps);
#pragma unroll
    for (int k = 0; k < LN36_VPT; ++k) {
        const int i = k * blockDim.x + threadIdx.x;
        if (i < nv) yv[i] = h8_norm(r[k], __ldg(wv + i), __ldg(bv + i), mean, rstd);
    }
}

// === vision_38_gelu_erf_vec8_x2 ===
// Why: (beyond the seed) step 30 has one 16-byte load in flight per thread, with erff's instructions
// between the load and the store. One change, step 25's: each thread issues the loads of BG_U vectors
// (blockDim.x vectors apart, so a warp's accesses stay contiguous) before it uses the first. The tail and a misaligned
// base (vec = 0) go element by element. The body takes the GELU as a switch (POLY: step 39's).
__device__ __forceinline__ float gelu_erfc_poly(float x);
template <bool POLY>
__device__ __forceinline__ void gelu_erf_x2(const __half* __restrict__ x, __half* __restrict__ y, int n, int vec) {
    const unsigned bd = blockDim.x, base = blockIdx.x * bd * BG_U + threadIdx.x;   // vector index
    if (vec && (base + (BG_U - 1) * bd) * 8u + 8u <= (unsigned)n) {
        Half8 a[BG_U];
#pragma unroll
        for (int k = 0; k < BG_U; ++k) a[k].u = __ldg(reinterpret_cast<const uint4*>(x + (base + k * bd) * 8u));
#pragma unroll
        for (int k = 0; k < BG_U; ++k) {
            Half8 o;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 v = __half22float2(a[k].h2[j]);
                o.h2[j] = POLY ? __floats2half2_rn(gelu_erfc_poly(v.x), gelu_erfc_poly(v.y))
                               : __floats2half2_rn(gelu_erf(v.x), gelu_erf(v.y));
            }
            *reinterpret_cast<uint4*>(y + (base + k * bd) * 8u) = o.u;
        }
    } else {
        for (int k = 0; k < BG_U; ++k) {
            const unsigned i = (base + k * bd) * 8u;
            if (i >= (unsigned)n) break;
            const unsigned end = min(i + 8u, (unsigned)n);
            for (unsigned j = i; j < end; ++j) {
                const float v = vl_h(x[j]);
                y[j] = __float2half(POLY ? gelu_erfc_poly(v) : gelu_erf(v));
            }
        }
    }
}

extern "C" __global__ void vision_38_gelu_erf_vec8_x2(const __half* __restrict__ x, __half* __restrict__ y, int n,
                                                      int vec) {
    gelu_erf_x2<false>(x, y, n, vec);
}

// === vision_39_gelu_erfc_poly ===
// Why: (beyond the seed) erff has two polynomial paths, one per range of |x|; inlined, it computes
// both and selects (selp in step 30's PTX): about twice the arithmetic of one. One change from step 38:
// x Phi(x) from erfc(z), z = |x| / sqrt 2, as t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2) and P a
// fixed 10-term polynomial (the Chebyshev fit of Numerical Recipes' erfcc: fractional error below
// 1.2e-7 for every z >= 0), with the fast reciprocal and exp: one path, no branch. For x < 0 it is
// x erfc(z) / 2 directly, so the far negative tail keeps its relative accuracy where 1 + erf(x / sqrt 2)
// cancels in fp32.
__device__ __forceinline__ float gelu_erfc_poly(float x) {
    const float z = fabsf(x) * 0.70710678118654752f;
    const float t = __fdividef(1.0f, __fmaf_rn(0.5f, z, 1.0f));
    float p = 0.17087277f;
    p = __fmaf_rn(p, t, -0.82215223f);
    p = __fmaf_rn(p, t, 1.48851587f);
    p = __fmaf_rn(p, t, -1.13520398f);
    p = __fmaf_rn(p, t, 0.27886807f);
    p = __fmaf_rn(p, t, -0.18628806f);
    p = __fmaf_rn(p, t, 0.09678418f);
    p = __fmaf_rn(p, t, 0.37409196f);
    p = __fmaf_rn(p, t, 1.00002368f);
    const float erfc = t * __expf(__fmaf_rn(t, p, __fmaf_rn(-z, z, -1.26551223f)));
    return 0.5f * x * (x >= 0.0f ? 2.0f - erfc : erfc);
}

extern "C" __global__ void vision_39_gelu_erfc_poly(const __half* __restrict__ x, __half* __restrict__ y, int n,
                                                    int vec) {
    gelu_erf_x2<true>(x, y, n, vec);
}
