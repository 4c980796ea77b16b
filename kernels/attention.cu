// attention.cu: attention is lab 01's online softmax done tile by tile.
//
// Part 1, LLM decode (Qwen3-8B: 32 query heads, 8 KV heads, head dim 128, fp16 KV cache): one new
// query token against the whole cache. Every key and value is read once per token: the kernel is
// bound by the bytes of the cache, so the ladder is about bytes in flight and enough blocks.
// Part 2, ViT prefill (Qwen3-VL's vision tower: 16 heads x 72, N tokens, non-causal): N x N scores.
// The report's path writes them to memory (cuBLAS); flash attention keeps them on the SM.
//
// Layouts: decode q [32, 128], caches [8, capacity, 128], o [32, 128]; prefill q, k, v, o
// [heads, N, 72] (lab 06's layout after split+RoPE). fp16 storage, fp32 arithmetic everywhere.
// Softmax runs in base 2: the launcher passes scale * log2(e), so exp(x) becomes one ex2.approx.
#include "common.cuh"

// The decode kernels are specialised at compile time for a model's head layout: the launcher passes
// -DDEC_D=<head dim> -DDEC_GROUP=<query heads per KV head> when they differ from Qwen3-8B's.
#ifndef DEC_D
#define DEC_D 128        // decode head dim (64 or 128)
#endif
#ifndef DEC_GROUP
#define DEC_GROUP 4      // query heads per KV head (32 / 8, GQA; 1 to 8)
#endif
#define DEC_LANES (DEC_D / 8)          // lanes that hold one key row, 16 bytes each (16 at head dim 128)
#define DEC_KPW (32 / DEC_LANES)       // keys a warp works on at once (2 at head dim 128)
#define PF_D 72          // prefill head dim
#define PF_DP 80         // ... padded to the mma's k = 16 (5 x 16)

// The sequence length of a decode call: read on the device when the caller passes a pointer (so
// one CUDA graph replays every token), else the host's value; clamped to the cache's capacity.
__device__ __forceinline__ int dec_len(const int* __restrict__ lens, int len_host, int cap) {
    int L = lens ? __ldg(lens) : len_host;
    return L < 0 ? 0 : (L > cap ? cap : L);
}

__device__ __forceinline__ float h8_dot(const uint4& a, const float* q) {
    Half8 v; v.u = a;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 f = __half22float2(v.h2[i]);
        s = fmaf(f.x, q[2 * i], fmaf(f.y, q[2 * i + 1], s));
    }
    return s;
}

// Sum across the DEC_LANES lanes that hold one key row (a row of 128 halves is a half-warp: 16 lanes
// x 16 bytes; of 64 halves, a quarter-warp).
__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
    for (int o = DEC_LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// exp2(a - b) where b may be -inf (nothing seen yet): 0 for a = -inf, never NaN from -inf - -inf.
__device__ __forceinline__ float ex2_diff(float a, float b) {
    return exp2f(a - (b == -KL_INF ? 0.0f : b));
}

// === attention_01_naive_scores ===
// Why: the formula, one operation per launch: scores s = q.k * scale for every cached key go to
// memory ([32, L] fp32), a softmax kernel normalises them in place, a third kernel multiplies by V.
// The scores make a round trip through DRAM and the three launches pay three launch costs: this is
// what lab 06's cuBLAS path does at prefill, here at decode size. One warp per (head, key).
extern "C" __global__ void attention_01_naive_scores(const __half* __restrict__ q, const __half* __restrict__ kc,
                                                     float* __restrict__ s, const int* __restrict__ lens,
                                                     int len_host, int cap, float scale_log2) {
    const int h = blockIdx.y, lane = threadIdx.x & 31;
    const int j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int L = dec_len(lens, len_host, cap);
    if (j >= L) return;
    const __half* kr = kc + ((size_t)(h / DEC_GROUP) * cap + j) * DEC_D;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < DEC_D / 32; ++i)
        acc = fmaf(__half2float(q[h * DEC_D + lane * (DEC_D / 32) + i]), __half2float(kr[lane * (DEC_D / 32) + i]), acc);
    acc = warp_reduce_sum(acc);
    if (lane == 0) s[(size_t)h * cap + j] = acc * scale_log2;
}

// === attention_01_naive_softmax ===
// Why: lab 01's safe softmax (max, sum, normalise: three passes), one block per head, in place, on
// scores already in base 2.
extern "C" __global__ void attention_01_naive_softmax(float* __restrict__ s, const int* __restrict__ lens,
                                                      int len_host, int cap) {
    __shared__ float red[33];
    const int L = dec_len(lens, len_host, cap);
    float* r = s + (size_t)blockIdx.x * cap;
    float m = -KL_INF;
    for (int j = threadIdx.x; j < L; j += blockDim.x) m = fmaxf(m, r[j]);
    m = block_reduce_max(m, red);
    float d = 0.0f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) d += ex2_diff(r[j], m);
    d = block_reduce_sum(d, red);
    for (int j = threadIdx.x; j < L; j += blockDim.x) r[j] = ex2_diff(r[j], m) / d;   // a NaN score makes d NaN: the row is NaN
}

// === attention_01_naive_pv ===
// Why: o = p.V, one block per head and one thread per output column: each thread walks all L
// probabilities and values. 32 blocks on a GPU with far more SMs: most of the chip idles.
extern "C" __global__ void attention_01_naive_pv(const float* __restrict__ p, const __half* __restrict__ vc,
                                                 __half* __restrict__ o, const int* __restrict__ lens,
                                                 int len_host, int cap) {
    const int h = blockIdx.x, d = threadIdx.x;
    const int L = dec_len(lens, len_host, cap);
    const float* pr = p + (size_t)h * cap;
    const __half* vr = vc + (size_t)(h / DEC_GROUP) * cap * DEC_D + d;
    float acc = 0.0f;
    for (int j = 0; j < L; ++j) acc = fmaf(pr[j], __half2float(vr[(size_t)j * DEC_D]), acc);
    o[h * DEC_D + d] = __float2half(L ? acc : __int_as_float(0x7fc00000));
}

// === attention_02_decode_head ===
// Why: step 01 wrote the scores to memory and read them twice, in three launches. Here one block per
// query head streams K and V once, keeping (m, l, acc) in registers: lab 01's online softmax with
// a vector accumulator. One launch, no scores in memory. But 32 blocks: on a GPU with more SMs than
// query heads most SMs idle, and each block has only 2 x 16 bytes per thread in flight.
//
// ---- the decode engine of steps 02-05 ---------------------------------------------------------
// A row of K (or V) is 128 halves = 256 bytes = 16 lanes x 16 bytes: a half-warp owns one key,
// lane `sub` (0..15) owns dims [8 sub, 8 sub + 8). Each of the block's 2 x (warps) half-warps walks
// its own keys with lab 01's online update, per query head g it serves:
//     m' = max(m, s);  l' = l 2^(m - m') + 2^(s - m');  acc' = acc 2^(m - m') + 2^(s - m') v
// and at the end the half-warps' (m, l, acc) are merged with the same rule (dec_block_merge).
// GROUP query heads share one KV head: GROUP = 1 reads K and V once per query head, GROUP = 4 once
// per KV head. TILE keys are loaded (all 2 x TILE 16-byte loads issued) before any is used, and
// the online update is applied once per tile: TILE sets the bytes in flight per thread.
template <int GROUP, int TILE>
struct DecState {
    float m[GROUP], l[GROUP], acc[GROUP][8];
};

template <int TILE>
__device__ __forceinline__ void dec_load(uint4 (&kk)[TILE], uint4 (&vv)[TILE], const __half* __restrict__ kr,
                                         const __half* __restrict__ vr, int j, int j1, int stride) {
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
        const int jj = j + t * stride;
        const bool ok = jj < j1;
        kk[t] = ok ? __ldg(reinterpret_cast<const uint4*>(kr + (size_t)jj * DEC_D)) : make_uint4(0, 0, 0, 0);
        vv[t] = ok ? __ldg(reinterpret_cast<const uint4*>(vr + (size_t)jj * DEC_D)) : make_uint4(0, 0, 0, 0);
    }
}

