// add.cu: the add kernels of the add report (seed 004), before and after. Residual adds
// (out = a + b), the broadcast bias add of Qwen2's QKV projections (out[r, c] = m[r, c] +
// bias[c]) and DeepStack's in-place add into a slice of rows. Element-wise: no data reuse,
// so the time is DRAM's: bandwidth once enough bytes are in flight (Little's law: bytes in
// flight = latency x bandwidth), latency x round trips before that. The levers are bytes in
// flight per thread (the load width) and instructions per byte.
// n is the element count (the launcher keeps it below 2^31 - 64). vec_ok = 0 (a base that is
// not 16-byte aligned, or cols not a multiple of the vector width) selects scalar loads.
#include "common.cuh"

// === add_01_f32_scalar ===
// Why: the seed's add_kernel_cu_fp32 before: one float per thread, block 512. Every
// thread spends an index computation, a bounds check and three 4-byte memory instructions
// on 12 bytes.
extern "C" __global__ void add_01_f32_scalar(const float* a, const float* b, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

// === add_02_f32_float4 ===
// Why: the seed's add_kernel_cu_fp32 after: a float4 per thread (ld.global.nc.v4.f32 via
// __ldg), block 256, __restrict__. Same bytes, a quarter of the memory instructions and of
// the threads. The last thread's partial float4, and any misaligned call, go scalar.
extern "C" __global__ void add_02_f32_float4(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ out, int n, int vec_ok) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (vec_ok && i + 3 < n) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(a + i));
        const float4 y = __ldg(reinterpret_cast<const float4*>(b + i));
        reinterpret_cast<float4*>(out + i)[0] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    } else {
        for (int j = i; j < min(i + 4, n); ++j) out[j] = __ldg(a + j) + __ldg(b + j);
    }
}

// === add_03_fp16_half2 ===
// Why: the seed's add_kernel_cu_fp16_impl before: a half2 (4 bytes) per thread and one
// __hadd2. Twice the elements per instruction of a scalar half, but still 4-byte loads.
extern "C" __global__ void add_03_fp16_half2(const __half* a, const __half* b, __half* out, int n, int vec_ok) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
    if (vec_ok && i + 1 < n) {
        reinterpret_cast<__half2*>(out + i)[0] =
            __hadd2(reinterpret_cast<const __half2*>(a + i)[0], reinterpret_cast<const __half2*>(b + i)[0]);
    } else {
        for (int j = i; j < min(i + 2, n); ++j) out[j] = __hadd(a[j], b[j]);
    }
}

// === add_04_fp16_vec8 ===
// Why: the seed's add_kernel_cu_fp16_impl after: 8 halves per thread in one 128-bit load
// of each input, reinterpreted in registers as 4 half2 for 4 __hadd2. The seed's
// add_vec_fp16_kernel after is this same code, so step 08 is compared with this kernel.
extern "C" __global__ void add_04_fp16_vec8(const __half* __restrict__ a, const __half* __restrict__ b,
                                            __half* __restrict__ out, int n, int vec_ok) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (vec_ok && i + 7 < n) {
        Half8 x, y, z;
        x.u = __ldg(reinterpret_cast<const uint4*>(a + i));
        y.u = __ldg(reinterpret_cast<const uint4*>(b + i));
#pragma unroll
        for (int k = 0; k < 4; ++k) z.h2[k] = __hadd2(x.h2[k], y.h2[k]);
        reinterpret_cast<uint4*>(out + i)[0] = z.u;
    } else {
        for (int j = i; j < min(i + 8, n); ++j) out[j] = __hadd(__ldg(a + j), __ldg(b + j));
    }
}

// === add_04_ablate_plain ===
// Why: steps 03 -> 04 (and 08 -> 04) change the load width AND add __restrict__ + __ldg. This is
// step 04 with plain pointers and plain loads, nothing else changed: 03 -> this is the width alone,
// this -> 04 the qualifiers alone (the lab's ablation table).
extern "C" __global__ void add_04_ablate_plain(const __half* a, const __half* b, __half* out, int n, int vec_ok) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (vec_ok && i + 7 < n) {
        Half8 x, y, z;
        x.u = *reinterpret_cast<const uint4*>(a + i);
        y.u = *reinterpret_cast<const uint4*>(b + i);
#pragma unroll
        for (int k = 0; k < 4; ++k) z.h2[k] = __hadd2(x.h2[k], y.h2[k]);
        reinterpret_cast<uint4*>(out + i)[0] = z.u;
    } else {
        for (int j = i; j < min(i + 8, n); ++j) out[j] = __hadd(a[j], b[j]);
    }
}

// === add_05_bias_mod ===
// Why: the seed's broadcast_add_bias_fp16_kernel before: a 1-D grid over rows * cols, and
// each thread recovers its column with idx % cols. A 32-bit remainder by a runtime value
// has no hardware instruction: it compiles to ~20 integer instructions, per 2-byte element.
extern "C" __global__ void add_05_bias_mod(const __half* m, const __half* bias, __half* out, int rows, int cols) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < rows * cols) out[idx] = __hadd(m[idx], bias[idx % cols]);
}

