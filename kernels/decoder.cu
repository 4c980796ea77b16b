// decoder.cu: lab 08's new kernels, the element-wise glue of one Qwen3 decode token.
//
// Everything that moves the bytes of a token comes from the earlier labs: the GEMVs (lab 04), the
// fused residual add + RMSNorm (lab 02), RoPE + KV-cache append and decode attention (lab 07).
// What is left is small: SiLU(gate) x up between the MLP's GEMVs, Qwen3's per-head RMSNorm of q
// and k, the embedding row of the token, and the greedy argmax over the logits. Each moves a few
// kilobytes (the argmax 600 KB), so each is written to be short, correct on every size and
// hostile value, and graph-capturable: whatever changes from token to token (the token id, the
// position) is read from device memory, never passed from the host.
#include "common.cuh"

__device__ __forceinline__ float silu(float g) {
    // g * sigmoid(g) written as g / (1 + e^-g): -inf gives NaN (as torch's x * sigmoid(x) does),
    // +inf gives +inf, a large negative g gives -0 (e^-g overflows to inf).
    return g / (1.0f + expf(-g));
}

// === decoder_01_silu_mul ===
// Why: Qwen3's MLP is down(SiLU(gate(x)) * up(x)). Between the gate/up GEMVs and the down GEMV
// sits this element-wise step: 2 x 12288 fp16 values in, 12288 out, 72 KB, far below what a
// launch costs. So it only has to be correct and move 16 bytes per load: a thread owns 8
// elements (one uint4 of gate, one of up), the math is in fp32, rounded once to fp16. The
// launcher sets vec_ok only when the three bases are 16-byte aligned; the last thread's partial
// group (n % 8 elements) and every misaligned call go element by element. (The lab's exercise
// fuses this step away, into the down GEMV that reads its output.)
extern "C" __global__ void decoder_01_silu_mul(const __half* __restrict__ gate, const __half* __restrict__ up,
                                               __half* __restrict__ out, int n, int vec_ok) {
    const int i0 = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= n) return;
    if (vec_ok && i0 + 8 <= n) {
        Half8 g, u, o;
        g.u = __ldg(reinterpret_cast<const uint4*>(gate + i0));
        u.u = __ldg(reinterpret_cast<const uint4*>(up + i0));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 gf = __half22float2(g.h2[k]), uf = __half22float2(u.h2[k]);
            o.h2[k] = __floats2half2_rn(silu(gf.x) * uf.x, silu(gf.y) * uf.y);
        }
        *reinterpret_cast<uint4*>(out + i0) = o.u;
    } else {
        const int end = min(i0 + 8, n);
        for (int i = i0; i < end; ++i)
            out[i] = __float2half_rn(silu(__half2float(gate[i])) * __half2float(up[i]));
    }
}

// === decoder_02_head_norm ===
// Why: Qwen3 normalises each query head and each key head on its own before RoPE (q_norm and
// k_norm: RMSNorm over the head's 128 dims; one weight vector shared by the query heads, another
// by the key heads). Lab 02's kernels normalise one long row per block; here there are 32 + 8
// rows of 256 bytes, 10 KB in all. One warp per row: lane l owns dims l, l + 32, ..., the sum of
// squares is one butterfly (shfl.sync.bfly) with no shared memory and no __syncthreads, and the
// q rows and k rows (two views into the QKV GEMV's output) are normalised by one launch.
// Rows are whole warps, so a warp past the last row leaves as a whole.
extern "C" __global__ void decoder_02_head_norm(const __half* __restrict__ q, const __half* __restrict__ k,
                                                const __half* __restrict__ wq, const __half* __restrict__ wk,
                                                __half* __restrict__ q_out, __half* __restrict__ k_out,
                                                int nq, int nk, int d, float eps) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= nq + nk) return;
    const bool is_q = row < nq;
    const size_t off = (size_t)(is_q ? row : row - nq) * d;
    const __half* x = (is_q ? q : k) + off;
    const __half* w = is_q ? wq : wk;
    __half* y = (is_q ? q_out : k_out) + off;
    float ss = 0.0f;
    for (int i = lane; i < d; i += 32) {
        const float v = __half2float(x[i]);
        ss = fmaf(v, v, ss);
    }
    ss = warp_reduce_sum(ss);
    const float inv = rsqrtf(ss / (float)d + eps);     // a row of +-inf: 0, and inf * 0 = NaN, as in float64
    for (int i = lane; i < d; i += 32)
        y[i] = __float2half_rn(__half2float(x[i]) * inv * __half2float(w[i]));
}