template <int GROUP, int TILE, bool PREFETCH>
__device__ __forceinline__ void dec_walk(DecState<GROUP, TILE>& st, const float (&qf)[GROUP][8],
                                         const __half* __restrict__ kr, const __half* __restrict__ vr,
                                         int jw, int j1, int half, int stride) {
    // kr, vr: this KV head's cache rows, offset to this lane's 8 dims. The loop runs on the warp's
    // base key jw (both halves take the same trips: the shuffles need the whole warp); this
    // half-warp's keys are jw + half + t * stride, and those >= j1 are masked.
    uint4 kk[TILE], vv[TILE];
    dec_load<TILE>(kk, vv, kr, vr, jw + half, j1, stride);
    for (; jw < j1; jw += stride * TILE) {
        uint4 nk[TILE], nv[TILE];
        if (PREFETCH) dec_load<TILE>(nk, nv, kr, vr, jw + stride * TILE + half, j1, stride);  // next tile's bytes fly during this one
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
            float s[TILE], mt = st.m[g];
#pragma unroll
            for (int t = 0; t < TILE; ++t) {
                s[t] = half_warp_sum(h8_dot(kk[t], qf[g]));
                if (jw + half + t * stride >= j1) s[t] = -KL_INF;
                mt = fmaxf(mt, s[t]);
            }
            const float alpha = ex2_diff(st.m[g], mt);
            st.l[g] *= alpha;
#pragma unroll
            for (int i = 0; i < 8; ++i) st.acc[g][i] *= alpha;
#pragma unroll
            for (int t = 0; t < TILE; ++t) {
                const float p = ex2_diff(s[t], mt);
                st.l[g] += p;
                Half8 v; v.u = vv[t];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float2 f = __half22float2(v.h2[i]);
                    st.acc[g][2 * i] = fmaf(p, f.x, st.acc[g][2 * i]);
                    st.acc[g][2 * i + 1] = fmaf(p, f.y, st.acc[g][2 * i + 1]);
                }
            }
            st.m[g] = mt;
        }
        if (PREFETCH) {
#pragma unroll
            for (int t = 0; t < TILE; ++t) { kk[t] = nk[t]; vv[t] = nv[t]; }
        } else {
            dec_load<TILE>(kk, vv, kr, vr, jw + stride * TILE + half, j1, stride);
        }
    }
}

// Merge the block's half-warps (lab 01's (m, d) combine, on vectors) and write either the final
// fp16 output (one chunk) or this chunk's partial: the normalised output and its log-sum-exp
// lse = m + log2(l) (base 2), for the merge kernel.
template <int GROUP, int TILE>
__device__ __forceinline__ void dec_block_merge(DecState<GROUP, TILE>& st, float* sm, int halves,
                                                int qh0, int chunk, int chunks, __half* __restrict__ o,
                                                float* __restrict__ part_o, float* __restrict__ part_lse) {
    const int hw = threadIdx.x / DEC_LANES, sub = threadIdx.x % DEC_LANES;
    // sm: [halves][GROUP][2 + DEC_D]
    float* mine = sm + hw * GROUP * (2 + DEC_D);
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        if (sub == 0) { mine[g * (2 + DEC_D)] = st.m[g]; mine[g * (2 + DEC_D) + 1] = st.l[g]; }
#pragma unroll
        for (int i = 0; i < 8; ++i) mine[g * (2 + DEC_D) + 2 + sub * 8 + i] = st.acc[g][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < GROUP * DEC_D; idx += blockDim.x) {
        const int g = idx / DEC_D, d = idx % DEC_D;
        float M = -KL_INF;
        for (int w = 0; w < halves; ++w) M = fmaxf(M, sm[(w * GROUP + g) * (2 + DEC_D)]);
        float l = 0.0f, a = 0.0f;
        for (int w = 0; w < halves; ++w) {
            const float* r = sm + (w * GROUP + g) * (2 + DEC_D);
            const float c = ex2_diff(r[0], M);
            l = fmaf(r[1], c, l);
            a = fmaf(r[2 + d], c, a);
        }
        const int h = qh0 + g;
        if (chunks == 1) {
            o[h * DEC_D + d] = __float2half(a / l);          // l = 0 (no keys): 0/0 = NaN, as the reference
        } else {
            part_o[((size_t)h * chunks + chunk) * DEC_D + d] = l > 0.0f ? a / l : 0.0f;
            if (d == 0) part_lse[h * chunks + chunk] = l > 0.0f || isnan(l) ? M + __log2f(l) : -KL_INF;
        }
    }
}

template <int GROUP, int TILE, bool PREFETCH = false>
__device__ __forceinline__ void dec_kernel(const __half* __restrict__ q, const __half* __restrict__ kc,
                                           const __half* __restrict__ vc, __half* __restrict__ o,
                                           float* __restrict__ part_o, float* __restrict__ part_lse,
                                           const int* __restrict__ lens, int len_host, int cap,
                                           float scale_log2, int chunk_len) {
    extern __shared__ float dec_sm[];
    const int kvh = GROUP == 1 ? blockIdx.x / DEC_GROUP : blockIdx.x;  // GROUP 1: blockIdx.x is the query head
    const int qh0 = GROUP == 1 ? blockIdx.x : blockIdx.x * GROUP;
    const int chunk = blockIdx.y, chunks = gridDim.y;
    const int hw = threadIdx.x / DEC_LANES, sub = threadIdx.x % DEC_LANES, halves = blockDim.x / DEC_LANES;
    const int L = dec_len(lens, len_host, cap);
    const int j0 = chunk * chunk_len, j1 = min(L, j0 + chunk_len);
    float qf[GROUP][8];
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        Half8 v; v.u = __ldg(reinterpret_cast<const uint4*>(q + (qh0 + g) * DEC_D + sub * 8));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float2 f = __half22float2(v.h2[i]);
            qf[g][2 * i] = f.x * scale_log2;
            qf[g][2 * i + 1] = f.y * scale_log2;
        }
    }
    DecState<GROUP, TILE> st;
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        st.m[g] = -KL_INF; st.l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) st.acc[g][i] = 0.0f;
    }
    const size_t base = (size_t)kvh * cap * DEC_D + sub * 8;
    dec_walk<GROUP, TILE, PREFETCH>(st, qf, kc + base, vc + base, j0 + DEC_KPW * (threadIdx.x >> 5), j1,
                                    hw % DEC_KPW, halves);
    dec_block_merge<GROUP, TILE>(st, dec_sm, halves, qh0, chunk, chunks, o, part_o, part_lse);
}

extern "C" __global__ __launch_bounds__(128) void attention_02_decode_head(
        const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
        __half* __restrict__ o, float* __restrict__ part_o, float* __restrict__ part_lse,
        const int* __restrict__ lens, int len_host, int cap, float scale_log2, int chunk_len) {
    dec_kernel<1, 1>(q, kc, vc, o, part_o, part_lse, lens, len_host, cap, scale_log2, chunk_len);
}

// === attention_03_decode_split ===
// Why: step 02 has one block per query head: 32 blocks. Flash decoding cuts the cache into chunks,
// one block per (head, chunk), so every SM gets work. Each block writes its chunk's normalised
// output and log-sum-exp; attention_03_decode_merge combines them. Same kernel body as step 02:
// only the grid changes (gridDim.y = chunks).
extern "C" __global__ __launch_bounds__(128) void attention_03_decode_split(
        const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
        __half* __restrict__ o, float* __restrict__ part_o, float* __restrict__ part_lse,
        const int* __restrict__ lens, int len_host, int cap, float scale_log2, int chunk_len) {
    dec_kernel<1, 1>(q, kc, vc, o, part_o, part_lse, lens, len_host, cap, scale_log2, chunk_len);
}