// === add_06_bias_2d ===
// Why: the 2-D grid, alone: blockIdx.y is the row and the column comes from one multiply-add,
// so the remainder disappears while the loads stay scalar. Comparing 05 -> 06 -> 07
// separates what the seed credited jointly: removing the modulo, and vectorising.
// gridDim.y is at most 65535, so blocks walk rows with a stride of gridDim.y.
extern "C" __global__ void add_06_bias_2d(const __half* __restrict__ m, const __half* __restrict__ bias,
                                          __half* __restrict__ out, int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const __half b = __ldg(bias + col);
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const size_t i = (size_t)row * cols + col;
        out[i] = __hadd(__ldg(m + i), b);
    }
}

// === add_06_ablate_plain ===
// Why: step 06 removes the modulo (the 2-D grid, each thread one column, the bias read once) AND adds
// __restrict__ + __ldg. This is step 06 with plain pointers and loads: 05 -> this is the grid alone,
// this -> 06 the qualifiers alone.
extern "C" __global__ void add_06_ablate_plain(const __half* m, const __half* bias, __half* out, int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const __half b = bias[col];
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const size_t i = (size_t)row * cols + col;
        out[i] = __hadd(m[i], b);
    }
}

// === add_07_bias_2d_vec8 ===
// Why: the seed's broadcast_add_bias_fp16_kernel after: the 2-D grid plus 8 halves per
// 128-bit load of the matrix and of the bias (__ldg: the bias row is reread by every row and
// stays in cache). A knob to try: BIAS_ROWS > 1 gives each thread several rows, all loads
// issued before the first add (where it did not help, measured: 1 is the default). cols must be a multiple of 8 for
// aligned row starts; otherwise (vec_ok = 0) the block's 8 x 256 columns go as coalesced scalars.
#ifndef BIAS_ROWS
#define BIAS_ROWS 1
#endif
extern "C" __global__ void add_07_bias_2d_vec8(const __half* __restrict__ m, const __half* __restrict__ bias,
                                               __half* __restrict__ out, int rows, int cols, int vec_ok) {
    const int step = gridDim.y * BIAS_ROWS;
    if (vec_ok) {                                   // cols % 8 == 0, so c + 7 < cols
        const int c = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
        if (c >= cols) return;
        Half8 b;
        b.u = __ldg(reinterpret_cast<const uint4*>(bias + c));
        for (int r0 = blockIdx.y * BIAS_ROWS; r0 < rows; r0 += step) {
            Half8 x[BIAS_ROWS];
#pragma unroll
            for (int k = 0; k < BIAS_ROWS; ++k)
                if (r0 + k < rows) x[k].u = __ldg(reinterpret_cast<const uint4*>(m + (size_t)(r0 + k) * cols + c));
#pragma unroll
            for (int k = 0; k < BIAS_ROWS; ++k) {
                if (r0 + k < rows) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) x[k].h2[j] = __hadd2(x[k].h2[j], b.h2[j]);
                    reinterpret_cast<uint4*>(out + (size_t)(r0 + k) * cols + c)[0] = x[k].u;
                }
            }
        }
    } else {
        const int c0 = blockIdx.x * blockDim.x * 8 + threadIdx.x;
        // The bias is loaded once, before the row loop, at a clamped (always in-bounds) index.
        // Left inside `if (c < cols)`, the compiler hoists the loop-invariant read-only load
        // above the guard, and a thread past the last column reads beyond the bias
        // (compute-sanitizer memcheck catches it; see `make sanitize`).
        __half bv[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) bv[j] = __ldg(bias + min(c0 + j * (int)blockDim.x, cols - 1));
        for (int r = blockIdx.y * BIAS_ROWS; r < rows; r += step)
            for (int k = 0; k < BIAS_ROWS && r + k < rows; ++k)
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int c = c0 + j * blockDim.x;
                    if (c < cols) {
                        const size_t i = (size_t)(r + k) * cols + c;
                        out[i] = __hadd(__ldg(m + i), bv[j]);
                    }
                }
    }
}

// === add_08_vec_fp16_scalar ===
// Why: the seed's add_vec_fp16_kernel before: one half (2 bytes) per thread, so a warp's
// load covers 64 bytes and 8x more threads are launched than the 8-wide version needs.
// Its after-form is step 04.
extern "C" __global__ void add_08_vec_fp16_scalar(const __half* a, const __half* b, __half* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __hadd(a[i], b[i]);
}

// === add_09_rows_inplace ===
// Why: DeepStack (Qwen3-VL) adds vision features into the hidden states of the visual
// tokens only: x[row0 : row0 + k, :] += feats, in place (the seed's add_cu on raw pointers).
// The launcher passes the slice's base and validates it: rows inside the tensor, matching
// columns and dtype, no overlap. x is read and written through the same pointer, so it has
// no __restrict__ and no __ldg (the read-only path must not see data this kernel writes).
extern "C" __global__ void add_09_rows_inplace(__half* x, const __half* __restrict__ feats, int n, int vec_ok) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (vec_ok && i + 7 < n) {
        Half8 v, f;
        v.u = reinterpret_cast<const uint4*>(x + i)[0];
        f.u = __ldg(reinterpret_cast<const uint4*>(feats + i));
#pragma unroll
        for (int k = 0; k < 4; ++k) v.h2[k] = __hadd2(v.h2[k], f.h2[k]);
        reinterpret_cast<uint4*>(x + i)[0] = v.u;
    } else {
        for (int j = i; j < min(i + 8, n); ++j) x[j] = __hadd(x[j], __ldg(feats + j));
    }
}
