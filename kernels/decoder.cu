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
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");   // step 12: the down GEMV may launch
#endif
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

// The second pass's block: (v, i) of the first pass's `parts` pairs, in thread 0.
__device__ __forceinline__ void am_parts(const float* part_v, const int* part_i, int parts, float& v, int& i,
                                         float* sv, int* si) {
    v = -KL_INF;
    i = 0x7fffffff;
    for (int j = threadIdx.x; j < parts; j += blockDim.x) am_take(part_v[j], part_i[j], v, i);
    am_block(v, i, sv, si);
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
    float v;
    int idx;
    am_parts(part_v, part_i, parts, v, idx, sv, si);
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

// === decoder_06_sample_init ===
// Why: greedy decoding repeats itself; a chat model is meant to be sampled with a temperature and a top-k
// / top-p cut. The usual way sorts the 151936 logits; a sort is many passes over them and its tie order is
// the sort's. Here no sort: after lab 08's argmax first pass (the max, and numpy.argmax's index for NaN
// and all -inf logits), init reduces its pairs; each radix pass (8 key bits) builds a histogram of the
// selection's domain in shared memory, adds it to the grid's with integer atomics, and the last block to
// finish picks the digit (the CUDA threadFenceReduction pattern: no extra launch); parts sums each 2048+
// logit chunk of the final set; final scans those sums, finds the chunk holding the draw, and scans it.
// 4 launches for temperature alone, 8 with top-k, 12 with both; whatever changes per token (the position
// of the draw) is read from the device, so it is graph-capturable like the argmax.
// The distribution: w_i = exp((x_i - max) / T) (a +inf logit: the +inf logits share the mass equally), held
// as a 64-bit fixed-point integer (2^40 = the largest logit's weight; a weight below 2^-41 of it becomes 0,
// a probability under 1e-12). The order is argmax's: value down, then index up (-0 == +0). The top-k set is
// the first k in that order; the nucleus (top-p) the shortest prefix of the top-k set whose mass reaches
// top_p of the set's. Both sets have one form: every key above a threshold key, plus the first c (by index)
// of the logits equal to it; radix selects find the threshold, 8 bits a pass. The token is then the first
// index whose running mass, in index order over the set, passes r * Z / 2^64, r = splitmix64(splitmix64(seed)
// ^ position): a counter-based draw, so a CUDA graph replays it deterministically and NumPy reproduces it.
// Every sum is an integer sum, so the order in which atomics land changes no bit of the result.
#define SAMPLE_ONE 1099511627776.0f     // 2^40: the largest logit's weight

struct SampleCtl {
    unsigned long long mass[256];       // the radix pass's histogram over the whole grid: mass per digit
    unsigned int count[256];            // and count per digit
    unsigned long long acc_mass;        // mass of the selection's domain above the chosen prefix
    unsigned long long target;          // top-p: the mass the nucleus must reach
    float m;                            // the largest logit
    int mode;                           // 1: the token is first_idx (a NaN, or every logit -inf), no draw
    int first_idx;                      // numpy.argmax's index
    unsigned int done;                  // blocks of this pass that are done (the last one selects)
    unsigned int prefix, acc_count;     // key bits chosen so far; count of the domain above the prefix
    unsigned int key_k, c_k;            // the top-k set: keys > key_k and the first c_k equal to it
    unsigned int key_f, c_f;            // the final set, in the same form
    int skip;                           // top-p ended among the top-k threshold's ties: later passes return
};

__device__ __forceinline__ unsigned int sm_key(float x) {      // larger value -> larger key; -0 -> +0
    const unsigned int b = __float_as_uint(x == 0.0f ? 0.0f : x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float sm_val(unsigned int k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ unsigned long long sm_weight(float x, float m, float t) {
    if (m == KL_INF) return x == KL_INF ? (1ull << 40) : 0ull;
    return __float2ull_rn(expf((x - m) / t) * SAMPLE_ONE);
}

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Exclusive prefix sum of v over the block's threads in thread order (blockDim a multiple of 32);
// total: the block's sum. sh: 32 entries of shared memory.
__device__ __forceinline__ unsigned long long sm_scan(unsigned long long v, unsigned long long* sh,
                                                      unsigned long long& total) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    unsigned long long inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    if (lane == 31) sh[wid] = inc;
    __syncthreads();
    if (wid == 0) {
        unsigned long long w = lane < nw ? sh[lane] : 0ull;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        if (lane < nw) sh[lane] = w;
    }
    __syncthreads();
    total = sh[nw - 1];
    const unsigned long long r = inc - v + (wid ? sh[wid - 1] : 0ull);
    __syncthreads();
    return r;
}

extern "C" __global__ void decoder_06_sample_init(const float* __restrict__ part_v, const int* __restrict__ part_i,
                                                  int parts, SampleCtl* c) {
    __shared__ float sv[32];
    __shared__ int si[32];
    float v;
    int idx;
    am_parts(part_v, part_i, parts, v, idx, sv, si);
    for (int b = threadIdx.x; b < 256; b += blockDim.x) { c->mass[b] = 0ull; c->count[b] = 0u; }
    if (threadIdx.x == 0) {
        c->m = v;
        c->first_idx = idx;
        c->mode = (v != v || v == -KL_INF) ? 1 : 0;
        c->acc_mass = 0ull; c->target = 0ull;
        c->done = 0u; c->prefix = 0u; c->acc_count = 0u;
        c->key_k = 0u; c->c_k = 0u; c->key_f = 0u; c->c_f = 0u; c->skip = 0;
    }
}

// === decoder_06_sample_radix ===
// Why: one radix-select pass of 8 key bits (shift 24, 16, 8, 0) without a sort: phase 0 finds the top-k
// threshold (counts; k < n), phase 1 the nucleus threshold over the keys above it (masses). Integer atomics
// into one histogram; the last block to finish picks the digit, so no launch is spent on the choice.
extern "C" __global__ void decoder_06_sample_radix(const float* __restrict__ x, int n, SampleCtl* c, float t,
                                                   int phase, int shift, unsigned int k, float top_p) {
    __shared__ unsigned long long smass[256];
    __shared__ unsigned int scount[256];
    __shared__ int last;
    if (c->mode || (phase == 1 && c->skip)) return;          // the same for every block of the grid
    for (int b = threadIdx.x; b < 256; b += blockDim.x) { smass[b] = 0ull; scount[b] = 0u; }
    __syncthreads();
    const float m = c->m;
    const unsigned int lo = phase ? c->key_k : 0u, prefix = c->prefix;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
        const float v = __ldg(x + j);
        const unsigned int key = sm_key(v);
        if (key <= lo || (shift < 24 && (key >> (shift + 8)) != prefix)) continue;
        const unsigned int d = (key >> shift) & 255u;
        if (phase) atomicAdd(&smass[d], sm_weight(v, m, t));
        else atomicAdd(&scount[d], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        if (scount[b]) atomicAdd(&c->count[b], scount[b]);
        if (smass[b]) atomicAdd(&c->mass[b], smass[b]);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&c->done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x == 0) {
        const volatile unsigned long long* vm = c->mass;
        const volatile unsigned int* vc = c->count;
        int b = 255;
        if (phase == 0) {
            unsigned int acc = c->acc_count;
            for (; b > 0 && acc + vc[b] < k; --b) acc += vc[b];
            c->acc_count = acc;
            c->prefix = (prefix << 8) | (unsigned int)b;
            if (shift == 0) {
                c->key_k = c->key_f = c->prefix;
                c->c_k = c->c_f = k - acc;
                c->prefix = 0u; c->acc_count = 0u;
            }
        } else {
            unsigned long long acc = c->acc_mass;
            bool go = true;
            if (shift == 24) {
                unsigned long long dom = 0ull;
                for (int i = 0; i < 256; ++i) dom += vm[i];
                const unsigned long long wk = c->c_k ? sm_weight(sm_val(c->key_k), m, t) : 0ull;
                const unsigned long long z = dom + (unsigned long long)c->c_k * wk;
                unsigned long long P = (unsigned long long)ceil((double)top_p * (double)z);
                P = P < 1ull ? 1ull : (P > z ? z : P);
                c->target = P;
                if (dom < P) {                               // the nucleus ends among key_k's ties
                    c->key_f = c->key_k;
                    c->c_f = wk ? (unsigned int)((P - dom + wk - 1) / wk) : c->c_k;
                    c->skip = 1;
                    go = false;
                }
            }
            if (go) {
                const unsigned long long P = c->target;
                for (; b > 0 && acc + vm[b] < P; --b) acc += vm[b];
                c->acc_mass = acc;
                c->prefix = (prefix << 8) | (unsigned int)b;
                if (shift == 0) {
                    const unsigned long long wf = sm_weight(sm_val(c->prefix), m, t);
                    c->key_f = c->prefix;
                    c->c_f = wf ? (unsigned int)((P - acc + wf - 1) / wf) : 1u;
                }
            }
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) { c->mass[b] = 0ull; c->count[b] = 0u; }
    if (threadIdx.x == 0) c->done = 0u;
}

// === decoder_06_sample_parts ===
// Why: the draw runs in index order over the final set, and a block cannot scan 151936 logits fast
// alone: one block per chunk leaves the mass of its keys above key_f and its count equal to key_f.
extern "C" __global__ void decoder_06_sample_parts(const float* __restrict__ x, int n, int chunk,
                                                   const SampleCtl* __restrict__ c, float t,
                                                   unsigned long long* __restrict__ part_mass,
                                                   unsigned int* __restrict__ part_ties) {
    __shared__ unsigned long long sh[32];
    if (c->mode) return;
    const unsigned int key_f = c->key_f;
    const float m = c->m;
    const int base = blockIdx.x * chunk, end = min(n, base + chunk);
    unsigned long long s = 0ull, ties = 0ull, tot;
    for (int j = base + threadIdx.x; j < end; j += blockDim.x) {
        const float v = __ldg(x + j);
        const unsigned int key = sm_key(v);
        if (key > key_f) s += sm_weight(v, m, t);
        else if (key == key_f) ++ties;
    }
    sm_scan(s, sh, tot);
    if (threadIdx.x == 0) part_mass[blockIdx.x] = tot;
    sm_scan(ties, sh, tot);
    if (threadIdx.x == 0) part_ties[blockIdx.x] = (unsigned int)tot;
}

// === decoder_06_sample_final ===
// Why: one block turns the parts into running sums, finds the chunk that holds the draw and the index
// inside it, and writes the token, history and state as decoder_05_argmax_final does (the same
// bookkeeping, so the token step swaps one for the other).
extern "C" __global__ void decoder_06_sample_final(const float* __restrict__ x, int n, int chunk, int parts,
                                                   const SampleCtl* __restrict__ c, float t,
                                                   const unsigned long long* __restrict__ part_mass,
                                                   const unsigned int* __restrict__ part_ties,
                                                   unsigned long long seed, int pos_host, int* __restrict__ token,
                                                   int* __restrict__ state, int* __restrict__ history, int capacity) {
    __shared__ unsigned long long sh[32];
    __shared__ unsigned long long s_base, s_tbase;
    __shared__ int s_part, s_tok;
    const int pos = state ? state[0] : pos_host;
    if (threadIdx.x == 0) { s_tok = c->first_idx; s_part = -1; }
    __syncthreads();
    if (!c->mode) {
        const unsigned int key_f = c->key_f, c_f = c->c_f;
        const float m = c->m;
        const unsigned long long wf = c_f ? sm_weight(sm_val(key_f), m, t) : 0ull;
        const unsigned long long r = splitmix64(splitmix64(seed) ^ (unsigned long long)(unsigned int)pos);
        // the parts: thread i owns parts [i * per, (i + 1) * per)
        const int per = (parts + blockDim.x - 1) / blockDim.x;
        const int p0 = min(parts, threadIdx.x * per), p1 = min(parts, p0 + per);
        unsigned long long ties = 0ull, mass = 0ull, tot, z;
        for (int p = p0; p < p1; ++p) ties += part_ties[p];
        unsigned long long tb = sm_scan(ties, sh, tot);
        for (int p = p0; p < p1; ++p) {
            const unsigned long long tp = part_ties[p];
            const unsigned long long in = tb >= c_f ? 0ull : min(tp, (unsigned long long)c_f - tb);
            mass += part_mass[p] + in * wf;
            tb += tp;
        }
        unsigned long long mb = sm_scan(mass, sh, z);
        const unsigned long long T = __umul64hi(r, z);         // floor(r * Z / 2^64) < Z
        if (z && T >= mb && T < mb + mass) {
            tb -= ties;
            for (int p = p0; p < p1; ++p) {
                const unsigned long long tp = part_ties[p];
                const unsigned long long in = tb >= c_f ? 0ull : min(tp, (unsigned long long)c_f - tb);
                const unsigned long long mp = part_mass[p] + in * wf;
                if (T < mb + mp) { s_part = p; s_base = mb; s_tbase = tb; break; }
                mb += mp;
                tb += tp;
            }
        }
        __syncthreads();
        if (s_part >= 0) {                    // the same for every thread: scan the chunk of the draw
            const int per_e = (chunk + blockDim.x - 1) / blockDim.x;
            const int start = s_part * chunk, stop = min(n, start + chunk);
            const int e0 = min(stop, start + (int)threadIdx.x * per_e), e1 = min(stop, e0 + per_e);
            unsigned long long et = 0ull, em = 0ull;
            for (int j = e0; j < e1; ++j) et += sm_key(__ldg(x + j)) == key_f;
            unsigned long long rank = sm_scan(et, sh, tot) + s_tbase;
            const unsigned long long rank0 = rank;
            for (int j = e0; j < e1; ++j) {
                const float v = __ldg(x + j);
                const unsigned int key = sm_key(v);
                if (key > key_f) em += sm_weight(v, m, t);
                else if (key == key_f) em += (rank++ < c_f) ? wf : 0ull;
            }
            unsigned long long cum = sm_scan(em, sh, tot) + s_base;
            if (T >= cum && T < cum + em) {
                rank = rank0;
                for (int j = e0; j < e1; ++j) {
                    const float v = __ldg(x + j);
                    const unsigned int key = sm_key(v);
                    const unsigned long long w = key > key_f ? sm_weight(v, m, t)
                        : key == key_f ? ((rank++ < c_f) ? wf : 0ull) : 0ull;
                    cum += w;
                    if (T < cum) { s_tok = j; break; }
                }
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int idx = s_tok;
        token[0] = idx;
        if (state) {
            if (history && pos >= 0 && pos < capacity) history[pos] = idx;
            state[0] = pos + 1;
            state[1] = state[1] + 1;
        }
    }
}

// === decoder_07_qk_norm_rope ===
// Why: between the QKV GEMV and attention a Qwen3 token runs two small launches: the per-head
// RMSNorm of q and k (step 02) and RoPE + the KV-cache append (lab 07's step 06). Each moves about
// 10 KB, so each costs a launch and a round trip to memory, not bandwidth. One block per head does
// both: its d/2 threads hold the rotate-half pairs (i, i + d/2), the sum of squares is a butterfly
// per warp plus one shared-memory step across the (at most two) warps, the normalised head is
// rounded to fp16 exactly where step 02 stores it, then rotated by the angle of the device-side
// position and written (q to q_out; k to the cache, with v) as step 06 does. d is 64 or 128.
extern "C" __global__ void decoder_07_qk_norm_rope(const __half* __restrict__ q, const __half* __restrict__ k,
                                                   const __half* __restrict__ v, const __half* __restrict__ wq,
                                                   const __half* __restrict__ wk, const float* __restrict__ cos_t,
                                                   const float* __restrict__ sin_t, __half* __restrict__ q_out,
                                                   __half* __restrict__ kc, __half* __restrict__ vc,
                                                   const int* __restrict__ pos_ptr, int pos_host, int cap,
                                                   int hq, int hkv, int d, float eps) {
    __shared__ float part[2];
    const int H = d >> 1, row = blockIdx.x, i = threadIdx.x;       // one head per block, i in [0, H)
    const int pos = pos_ptr ? __ldg(pos_ptr) : pos_host;            // the same for the whole grid
    if (pos < 0 || pos >= cap) return;
    const bool is_q = row < hq;
    const __half* x = is_q ? q + (size_t)row * d : k + (size_t)(row - hq) * d;
    const __half* w = is_q ? wq : wk;
    const float x1 = __half2float(x[i]), x2 = __half2float(x[i + H]);
    float ss = warp_reduce_sum(fmaf(x1, x1, x2 * x2));
    if (H > 32) {                                                   // two warps: one shared step
        if ((i & 31) == 0) part[i >> 5] = ss;
        __syncthreads();
        ss = part[0] + part[1];
    }
    const float inv = rsqrtf(ss / (float)d + eps);
    const float n1 = __half2float(__float2half_rn(x1 * inv * __half2float(w[i])));       // step 02's fp16 store
    const float n2 = __half2float(__float2half_rn(x2 * inv * __half2float(w[i + H])));
    const float c = cos_t[pos * H + i], s = sin_t[pos * H + i];
    const __half y1 = __float2half(n1 * c - n2 * s), y2 = __float2half(n2 * c + n1 * s);
    if (is_q) {
        q_out[row * d + i] = y1;
        q_out[row * d + i + H] = y2;
    } else {
        const int g = row - hq;
        __half* kr = kc + ((size_t)g * cap + pos) * d;
        __half* vr = vc + ((size_t)g * cap + pos) * d;
        kr[i] = y1;
        kr[i + H] = y2;
        vr[i] = v[g * d + i];
        vr[i + H] = v[g * d + i + H];
    }
}

// === decoder_08_norm_gemv ===
// Why: a token runs its GEMVs at the read floor, yet the step is ~20% slower than the floor: the
// small launches between the GEMVs (add + RMSNorm, SiLU x up) cost a launch, a drain and a
// round trip each. Each of them produces the GEMV's input vector, and every warp of the GEMV reads
// all of that vector anyway (lab 04's step 27: a warp per row). So the warp forms its input as it
// reads it, 8 elements per 16-byte load, and nothing waits for anything else. XOP picks the
// producer it absorbs:
//   X_NORM: x = RMSNorm(h) * w. The warp sums h^2 while it reads h (the whole vector passes
//           through it), so y = inv * sum_j W_j (h_j w_j) with inv = rsqrt(mean(h^2) + eps) applied
//           once at the end (x is not rounded to fp16 on the way: no worse than lab 02's store);
//   X_SILU: x = SiLU(gate) * up, in fp32;
//   X_PLAIN: x as given.
// RESID adds the residual in the epilogue, in place: h[row] = h[row] + fp16(acc), the rounding of
// lab 02's fused add (each row is read and written by the one lane that owns it; no other block
// reads h). The loads and their order are step 27's: 16 loads in flight per lane (U), or two rows
// per warp with 8 each for tall matrices (R = 2; the SiLU step always takes two, so its exp runs
// once per two rows). Needs M % 8 == 0 and 16-byte aligned bases (the launcher checks).
#define X_PLAIN 0
#define X_NORM 1
#define X_SILU 2
#ifndef FG_WARPS
#define FG_WARPS 8         // warps per block (each 1 or 2 rows)
#endif
__device__ __forceinline__ uint4 ld_weights(const uint4* p) {      // read once: skip L1
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void store_out(__half* y, float v) { *y = __float2half_rn(v); }
__device__ __forceinline__ void store_out(float* y, float v) { *y = v; }

// Step 12's instructions (sm_90; nothing below it): let the next kernel of the stream launch; wait
// until the kernel ahead of this one has finished and its writes are visible; loads after the wait.
__device__ __forceinline__ void grid_let_next_launch() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// A load after the wait: plain ld.global (coherent), as volatile asm so the compiler keeps it after the
// wait. Not __ldg: ld.global.nc declares the bytes read-only for the kernel's whole life, which they
// are not here (the kernel ahead writes them while this one starts), and with it the tokens came out
// wrong in a device run. Not ld.global.cg either: every warp reading x from L2 made the token slower.
__device__ __forceinline__ uint4 ld_after_wait(const void* p) {
    uint4 r;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ __half ld_half_after_wait(const __half* p) {
    unsigned short r;
    asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(r) : "l"(p));
    return __ushort_as_half(r);
}
__device__ __forceinline__ void grid_wait_for_previous() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <int XOP, bool PDL = false>                 // x[8] (fp32) of the 16-byte group j; X_NORM also sums h^2
__device__ __forceinline__ void load_x(const uint4* a8, const uint4* b8, int j, float* x, float& ss) {
    Half8 p, q;
    p.u = PDL ? ld_after_wait(a8 + j) : __ldg(a8 + j);      // step 12: after the wait
    if (XOP != X_PLAIN) q.u = PDL ? ld_after_wait(b8 + j) : __ldg(b8 + j);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 u = __half22float2(p.h2[k]);
        if (XOP == X_PLAIN) { x[2 * k] = u.x; x[2 * k + 1] = u.y; continue; }
        const float2 v = __half22float2(q.h2[k]);
        if (XOP == X_NORM) {
            ss = fmaf(u.x, u.x, fmaf(u.y, u.y, ss));
            x[2 * k] = u.x * v.x, x[2 * k + 1] = u.y * v.y;
        } else {
            x[2 * k] = silu(u.x) * v.x, x[2 * k + 1] = silu(u.y) * v.y;
        }
    }
}
__device__ __forceinline__ float dot8x(uint4 w, const float* x, float s) {
    Half8 a;
    a.u = w;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 p = __half22float2(a.h2[k]);
        s = fmaf(p.x, x[2 * k], fmaf(p.y, x[2 * k + 1], s));
    }
    return s;
}

template <int R, int U, int XOP, bool RESID, typename OutT, bool PDL = false>
__device__ __forceinline__ void fused_rows(const __half* __restrict__ W, const __half* __restrict__ a,
                                           const __half* __restrict__ b, OutT* y, int K, int M, float eps) {
    const int row0 = (blockIdx.x * FG_WARPS + (threadIdx.x >> 5)) * R, lane = threadIdx.x & 31, n8 = M >> 3;
    const uint4* a8 = reinterpret_cast<const uint4*>(a);
    const uint4* b8 = reinterpret_cast<const uint4*>(b);
    if (PDL) grid_let_next_launch();
    if (row0 >= K) return;
    bool waited = !PDL;      // step 12: the weights' first loads go out before the wait, x's after it
    const uint4* wr[R];
    float acc[R], ss = 0.0f, x[8];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        wr[r] = reinterpret_cast<const uint4*>(W + (size_t)min(row0 + r, K - 1) * M);
        acc[r] = 0.0f;
    }
    int i = lane;
    for (; i + 32 * (U - 1) < n8; i += 32 * U) {
        uint4 w[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u)                      // all loads first: U x R x 16 bytes in flight
#pragma unroll
            for (int r = 0; r < R; ++r) w[u][r] = ld_weights(wr[r] + i + 32 * u);
        if (!waited) grid_wait_for_previous(), waited = true;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            load_x<XOP, PDL>(a8, b8, i + 32 * u, x, ss);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = dot8x(w[u][r], x, acc[r]);
        }
    }
    if (!waited) grid_wait_for_previous();
    for (; i < n8; i += 32) {
        load_x<XOP, PDL>(a8, b8, i, x, ss);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = dot8x(ld_weights(wr[r] + i), x, acc[r]);
    }
    const float scale = XOP == X_NORM ? rsqrtf(warp_reduce_sum(ss) / (float)M + eps) : 1.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const float s = warp_reduce_sum(acc[r]) * scale;
        if (lane == 0 && row0 + r < K) {
            if constexpr (RESID) {
                const float h0 = __half2float(PDL ? ld_half_after_wait(y + row0 + r) : y[row0 + r]);
                y[row0 + r] = __float2half_rn(h0 + __half2float(__float2half_rn(s)));
            }
            else store_out(y + row0 + r, s);
        }
    }
}
#define FUSED_ARGS const __half* __restrict__ W, const __half* __restrict__ a, const __half* __restrict__ b
#define FUSED_CALL(XOP, RESID, T, PDL) \
    if (two_rows) fused_rows<2, 8, XOP, RESID, T, PDL>(W, a, b, y, K, M, eps); \
    else fused_rows<1, 16, XOP, RESID, T, PDL>(W, a, b, y, K, M, eps)
extern "C" __global__ __launch_bounds__(FG_WARPS * 32) void
decoder_08_norm_gemv(FUSED_ARGS, __half* __restrict__ y, int K, int M, float eps, int two_rows) {
    FUSED_CALL(X_NORM, false, __half, false);
}

// === decoder_08_norm_logits ===
// Why: the final RMSNorm inside the logits GEMV (fp32 logits out, as lab 04's logits step).
extern "C" __global__ __launch_bounds__(FG_WARPS * 32) void
decoder_08_norm_logits(FUSED_ARGS, float* __restrict__ y, int K, int M, float eps, int two_rows) {
    FUSED_CALL(X_NORM, false, float, false);
}

// === decoder_09_gemv_residual ===
// Why: the residual add in the GEMV's epilogue: h += W x (the attention output projection), so the
// next RMSNorm has nothing to add and moves into the next GEMV's prologue (step 08).
extern "C" __global__ __launch_bounds__(FG_WARPS * 32) void
decoder_09_gemv_residual(FUSED_ARGS, __half* y, int K, int M, float eps, int two_rows) {
    FUSED_CALL(X_PLAIN, true, __half, false);
}

// === decoder_10_silu_gemv_residual ===
// Why: SiLU(gate) x up in the down GEMV's prologue (step 01's launch gone), the residual in its
// epilogue: h += W_down (SiLU(gate) * up).
extern "C" __global__ __launch_bounds__(FG_WARPS * 32) void
decoder_10_silu_gemv_residual(FUSED_ARGS, __half* y, int K, int M, float eps, int two_rows) {
    FUSED_CALL(X_SILU, true, __half, false);
}

// === decoder_11_l2_prefetch ===
// Why: with steps 08 and 09 the GEMVs alone run close to the read-only floor (lab 08's "where the
// gap goes" table); what is left is time when no weight streams: qk_rope and decode attention are
// latency-bound (a few MB, a chain of dependent round trips) and leave most SMs and most of HBM
// idle. The o projection's weights (4096 x 4096 fp16 = 32 MiB for Qwen3-8B) do not depend on
// attention, and fit in a large GPU's L2 (the device record's l2_bytes). So on a second stream, forked after the QKV GEMV, this kernel reads them
// into L2 (an evict-last policy: attention's few MB do not push them out) while attention runs;
// the o GEMV then finds them there. Nothing is computed: each lane keeps 8 loads in flight and
// folds them into one word that is never stored (the loads are volatile, so they stay).
extern "C" __global__ void decoder_11_l2_prefetch(const uint4* __restrict__ p, long long n16) {
#if __CUDA_ARCH__ >= 800
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
    const long long stride = (long long)gridDim.x * blockDim.x;
    unsigned fold = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const long long j = min(i + u * stride, n16 - 1);
#if __CUDA_ARCH__ >= 800
            asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + j), "l"(pol));
#else                                                           // (no L2 policy before sm_80)
            asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + j));