// === attention_03_decode_merge ===
// Why: the chunks' partial results are merged with lab 01's combine rule, on vectors:
//     M = max_c lse_c,   w_c = 2^(lse_c - M),   o = sum_c w_c o_c / sum_c w_c
// (lse_c = m_c + log2 l_c carries both of the chunk's (m, d) in one number). One thread per output
// column of one head; an empty chunk has lse = -inf and weight 0.
extern "C" __global__ void attention_03_decode_merge(const float* __restrict__ part_o,
                                                     const float* __restrict__ part_lse,
                                                     __half* __restrict__ o, int chunks) {
    const int h = blockIdx.x, d = threadIdx.x;
    const float* lse = part_lse + h * chunks;
    float M = -KL_INF;
    for (int c = 0; c < chunks; ++c) M = fmaxf(M, lse[c]);
    float w = 0.0f, a = 0.0f;
    for (int c = 0; c < chunks; ++c) {
        const float e = ex2_diff(lse[c], M);
        w += e;
        a = fmaf(e, part_o[((size_t)h * chunks + c) * DEC_D + d], a);
    }
    o[h * DEC_D + d] = __float2half(a / w);
}

// === attention_04_decode_gqa ===
// Why: Qwen3-8B's 32 query heads share 8 KV heads (grouped-query attention). Steps 02-03 read each
// KV head's cache once per query head: 4 times. Here one block per (KV head, chunk) serves the 4
// query heads of its group, so each KV head is loaded by one block, not four: a quarter of the DRAM
// bytes where step 03's repeated reads miss L2. The price is 4x the registers for the accumulators
// (4 heads x 8 dims per lane) and a quarter of the blocks, each doing 4 heads' work: lab 07 times it
// against step 03 at every length, beside the cache's bytes against the L2.
extern "C" __global__ __launch_bounds__(128) void attention_04_decode_gqa(
        const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
        __half* __restrict__ o, float* __restrict__ part_o, float* __restrict__ part_lse,
        const int* __restrict__ lens, int len_host, int cap, float scale_log2, int chunk_len) {
    dec_kernel<DEC_GROUP, 1>(q, kc, vc, o, part_o, part_lse, lens, len_host, cap, scale_log2, chunk_len);
}

// === attention_05_decode_gqa_tile ===
// Why: step 04 issues one K and one V load per half-warp, waits, computes, then loads the next: 32
// bytes per thread in flight. Lab 00's Little's law says the read roof needs (roof x latency) bytes
// in flight per SM. Here each half-warp issues TILE = 4 keys' K and V loads (128 bytes per thread)
// before using any, issues the next tile's loads before computing this one (prefetch: 256 bytes
// per thread in flight), and rescales its accumulators once per tile instead of once per key. The
// launcher picks the chunk count from the SM count and the length (one resident wave of blocks,
// chunks long enough to amortise the merge), and skips the merge when one chunk suffices.
extern "C" __global__ __launch_bounds__(128, 2) void attention_05_decode_gqa_tile(
        const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
        __half* __restrict__ o, float* __restrict__ part_o, float* __restrict__ part_lse,
        const int* __restrict__ lens, int len_host, int cap, float scale_log2, int chunk_len) {
    dec_kernel<DEC_GROUP, 4, true>(q, kc, vc, o, part_o, part_lse, lens, len_host, cap, scale_log2, chunk_len);
}

// === attention_05_ablate_no_prefetch ===
// Why: an ablation, not a step: step 05 without the next tile's prefetch (each tile's 4 keys are loaded, used,
// then the next 4 are loaded), same launch bounds, launched on step 05's grid. Against step 05 it
// times the prefetch alone.
extern "C" __global__ __launch_bounds__(128, 2) void attention_05_ablate_no_prefetch(
        const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
        __half* __restrict__ o, float* __restrict__ part_o, float* __restrict__ part_lse,
        const int* __restrict__ lens, int len_host, int cap, float scale_log2, int chunk_len) {
    dec_kernel<DEC_GROUP, 4, false>(q, kc, vc, o, part_o, part_lse, lens, len_host, cap, scale_log2, chunk_len);
}

// === attention_05_ablate_tile1 ===
// Why: an ablation, not a step: one key a tile and no prefetch (step 04's body) under step 05's launch bounds,
// launched on step 05's grid (its chunk rule). Against 05_ablate_no_prefetch it times the 4-key tile
// alone; against step 04 (same body, step 04's grid) the chunk rule alone.
extern "C" __global__ __launch_bounds__(128, 2) void attention_05_ablate_tile1(
        const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
        __half* __restrict__ o, float* __restrict__ part_o, float* __restrict__ part_lse,
        const int* __restrict__ lens, int len_host, int cap, float scale_log2, int chunk_len) {
    dec_kernel<DEC_GROUP, 1>(q, kc, vc, o, part_o, part_lse, lens, len_host, cap, scale_log2, chunk_len);
}

// === attention_06_rope_append ===
// Why: before attention, a decode step rotates this token's q and k by its position (Qwen3's RoPE:
// 1-D, theta = 1e6, rotate-half: dims i and i + 64 form a pair turned by the angle pos theta^(-i/64))
// and appends k and v to the cache at `pos`. One launch does all three, and reads pos on the device
// (when given a pointer), so a captured CUDA graph replays every token; a device-side pos outside
// the cache writes nothing. cos/sin come from a [capacity, 64] fp32 table built once in float64.
extern "C" __global__ void attention_06_rope_append(const __half* __restrict__ q, const __half* __restrict__ k,
                                                    const __half* __restrict__ v, const float* __restrict__ cos_t,
                                                    const float* __restrict__ sin_t, __half* __restrict__ q_out,
                                                    __half* __restrict__ kc, __half* __restrict__ vc,
                                                    const int* __restrict__ pos_ptr, int pos_host,
                                                    int cap, int hq, int hkv) {
    constexpr int H = DEC_D / 2;                      // rotate-half: dims i and i + H form a pair
    const int row = blockIdx.x, i = threadIdx.x;      // one head per block, i in [0, H)
    const int pos = pos_ptr ? __ldg(pos_ptr) : pos_host;
    if (pos < 0 || pos >= cap) return;
    const float c = cos_t[pos * H + i], s = sin_t[pos * H + i];
    const __half* x = row < hq ? q + row * DEC_D : k + (row - hq) * DEC_D;
    const float x1 = __half2float(x[i]), x2 = __half2float(x[i + H]);
    const __half y1 = __float2half(x1 * c - x2 * s), y2 = __float2half(x2 * c + x1 * s);
    if (row < hq) {
        q_out[row * DEC_D + i] = y1;
        q_out[row * DEC_D + i + H] = y2;
    } else {
        const int g = row - hq;
        __half* kr = kc + ((size_t)g * cap + pos) * DEC_D;
        __half* vr = vc + ((size_t)g * cap + pos) * DEC_D;
        kr[i] = y1;
        kr[i + H] = y2;
        vr[i] = v[g * DEC_D + i];
        vr[i + H] = v[g * DEC_D + i + H];
    }
}

// ---- ViT prefill --------------------------------------------------------------------------------

// === attention_11_prefill_row ===
// Why: the report's path writes 16 x N x N scores to memory and reads them back twice (softmax, then
// P.V): at N = 4096 that is 16 x 4096^2 x 2 B = 512 MiB each way, against 4 x 16 x 4096 x 72 x 2 B
// = 36 MiB of q, k, v and o. Fused: one block per query row walks K and V in tiles of blockDim
// keys, with lab 01's online (m, l) and the accumulator rescaled per tile; the scores never leave
// the SM. Slow (CUDA cores, each K row re-read by every query row through the caches), but it is
// the whole algorithm in a few lines.
extern "C" __global__ __launch_bounds__(128) void attention_11_prefill_row(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, float scale_log2) {
    __shared__ float qs[PF_D];
    __shared__ float ps[128];
    __shared__ float red[33];
    const int h = blockIdx.y, row = blockIdx.x, t = threadIdx.x;
    const size_t hb = (size_t)h * N * PF_D;
    if (t < PF_D) qs[t] = __half2float(q[hb + (size_t)row * PF_D + t]) * scale_log2;
    __syncthreads();
    float m = -KL_INF, l = 0.0f, acc = 0.0f;           // thread t < 72 owns output column t
    for (int j0 = 0; j0 < N; j0 += 128) {
        const int j = j0 + t;
        float s = -KL_INF;
        if (j < N) {
            const __half2* kr = reinterpret_cast<const __half2*>(k + hb + (size_t)j * PF_D);
            s = 0.0f;
#pragma unroll
            for (int i = 0; i < PF_D / 2; ++i) {
                float2 f = __half22float2(kr[i]);
                s = fmaf(f.x, qs[2 * i], fmaf(f.y, qs[2 * i + 1], s));
            }
        }
        const float mt = fmaxf(m, block_reduce_max(s, red));
        const float p = ex2_diff(s, mt);
        ps[t] = p;
        const float alpha = ex2_diff(m, mt);
        l = l * alpha + block_reduce_sum(p, red);       // (its barriers also publish ps)
        m = mt;
        if (t < PF_D) {
            acc *= alpha;
            const int n = min(128, N - j0);
            for (int jj = 0; jj < n; ++jj) acc = fmaf(ps[jj], __half2float(v[hb + (size_t)(j0 + jj) * PF_D + t]), acc);
        }
        __syncthreads();                                 // ps is rewritten next tile
    }
    if (t < PF_D) o[hb + (size_t)row * PF_D + t] = __float2half(acc / l);
}