// === decoder_03_embed ===
// Why: a token's step starts with one row of the embedding table (Qwen3-8B: 151936 x 4096 fp16,
// of which one 8 KB row is read). The token id is read from device memory, where the previous
// token's argmax wrote it, so one captured CUDA graph replays every step without the host
// reading the token; token == nullptr uses the host's value. An id outside [0, vocab) cannot be
// reported from inside a graph, so it is never used as an address: the row is filled with NaN
// and the logits say so. 16 bytes per thread when the row and both bases are aligned, else 2.
extern "C" __global__ void decoder_03_embed(const __half* __restrict__ table, const int* __restrict__ token,
                                            int token_host, __half* __restrict__ out, int vocab, int hidden,
                                            int vec_ok) {
    const int id = token ? __ldg(token) : token_host;
    const int i0 = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i0 >= hidden) return;
    const int end = min(i0 + 8, hidden);
    if (id < 0 || id >= vocab) {
        for (int i = i0; i < end; ++i) out[i] = __ushort_as_half((unsigned short)0x7e00);   // NaN
        return;
    }
    const __half* row = table + (size_t)id * hidden;
    if (vec_ok && end - i0 == 8) {
        *reinterpret_cast<uint4*>(out + i0) = __ldg(reinterpret_cast<const uint4*>(row + i0));
    } else {
        for (int i = i0; i < end; ++i) out[i] = row[i];
    }
}

// The argmax order, numpy.argmax's: a NaN beats every number (the first NaN wins), then the larger
// value, then the lower index (ties, -0 == +0 and a row of -inf all go to the lowest index).
// A strict total order on (value, index) pairs with distinct indices, so the reduction's result
// does not depend on the order in which threads, warps and blocks meet.
__device__ __forceinline__ bool am_better(float va, int ia, float vb, int ib) {
    const bool na = va != va, nb = vb != vb;
    if (na || nb) return na && (!nb || ia < ib);
    return va > vb || (va == vb && ia < ib);
}

__device__ __forceinline__ void am_take(float va, int ia, float& v, int& i) {
    if (am_better(va, ia, v, i)) { v = va; i = ia; }
}

__device__ __forceinline__ void am_warp(float& v, int& i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        am_take(v2, i2, v, i);
    }
}

// Block-wide: each warp reduces in registers, lane 0 parks its pair in shared memory, warp 0
// reduces those. Thread 0 holds the block's pair afterwards. (-inf, INT_MAX) is the empty pair:
// it loses to every element, a -inf included (equal values, larger index).
__device__ __forceinline__ void am_block(float& v, int& i, float* sv, int* si) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    am_warp(v, i);
    if (lane == 0) { sv[wid] = v; si[wid] = i; }
    __syncthreads();
    if (wid == 0) {
        v = lane < nw ? sv[lane] : -KL_INF;
        i = lane < nw ? si[lane] : 0x7fffffff;
        am_warp(v, i);
    }
}

// === decoder_04_argmax_blocks ===
// Why: greedy decoding picks the largest of 151936 fp32 logits. One block alone would read the
// 600 KB with one SM's bytes in flight; this first pass spreads the logits over many blocks (a
// grid-stride loop, 16-byte loads when the base is aligned, then the n % 4 tail), and each block
// leaves one (value, index) pair. The order above makes the answer numpy.argmax's exactly.
extern "C" __global__ void decoder_04_argmax_blocks(const float* __restrict__ x, int n, float* __restrict__ part_v,
                                                    int* __restrict__ part_i, int vec_ok) {
    __shared__ float sv[32];
    __shared__ int si[32];
    float v = -KL_INF;
    int idx = 0x7fffffff;
    const int tid = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    int start = 0;
    if (vec_ok) {
        const int n4 = n >> 2;
        for (int j = tid; j < n4; j += stride) {
            const float4 f = __ldg(reinterpret_cast<const float4*>(x) + j);
            am_take(f.x, 4 * j, v, idx);
            am_take(f.y, 4 * j + 1, v, idx);
            am_take(f.z, 4 * j + 2, v, idx);
            am_take(f.w, 4 * j + 3, v, idx);
        }
        start = n4 << 2;
    }
    for (int j = start + tid; j < n; j += stride) am_take(__ldg(x + j), j, v, idx);
    am_block(v, idx, sv, si);
    if (threadIdx.x == 0) {
        part_v[blockIdx.x] = v;
        part_i[blockIdx.x] = idx;
    }
}

// === decoder_05_argmax_final ===
// Why: the second pass reduces the first pass's pairs (a few hundred at most) in one block and
// writes the token id where the next step's embedding reads it. A decode loop also needs the
// position and the KV length to move on by one, and the token kept: with state != nullptr,
// thread 0 writes history[pos] = token and adds 1 to state[0] (pos) and state[1] (length). Doing
// that here, in the token step's last launch, costs one thread and no graph node of its own.
extern "C" __global__ void decoder_05_argmax_final(const float* __restrict__ part_v, const int* __restrict__ part_i,
                                                   int parts, int* __restrict__ token, int* __restrict__ state,
                                                   int* __restrict__ history, int capacity) {
    __shared__ float sv[32];
    __shared__ int si[32];
    float v = -KL_INF;
    int idx = 0x7fffffff;
    for (int j = threadIdx.x; j < parts; j += blockDim.x) am_take(part_v[j], part_i[j], v, idx);
    am_block(v, idx, sv, si);
    if (threadIdx.x == 0) {
        token[0] = idx;
        if (state) {
            const int pos = state[0];
            if (history && pos >= 0 && pos < capacity) history[pos] = idx;
            state[0] = pos + 1;
            state[1] = state[1] + 1;
        }
    }
}