#endif
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) fold ^= v[u].x;
    }
    if (fold == 0x9e3779b9u && n16 < 0) asm volatile("trap;");     // never: keeps the fold alive
}

// === decoder_12_pdl_norm_gemv ===
// Why: with steps 08 and 09 each GEMV of the token streams its weights near the read floor, but
// between two kernels the stream stops: a kernel starts only when the one ahead of it has finished
// and its writes are flushed, so HBM idles while the last blocks drain, while the next grid
// launches, and all through the small latency-bound kernels (q/k norm + RoPE, decode attention,
// SiLU x up). Yet a GEMV's weights depend on nothing earlier in the token: only its x does.
// Programmatic dependent launch (sm_90) splits the dependence in two. Launched with the
// programmatic-serialization attribute (core/pdl.py; lab 08 does so inside the token's CUDA graph),
// this kernel may start as soon as every block of the kernel ahead has executed
// griddepcontrol.launch_dependents. Each warp then issues its first batch of weight loads (step
// 27's U x R x 16 bytes a lane: all of a 4096-wide row), and only then griddepcontrol.wait, which
// returns once the kernel ahead has completed and its writes are visible; x, and h for the
// residual, are read after it, by plain coherent loads. Every kernel of the token that a GEMV
// follows (these GEMVs, SiLU x up, decode attention) lets the next one launch at its start. The
// sums and the rounding are steps 08's and 09's. Launched without the attribute (or below sm_90)
// the two instructions do nothing. The cost: the first batch waits in registers (about 100 a
// thread, against step 08's 56), so fewer blocks fit an SM.
extern "C" __global__ __launch_bounds__(FG_WARPS * 32) void
decoder_12_pdl_norm_gemv(FUSED_ARGS, __half* __restrict__ y, int K, int M, float eps, int two_rows) {
    FUSED_CALL(X_NORM, false, __half, true);
}

// === decoder_12_pdl_norm_logits ===
// Why: step 12 for the logits GEMV (step 08's, after the last down GEMV).
extern "C" __global__ __launch_bounds__(FG_WARPS * 32) void
decoder_12_pdl_norm_logits(FUSED_ARGS, float* __restrict__ y, int K, int M, float eps, int two_rows) {
    FUSED_CALL(X_NORM, false, float, true);
}

// === decoder_12_pdl_gemv_residual ===
// Why: step 12 for step 09's GEMVs (the o and down projections, h += W x): h is read and written
// only after the wait.
extern "C" __global__ __launch_bounds__(FG_WARPS * 32) void
decoder_12_pdl_gemv_residual(FUSED_ARGS, __half* y, int K, int M, float eps, int two_rows) {
    FUSED_CALL(X_PLAIN, true, __half, true);
}