// === attention_12_prefill_mma ===
// Why: step 11 does every multiply-add on CUDA cores and re-reads each K and V row once per query
// row. Here a block of 4 warps owns 64 query rows, each K/V tile is loaded into shared memory once
// for all of them, and QK^T and PV run on the tensor cores (mma.sync.m16n8k16, fp16 in, fp32
// accumulate), with the online softmax in registers between the two (FlashAttention-2's order). The
// tiles are stored 80 halves wide (the mma's padded k). Loads are plain: the warps wait for each
// tile before computing, and a 160-byte row stride puts ldmatrix's 8 rows on 4 bank groups (2-way
// conflicts). Needs sm_80.
//
// ---- tensor cores: mma.sync.m16n8k16 (sm_80+) -------------------------------------------------
// FlashAttention-2's order: a block owns PF_BR = 64 query rows (4 warps x 16), streams K/V tiles of
// PF_BC = 64 keys through shared memory. Per tile each warp computes S = Q K^T (16 x 64, fp32, in
// registers), updates its rows' (m, l) and rescales its O accumulator (16 x 80), turns S into
// P (fp16, the S accumulator layout *is* the mma A layout) and adds P V. Head dim 72 is padded to
// 80 = 5 x 16 for the mma's k: the pad columns are zero in shared memory (zero in Q and K: the
// padded dot products are exact; O's pad columns are computed and dropped), so 80/72 = 1.11x the
// tensor-core work of the exact size.
#define PF_BR 64
#define PF_BC 64

__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// ldmatrix: four 8x8 b16 tiles from shared memory into a warp's mma fragments (TRANS: transposed,
// for the V operand of P.V).
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(unsigned* r, const __half* p) {
#if __CUDA_ARCH__ >= 800
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}

// 16 bytes global -> shared, asynchronously (no register round trip); src_bytes = 0 writes zeros.
__device__ __forceinline__ void cp_async16(__half* dst, const __half* src, bool ok) {
#if __CUDA_ARCH__ >= 800
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(a), "l"(src), "r"(ok ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
#endif
}

__device__ __forceinline__ unsigned pack_h2(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<unsigned*>(&h);
}

// rows [r0, r0 + 64) of an [N, DH] matrix whose rows lie rs halves apart -> shared [64][LD]
// (columns 0..DH-1; rows >= N as zeros)
template <bool ASYNC, int LD, int DH = PF_D>
__device__ __forceinline__ void pf_load_tile(__half* dst, const __half* __restrict__ src, int r0, int N, int rs = DH) {
    for (int i = threadIdx.x; i < PF_BC * (DH / 8); i += blockDim.x) {
        const int r = i / (DH / 8), c = (i % (DH / 8)) * 8;
        const bool ok = r0 + r < N;
        const __half* g = src + (size_t)(ok ? r0 + r : 0) * rs + c;
        if (ASYNC) {
            cp_async16(dst + r * LD + c, g, ok);
        } else {
            *reinterpret_cast<uint4*>(dst + r * LD + c) = ok ? *reinterpret_cast<const uint4*>(g) : make_uint4(0, 0, 0, 0);
        }
    }
}

// The register stage of the ablation 13_ablate_reg_stages: each of 128 threads holds PF_HELD(DH) 16-byte
// pieces of the next K tile and as many of V (loaded before this tile's compute, stored after it).
#define PF_HELD(DH) ((PF_BC * ((DH) / 8) + 127) / 128)
template <int DH, int H>
__device__ __forceinline__ void pf_hold_tile(uint4 (&kr)[H], uint4 (&vr)[H], const __half* __restrict__ k,
                                             const __half* __restrict__ v, int r0, int N, int rs) {
#pragma unroll
    for (int j = 0; j < H; ++j) {
        const int i = threadIdx.x + j * 128, r = i / (DH / 8), c = (i % (DH / 8)) * 8;
        const bool ok = i < PF_BC * (DH / 8) && r0 + r < N;
        const size_t at = (size_t)(ok ? r0 + r : 0) * rs + c;
        kr[j] = ok ? *reinterpret_cast<const uint4*>(k + at) : make_uint4(0, 0, 0, 0);
        vr[j] = ok ? *reinterpret_cast<const uint4*>(v + at) : make_uint4(0, 0, 0, 0);
    }
}
template <int LD, int DH, int H>
__device__ __forceinline__ void pf_store_tile(__half* ks, __half* vs, const uint4 (&kr)[H], const uint4 (&vr)[H]) {
#pragma unroll
    for (int j = 0; j < H; ++j) {
        const int i = threadIdx.x + j * 128, r = i / (DH / 8), c = (i % (DH / 8)) * 8;
        if (i < PF_BC * (DH / 8)) {
            *reinterpret_cast<uint4*>(ks + r * LD + c) = kr[j];
            *reinterpret_cast<uint4*>(vs + r * LD + c) = vr[j];
        }
    }
}

// The geometry of one prefill call: N query rows per head, NK keys (NK = N, or the cache's p0 + N
// for a causal prompt that starts at position p0), and where each head and row lives (strides in
// halves): the ViT's [heads, N, 72] arrays, or a decoder's q and o [N, heads, 128] beside its KV cache
// [KV heads, capacity, 128]. Query head h reads KV head h / group (GQA).
struct PfShape {
    int N, NK, p0, group;
    long long q_hs, q_rs, kv_hs, kv_rs, o_hs, o_rs;
};

// MT: query tiles of 16 rows per warp (the block owns MT x 64 rows). Every K or V fragment a warp
// loads with ldmatrix feeds MT x 2 mma's. DH: the head dim, DP: it padded to the mma's k (16);
// CAUSAL: query row i (position p0 + i) sees keys 0..p0 + i only, and tiles past the last row's
// position are skipped. STAGES: K/V buffers in shared memory (2: tile t + 1 is fetched while tile t
// computes); ASYNC: the tiles are copied with cp.async (no register round trip), else loaded through
// registers (with 2 stages: held in registers during the compute and stored after it).
template <bool ASYNC, int LD, int MT = 1, int DH = PF_D, int DP = PF_DP, bool CAUSAL = false, int STAGES = ASYNC ? 2 : 1>
__device__ __forceinline__ void pf_mma_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                                              const __half* __restrict__ v, __half* __restrict__ o,
                                              const PfShape g, float scale_log2) {
#if __CUDA_ARCH__ >= 800
    constexpr int TILE = PF_BC * LD;                   // halves per K or V tile
    constexpr int KC = DP / 16, ON = DP / 8;           // mma k-chunks of a row; 8-column output blocks
    extern __shared__ __align__(16) __half pf_sm[];    // [STAGES][K, V][64][LD]; Q borrows the last stage
    const int h = blockIdx.y, r0 = blockIdx.x * PF_BR * MT, N = g.N, NK = g.NK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const __half *qh = q + h * g.q_hs, *kh = k + (h / g.group) * g.kv_hs, *vh = v + (h / g.group) * g.kv_hs;
    // zero the pad columns DH..LD of every tile once: the loads below never write them
    for (int i = threadIdx.x; i < 2 * STAGES * PF_BC; i += blockDim.x)
        for (int c = DH; c < LD; ++c) pf_sm[i * LD + c] = __float2half(0.0f);
    __half* qs = pf_sm + (STAGES - 1) * 2 * TILE;
#pragma unroll
    for (int i = 0; i < MT; ++i) pf_load_tile<false, LD, DH>(qs + i * TILE, qh, r0 + i * PF_BC, N, (int)g.q_rs);
    __syncthreads();
    unsigned qa[MT][KC][4];                            // this warp's MT x 16 rows of Q as mma A fragments
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int c = 0; c < KC; ++c)
            ldsm_x4<false>(qa[i][c], qs + (i * PF_BR + warp * 16 + (lane & 15)) * LD + c * 16 + (lane >> 4) * 8);
    __syncthreads();                                   // Q's space is reused by the K/V tiles
    float oacc[MT][ON][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int n = 0; n < ON; ++n) oacc[i][n][0] = oacc[i][n][1] = oacc[i][n][2] = oacc[i][n][3] = 0.0f;
    float m[MT][2], l[MT][2];                          // per query tile: rows lane/4 and lane/4 + 8
#pragma unroll
    for (int i = 0; i < MT; ++i) m[i][0] = m[i][1] = -KL_INF, l[i][0] = l[i][1] = 0.0f;
    int tiles = (NK + PF_BC - 1) / PF_BC;
    if (CAUSAL) tiles = min(tiles, (g.p0 + r0 + PF_BR * MT - 1) / PF_BC + 1);   // keys past the block's last row
    const int kr = (int)g.kv_rs;
    if (STAGES == 2) {                                 // the first tile, before the loop
        pf_load_tile<ASYNC, LD, DH>(pf_sm, kh, 0, NK, kr);
        pf_load_tile<ASYNC, LD, DH>(pf_sm + TILE, vh, 0, NK, kr);
        if (ASYNC) cp_async_commit();
    }
    uint4 nk_r[STAGES == 2 && !ASYNC ? PF_HELD(DH) : 1], nv_r[STAGES == 2 && !ASYNC ? PF_HELD(DH) : 1];
    for (int t = 0; t < tiles; ++t) {
        __half *ks = pf_sm + (STAGES == 2 ? (t & 1) : 0) * 2 * TILE, *vs = ks + TILE;
        if (STAGES == 2 && ASYNC) {
            if (t + 1 < tiles) {                       // the next tile streams in while this one computes
                __half* nk = pf_sm + ((t + 1) & 1) * 2 * TILE;
                pf_load_tile<true, LD, DH>(nk, kh, (t + 1) * PF_BC, NK, kr);
                pf_load_tile<true, LD, DH>(nk + TILE, vh, (t + 1) * PF_BC, NK, kr);
            }
            cp_async_commit();
            cp_async_wait<1>();
        } else if (STAGES == 2) {                      // the next tile's loads fly during this one, in registers
            if (t + 1 < tiles) pf_hold_tile<DH>(nk_r, nv_r, kh, vh, (t + 1) * PF_BC, NK, kr);
        } else {
            pf_load_tile<ASYNC, LD, DH>(ks, kh, t * PF_BC, NK, kr);
            pf_load_tile<ASYNC, LD, DH>(vs, vh, t * PF_BC, NK, kr);
            if (ASYNC) { cp_async_commit(); cp_async_wait<0>(); }
        }
        __syncthreads();
        // S = Q K^T: MT x 16 x 64 per warp; each K fragment serves every query tile
        float s[MT][8][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int n = 0; n < 8; ++n) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) {
#pragma unroll
            for (int n = 0; n < 8; n += 2) {
                unsigned b[4];   // keys 8n..8n+15, dims 16c..16c+15
                ldsm_x4<false>(b, ks + (n * 8 + (lane & 7) + ((lane >> 4) << 3)) * LD + c * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma16816(s[i][n], qa[i][c], b[0], b[1]);
                    mma16816(s[i][n + 1], qa[i][c], b[2], b[3]);
                }
            }
        }
        // online softmax on this thread's 2 rows per query tile (4 lanes share a row: 2 shuffles)
        const int kbase = t * PF_BC + (lane & 3) * 2;
        unsigned pa[MT][4][4];                         // P as A fragments: 4 chunks of 16 keys
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            float mt[2] = {m[i][0], m[i][1]};
            const int qpos = g.p0 + r0 + i * PF_BR + warp * 16 + (lane >> 2);   // this thread's first row's position
#pragma unroll
            for (int n = 0; n < 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[i][n][e] * scale_log2;
                    const int key = kbase + n * 8 + (e & 1);
                    if (key >= NK || (CAUSAL && key > qpos + (e >> 1) * 8)) x = -KL_INF;
                    s[i][n][e] = x;
                    mt[e >> 1] = fmaxf(mt[e >> 1], x);
                }
            float alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 1));
                mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 2));
                alpha[r] = ex2_diff(m[i][r], mt[r]);
                m[i][r] = mt[r];
            }
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                const float p0 = ex2_diff(s[i][n][0], m[i][0]), p1 = ex2_diff(s[i][n][1], m[i][0]);
                const float p2 = ex2_diff(s[i][n][2], m[i][1]), p3 = ex2_diff(s[i][n][3], m[i][1]);
                rs[0] += p0 + p1;
                rs[1] += p2 + p3;
                pa[i][n >> 1][(n & 1) * 2] = pack_h2(p0, p1);
                pa[i][n >> 1][(n & 1) * 2 + 1] = pack_h2(p2, p3);
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 1);
                rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 2);
                l[i][r] = l[i][r] * alpha[r] + rs[r];
            }
#pragma unroll
            for (int n = 0; n < ON; ++n) {
                oacc[i][n][0] *= alpha[0]; oacc[i][n][1] *= alpha[0];
                oacc[i][n][2] *= alpha[1]; oacc[i][n][3] *= alpha[1];
            }
        }
        // O += P V: keys are the k dimension, V^T fragments by ldmatrix.trans, each serving every query tile
#pragma unroll
        for (int c = 0; c < 4; ++c) {
#pragma unroll
            for (int n = 0; n < ON; n += 2) {
                unsigned b[4];   // keys 16c..16c+15, dims 8n..8n+15
                ldsm_x4<true>(b, vs + (c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n * 8 + (lane >> 4) * 8);
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma16816(oacc[i][n], pa[i][c], b[0], b[1]);
                    mma16816(oacc[i][n + 1], pa[i][c], b[2], b[3]);
                }
            }
        }
        if (STAGES == 2 && !ASYNC && t + 1 < tiles) {  // the held tile into the other stage
            __half* nk = pf_sm + ((t + 1) & 1) * 2 * TILE;
            pf_store_tile<LD, DH>(nk, nk + TILE, nk_r, nv_r);
        }
        __syncthreads();                               // this stage is overwritten next
    }
    // O / l, rows < N, columns < DH
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = r0 + i * PF_BR + warp * 16 + (lane >> 2) + r * 8;
            if (row >= N) continue;
            const float inv = 1.0f / l[i][r];
#pragma unroll
            for (int n = 0; n < DH / 8; ++n) {
                const int col = n * 8 + (lane & 3) * 2;
                *reinterpret_cast<__half2*>(o + h * g.o_hs + row * g.o_rs + col) =
                    __floats2half2_rn(oacc[i][n][2 * r] * inv, oacc[i][n][2 * r + 1] * inv);
            }
        }
#endif
}

// The ViT's geometry: [16 heads, N, 72] q, k, v and o, every query against every key.
__device__ __forceinline__ PfShape pf_vit(int N) {
    const long long hs = (long long)N * PF_D;
    return PfShape{N, N, 0, 1, hs, PF_D, hs, PF_D, hs, PF_D};
}

extern "C" __global__ __launch_bounds__(128) void attention_12_prefill_mma(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, float scale_log2) {
    pf_mma_kernel<false, PF_DP>(q, k, v, o, pf_vit(N), scale_log2);
}

// === attention_13_prefill_cp_async ===
// Why: in step 12 every warp stalls while a tile crosses from DRAM (or L2) to shared memory. Here
// cp.async copies tile t + 1 straight into a second shared-memory buffer (no register round trip)
// while the tensor cores work on tile t: double buffering. The layout is unchanged (80 halves).
extern "C" __global__ __launch_bounds__(128) void attention_13_prefill_cp_async(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, float scale_log2) {
    pf_mma_kernel<true, PF_DP>(q, k, v, o, pf_vit(N), scale_log2);
}

// === attention_13_ablate_one_stage ===
// Why: an ablation, not a step: step 13's cp.async copies into one buffer stage (20 KiB, step 12's): each tile
// is copied, waited for, then computed, so no copy overlaps this block's compute. Against step 13 it
// times the second stage alone; against step 12 cp.async alone.
extern "C" __global__ __launch_bounds__(128) void attention_13_ablate_one_stage(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, float scale_log2) {
    pf_mma_kernel<true, PF_DP, 1, PF_D, PF_DP, false, 1>(q, k, v, o, pf_vit(N), scale_log2);
}

// === attention_13_ablate_reg_stages ===
// Why: an ablation, not a step: step 13's two buffer stages filled without cp.async: tile t + 1 is loaded into
// registers before tile t's compute and stored to the other stage after it (register double
// buffering). Against step 13 it times cp.async alone, given two stages; against step 12 the second
// stage alone.
extern "C" __global__ __launch_bounds__(128) void attention_13_ablate_reg_stages(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, float scale_log2) {
    pf_mma_kernel<false, PF_DP, 1, PF_D, PF_DP, false, 2>(q, k, v, o, pf_vit(N), scale_log2);
}

// === attention_14_prefill_padded ===
// Why: ldmatrix reads 8 rows of 16 bytes per phase; with rows 160 bytes apart, rows r and r + 4 land
// on the same banks (160 x 4 = 640 = 5 x 128): 2-way conflicts on every K and V fragment. A row of
// 88 halves (176 bytes) puts the 8 rows on 8 distinct 16-byte bank groups: ldmatrix's reads are
// conflict-free (lab 07's counters still count conflicts from the kernel's other shared-memory
// accesses). Step 13 with only the row stride changed.
extern "C" __global__ __launch_bounds__(128) void attention_14_prefill_padded(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, float scale_log2) {
    pf_mma_kernel<true, PF_DP + 8>(q, k, v, o, pf_vit(N), scale_log2);
}

// === attention_15_prefill_two_tiles ===
// Why: in step 14 each K or V fragment a warp reads from shared memory (one ldmatrix.x4, 512 bytes)
// feeds 2 mma's: 40 ldmatrix per 80 mma per tile, and shared memory delivers a fixed number of bytes
// per clock per SM, so the fragments take longer to read than the tensor cores take to use them
// (lab 07 reads both units' busy time from the Nsight Compute counters). Here each warp
// owns two query tiles (32 rows; the block 128): every fragment feeds 4 mma's, half the
// shared-memory reads per FLOP. The price: twice the accumulator registers, and blocks of 128 rows
// (fewer blocks at small N). Step 14 with only the query rows per warp changed.
extern "C" __global__ __launch_bounds__(128) void attention_15_prefill_two_tiles(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, float scale_log2) {
    pf_mma_kernel<true, PF_DP + 8, 2>(q, k, v, o, pf_vit(N), scale_log2);
}

// === attention_16_prefill_causal ===
// Why: a decoder's prompt is prefill too, but causal (token i sees tokens 0..i), grouped (query head h
// reads KV head h / group) and at head dim 128, with K and V already written to the KV cache. Step 14's
// kernel with three changes: the scores of keys past a row's position are -inf, and a block stops at
// the tile of its last row's position (half the tiles of the full square, on average); q and o are
// read and written in the GEMMs' [N, heads, 128] layout and K, V straight from the cache (strides, no
// transposes); head dim 128 needs no pad (8 k-chunks of 16), rows 136 halves apart (272 bytes: the
// 8 rows of an ldmatrix phase on 8 bank groups). 2 stages x (K, V) x 64 x 136 halves = 68 KiB of
// shared memory: above the 48 KiB default, so the launcher raises the kernel's limit.
extern "C" __global__ __launch_bounds__(128) void attention_16_prefill_causal(
        const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
        __half* __restrict__ o, int N, int NK, int p0, int group, int q_hs, int q_rs, int kv_hs, int kv_rs,
        int o_hs, int o_rs, float scale_log2) {
    pf_mma_kernel<true, DEC_D + 8, 1, DEC_D, DEC_D, true>(
        q, k, v, o, PfShape{N, NK, p0, group, q_hs, q_rs, kv_hs, kv_rs, o_hs, o_rs}, scale_log2);
}

// === attention_07_rope_prefill ===
// Why: step 06 rotates one token's q and k and appends it to the cache; a prompt of N tokens would
// take N launches. Here one launch does all N: block (token t, head) rotates that head's row at
// position p0 + t, in place for q (the prefill kernel reads q in the GEMM's [N, heads, d] layout),
// and writes k (rotated) and v to the cache at p0 + t. The same cos/sin table as step 06.
extern "C" __global__ void attention_07_rope_prefill(__half* __restrict__ q, const __half* __restrict__ k,
                                                     const __half* __restrict__ v, const float* __restrict__ cos_t,
                                                     const float* __restrict__ sin_t, __half* __restrict__ kc,
                                                     __half* __restrict__ vc, int n, int p0, int cap, int hq, int hkv) {
    constexpr int H = DEC_D / 2;
    const int t = blockIdx.x, row = blockIdx.y, i = threadIdx.x, pos = p0 + t;
    if (t >= n || pos >= cap) return;
    const float c = cos_t[pos * H + i], s = sin_t[pos * H + i];
    __half* x = row < hq ? q + ((size_t)t * hq + row) * DEC_D : nullptr;
    const __half* xk = row < hq ? x : k + ((size_t)t * hkv + row - hq) * DEC_D;
    const float x1 = __half2float(xk[i]), x2 = __half2float(xk[i + H]);
    const __half y1 = __float2half(x1 * c - x2 * s), y2 = __float2half(x2 * c + x1 * s);
    if (row < hq) {
        x[i] = y1;
        x[i + H] = y2;
    } else {
        const int g = row - hq;
        __half* kr = kc + ((size_t)g * cap + pos) * DEC_D;
        __half* vr = vc + ((size_t)g * cap + pos) * DEC_D;
        const __half* vs = v + ((size_t)t * hkv + g) * DEC_D;
        kr[i] = y1;
        kr[i + H] = y2;
        vr[i] = vs[i];
        vr[i + H] = vs[i + H];
    }
}

// === attention_06_decode_gqa_flash ===
// Why: step 05 holds each tile's keys in registers (256 bytes a thread in flight, and the registers
// that hold them cap the blocks an SM keeps), and when it cuts the cache into chunks it pays a
// second launch for the merge: at short lengths a launch costs more than the cache's bytes. This
// step is flash decoding in one launch, in FlashInfer's order. One block per (KV head, chunk)
// serves the GQA group, as in step 05. K and V go global -> shared memory with 16-byte cp.async,
// DFL_STAGES tiles of DFL_TILE keys deep, so the bytes in flight sit in shared memory; the chunk
// count comes from the length read on the device (one CUDA graph replays every length); and the
// last block of each KV head to finish merges the chunks' (lse, o) itself: a fence, then an atomic
// counter that this last block sets back to 0 for the next launch. At a length of one chunk there
// is no merge at all, and chunk 0, which starts at key 0 whatever the length, copies its first
// tiles before the length has arrived. A length below split_from keys is one chunk: the merge's
// fence, counter and second pass cost more than a second chunk saves on so few keys (the launcher's
// FLASH_SPLIT_FROM, chosen by scripts/decode_sweep.py). Below sm_80 the copies are plain 16-byte
// loads and stores.
#ifndef DFL_TILE
#define DFL_TILE 16                    // keys per shared-memory stage (a multiple of 16)
#endif
#ifndef DFL_STAGES
#define DFL_STAGES 4                   // stages: DFL_STAGES - 1 tiles in flight while one is used
#endif
// Ablations, one idea off each, for the sweep (scripts/decode_sweep.py): DFL_ASYNC 0 copies with plain
// loads and stores; DFL_EARLY 0 makes chunk 0 wait for the length too; DFL_ONE_LAUNCH 0 has every block
// write its partial, a chunk past the length an empty one, and step 03's merge kernel run after.
#ifndef DFL_ASYNC
#define DFL_ASYNC 1
#endif
#ifndef DFL_EARLY
#define DFL_EARLY 1
#endif
#ifndef DFL_ONE_LAUNCH
#define DFL_ONE_LAUNCH 1
#endif
#define DFL_THREADS 128
#define DFL_ROWS (DFL_THREADS / DEC_LANES)       // key rows the block reads at once (8 at head dim 128)
#define DFL_KEYS (DFL_TILE / DFL_ROWS)           // keys of a tile per row group
#define DFL_MAX_CHUNKS 256                       // the launcher's cap: the merge weights fit in shared memory
#define DFL_PIPE_BYTES (DFL_STAGES * 2 * DFL_TILE * DEC_D * 2)
#define DFL_MERGE_BYTES (DFL_ROWS * DEC_GROUP * (2 + DEC_D) * 4)
#define DFL_WEIGHT_BYTES (DEC_GROUP * (DFL_MAX_CHUNKS + 1) * 4)
#define DFL_MAX2(a, b) ((a) > (b) ? (a) : (b))
#define DFL_SMEM DFL_MAX2(DFL_PIPE_BYTES, DFL_MAX2(DFL_MERGE_BYTES, DFL_WEIGHT_BYTES))

// 16 bytes global -> shared: cp.async on sm_80+ (no register round trip; ok = false writes zeros),
// else a load and a store.
__device__ __forceinline__ void dfl_copy16(__half* dst, const __half* src, bool ok) {
#if __CUDA_ARCH__ >= 800 && DFL_ASYNC
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(a), "l"(src), "r"(ok ? 16 : 0));
#else
    *reinterpret_cast<uint4*>(dst) = ok ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
#endif
}

// Close this thread's group of copies, one group a stage; or wait until at most N groups are open.
template <int N>
__device__ __forceinline__ void dfl_commit_wait(bool commit) {
#if __CUDA_ARCH__ >= 800 && DFL_ASYNC
    if (commit) asm volatile("cp.async.commit_group;\n" ::);
    else asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
#endif
}

// One stage: DFL_TILE rows of K and of V from key jt on, rows >= j1 as zeros, 16 bytes a copy,
// the block's threads side by side: a row is DEC_LANES copies.
__device__ __forceinline__ void dfl_stage(__half* ks, __half* vs, const __half* __restrict__ kh,
                                          const __half* __restrict__ vh, int jt, int j1) {
    static_assert(DFL_TILE % DFL_ROWS == 0 && (DFL_TILE * DEC_LANES) % DFL_THREADS == 0, "DFL_TILE: a multiple of 16");
#pragma unroll
    for (int p = 0; p < DFL_TILE * DEC_LANES / DFL_THREADS; ++p) {
        const int i = threadIdx.x + p * DFL_THREADS, r = i / DEC_LANES, c = (i % DEC_LANES) * 8;
        const bool ok = jt + r < j1;
        const size_t at = (size_t)(ok ? jt + r : 0) * DEC_D + c;
        dfl_copy16(ks + r * DEC_D + c, kh + at, ok);
        dfl_copy16(vs + r * DEC_D + c, vh + at, ok);
    }
}

extern "C" __global__ __launch_bounds__(DFL_THREADS, 2) void attention_06_decode_gqa_flash(
        const __half* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
        __half* __restrict__ o, float* __restrict__ part_o, float* __restrict__ part_lse,
        unsigned* __restrict__ done, const int* __restrict__ lens, int len_host, int cap, float scale_log2,
        int min_chunk, int split_from) {
    static_assert(DFL_SMEM + 16 <= 48 * 1024, "DFL_STAGES x DFL_TILE: static shared memory is at most 48 KiB");
    __shared__ uint4 dfl_sm[DFL_SMEM / 16];
    __shared__ int dfl_last;
#if __CUDA_ARCH__ >= 900
    // lets the next kernel launch now, if it was launched as a programmatic dependent (sm_90; lab 08's
    // step 12: the o projection's GEMV starts streaming its weights while this runs; it waits for our
    // output before it reads it). With no such dependent this does nothing.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const int kvh = blockIdx.x, qh0 = kvh * DEC_GROUP, chunk = blockIdx.y, C = gridDim.y;
    // The chunks of this length, on the device: n = floor(L / min_chunk), 1 to C (the grid; at most
    // DFL_MAX_CHUNKS), 1 below split_from keys, each of ceil(L / n) keys; blocks past the last chunk
    // leave at once (a graph launched for a longer length).
    __half* ks = reinterpret_cast<__half*>(dfl_sm);                // [DFL_STAGES][DFL_TILE][DEC_D]
    __half* vs = ks + DFL_STAGES * DFL_TILE * DEC_D;                 // the same for V
    const __half* kh = kc + (size_t)kvh * cap * DEC_D;
    const __half* vh = vc + (size_t)kvh * cap * DEC_D;
    // Chunk 0 starts at key 0 whatever the length: its first tiles, rows below the capacity, are copied
    // while the length is still on its way from memory; the rows past the length are masked when used.
    if (DFL_EARLY && chunk == 0) {
#pragma unroll
        for (int s = 0; s < DFL_STAGES - 1; ++s) {
            dfl_stage(ks + s * DFL_TILE * DEC_D, vs + s * DFL_TILE * DEC_D, kh, vh, s * DFL_TILE, cap);
            dfl_commit_wait<0>(true);
        }
    }
    const int L = dec_len(lens, len_host, cap);
    const int n = L < split_from ? 1 : max(1, min(min(C, DFL_MAX_CHUNKS), L / min_chunk));
    const int chunk_len = max(1, (L + n - 1) / n);
    const int active = max(1, (L + chunk_len - 1) / chunk_len);
    const bool alone = DFL_ONE_LAUNCH ? active == 1 : C == 1;        // no partials: this block writes o
    if (chunk >= active) {                                           // never chunk 0
        for (int i = threadIdx.x; !DFL_ONE_LAUNCH && i < DEC_GROUP * DEC_D; i += DFL_THREADS) {
            const int h = qh0 + i / DEC_D;                           // the ablation's merge kernel reads every chunk
            part_o[((size_t)h * C + chunk) * DEC_D + i % DEC_D] = 0.0f;
            if (i % DEC_D == 0) part_lse[h * C + chunk] = -KL_INF;
        }
        return;
    }
    const int j0 = chunk * chunk_len, j1 = min(L, j0 + chunk_len), tiles = (j1 - j0 + DFL_TILE - 1) / DFL_TILE;
    const int row = threadIdx.x / DEC_LANES, sub = threadIdx.x % DEC_LANES;
    if (!(DFL_EARLY && chunk == 0)) {
#pragma unroll
        for (int s = 0; s < DFL_STAGES - 1; ++s) {                   // the first tiles fly before q is read
            if (s < tiles) dfl_stage(ks + s * DFL_TILE * DEC_D, vs + s * DFL_TILE * DEC_D, kh, vh, j0 + s * DFL_TILE, j1);
            dfl_commit_wait<0>(true);
        }
    }
    float qf[DEC_GROUP][8], m[DEC_GROUP], l[DEC_GROUP], acc[DEC_GROUP][8];
#pragma unroll
    for (int g = 0; g < DEC_GROUP; ++g) {
        Half8 v; v.u = __ldg(reinterpret_cast<const uint4*>(q + (qh0 + g) * DEC_D + sub * 8));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(v.h2[i]);
            qf[g][2 * i] = f.x * scale_log2;
            qf[g][2 * i + 1] = f.y * scale_log2;
        }
        m[g] = -KL_INF; l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
    }
    int slot = 0;                                                    // the stage tile t sits in: t % DFL_STAGES
    for (int t = 0; t < tiles; ++t) {
        const int nt = t + DFL_STAGES - 1, ns = slot == 0 ? DFL_STAGES - 1 : slot - 1;   // ns = nt % DFL_STAGES
        if (nt < tiles) dfl_stage(ks + ns * DFL_TILE * DEC_D, vs + ns * DFL_TILE * DEC_D, kh, vh, j0 + nt * DFL_TILE, j1);
        dfl_commit_wait<0>(true);
        dfl_commit_wait<DFL_STAGES - 1>(false);                      // tile t's copies (this thread's) landed
        __syncthreads();                                             // ... and every thread's
        const __half* kt = ks + slot * DFL_TILE * DEC_D + row * DEC_D + sub * 8;
        const __half* vt = vs + slot * DFL_TILE * DEC_D + row * DEC_D + sub * 8;
        const int jr = j0 + t * DFL_TILE + row;                      // this row group's first key of the tile
        uint4 kk[DFL_KEYS], vv[DFL_KEYS];
#pragma unroll
        for (int u = 0; u < DFL_KEYS; ++u) {                         // a row past the length: V as zeros, p = 0
            kk[u] = *reinterpret_cast<const uint4*>(kt + u * DFL_ROWS * DEC_D);
            vv[u] = jr + u * DFL_ROWS < j1 ? *reinterpret_cast<const uint4*>(vt + u * DFL_ROWS * DEC_D)
                                           : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int g = 0; g < DEC_GROUP; ++g) {                        // lab 01's online update, once per tile
            float s[DFL_KEYS], mt = m[g];
#pragma unroll
            for (int u = 0; u < DFL_KEYS; ++u) {
                s[u] = half_warp_sum(h8_dot(kk[u], qf[g]));
                if (jr + u * DFL_ROWS >= j1) s[u] = -KL_INF;
                mt = fmaxf(mt, s[u]);
            }
            const float alpha = ex2_diff(m[g], mt);
            l[g] *= alpha;
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[g][i] *= alpha;
#pragma unroll
            for (int u = 0; u < DFL_KEYS; ++u) {
                const float p = ex2_diff(s[u], mt);
                Half8 v; v.u = vv[u];
                l[g] += p;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float2 f = __half22float2(v.h2[i]);
                    acc[g][2 * i] = fmaf(p, f.x, acc[g][2 * i]);
                    acc[g][2 * i + 1] = fmaf(p, f.y, acc[g][2 * i + 1]);
                }
            }
            m[g] = mt;
        }
        slot = slot == DFL_STAGES - 1 ? 0 : slot + 1;
        __syncthreads();                                             // the stage is free for the copies of tile t + DFL_STAGES
    }
    dfl_commit_wait<0>(false);                                       // chunk 0's copies past its tiles too,
    __syncthreads();                                                 // every thread's: then the stages are free
    // The block's row groups merged (lab 01's combine on vectors): the output when this is the only
    // chunk; else this chunk's normalised output and its base-2 log-sum-exp lse = M + log2(l).
    float* sm = reinterpret_cast<float*>(dfl_sm);                    // [DFL_ROWS][DEC_GROUP][2 + DEC_D]
    float* mine = sm + row * DEC_GROUP * (2 + DEC_D);
#pragma unroll
    for (int g = 0; g < DEC_GROUP; ++g) {
        if (sub == 0) { mine[g * (2 + DEC_D)] = m[g]; mine[g * (2 + DEC_D) + 1] = l[g]; }
#pragma unroll
        for (int i = 0; i < 8; ++i) mine[g * (2 + DEC_D) + 2 + sub * 8 + i] = acc[g][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < DEC_GROUP * DEC_D; idx += DFL_THREADS) {
        const int g = idx / DEC_D, d = idx % DEC_D, h = qh0 + g;
        float M = -KL_INF, lsum = 0.0f, a = 0.0f;
        for (int w = 0; w < DFL_ROWS; ++w) M = fmaxf(M, sm[(w * DEC_GROUP + g) * (2 + DEC_D)]);
        for (int w = 0; w < DFL_ROWS; ++w) {
            const float* r = sm + (w * DEC_GROUP + g) * (2 + DEC_D);
            const float c = ex2_diff(r[0], M);
            lsum = fmaf(r[1], c, lsum);
            a = fmaf(r[2 + d], c, a);
        }
        if (alone) {
            o[h * DEC_D + d] = __float2half(a / lsum);              // no key (L = 0): 0/0 = NaN, as the reference
        } else {
            part_o[((size_t)h * C + chunk) * DEC_D + d] = lsum > 0.0f ? a / lsum : 0.0f;
            if (d == 0) part_lse[h * C + chunk] = lsum > 0.0f || isnan(lsum) ? M + __log2f(lsum) : -KL_INF;
        }
    }
    if (alone || !DFL_ONE_LAUNCH) return;
    // The last block of this KV head to get here merges every chunk: each block's partials are
    // visible device-wide (fence) before it counts itself in.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        dfl_last = atomicAdd(done + kvh, 1u) == (unsigned)(active - 1);
        if (dfl_last) done[kvh] = 0u;                                // every block has counted: ready for the next launch
    }
    __syncthreads();
    if (!dfl_last) return;
    __threadfence();
    float* wt = sm;                                                  // [DEC_GROUP][active]: lse, then weights
    float* wsum = sm + DEC_GROUP * active;                           // [DEC_GROUP]
    const int nl = DEC_GROUP * active;                               // the lse: 4 loads a thread in flight at once
    for (int i0 = threadIdx.x; i0 < nl; i0 += 4 * DFL_THREADS) {
        float x[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int i = min(i0 + j * DFL_THREADS, nl - 1);
            x[j] = __ldcg(part_lse + (qh0 + i / active) * C + i % active);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (i0 + j * DFL_THREADS < nl) wt[i0 + j * DFL_THREADS] = x[j];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    for (int g = threadIdx.x >> 5; g < DEC_GROUP; g += DFL_THREADS / 32) {   // a warp per query head:
        float M = -KL_INF, e = 0.0f;                                 // M = max lse, w_c = 2^(lse_c - M)
        for (int c = lane; c < active; c += 32) M = fmaxf(M, wt[g * active + c]);
        M = warp_reduce_max(M);
        for (int c = lane; c < active; c += 32) {
            const float w = ex2_diff(wt[g * active + c], M);
            wt[g * active + c] = w;
            e += w;
        }
        e = warp_reduce_sum(e);
        if (lane == 0) wsum[g] = e;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < DEC_GROUP * DEC_D / 4; i += DFL_THREADS) {    // o = sum_c w_c o_c / sum_c w_c
        const int g = i / (DEC_D / 4), d4 = i % (DEC_D / 4), h = qh0 + g;
        const float4* src = reinterpret_cast<const float4*>(part_o + (size_t)h * C * DEC_D) + d4;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int c0 = 0; c0 < active; c0 += 16) {                    // 16 loads of 16 bytes in flight a thread:
            float4 p[16];                                            // all issued (no branch between), then used
#pragma unroll
            for (int j = 0; j < 16; ++j) p[j] = __ldcg(src + min(c0 + j, active - 1) * (DEC_D / 4));
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                if (c0 + j < active) {
                    const float w = wt[g * active + c0 + j];
                    a.x = fmaf(w, p[j].x, a.x); a.y = fmaf(w, p[j].y, a.y);
                    a.z = fmaf(w, p[j].z, a.z); a.w = fmaf(w, p[j].w, a.w);
                }
            }
        }
        const float ws = wsum[g];
        __half2* out2 = reinterpret_cast<__half2*>(o + h * DEC_D + d4 * 4);
        out2[0] = __floats2half2_rn(a.x / ws, a.y / ws);
        out2[1] = __floats2half2_rn(a.z / ws, a.w / ws);
    }
}
