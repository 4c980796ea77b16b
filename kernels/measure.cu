// measure.cu: the reference kernels of lab 00. They measure the device, not an
// algorithm: an empty launch, the two roofs every later lab is judged against, the
// latency that Little's law turns into "bytes in flight", and the compute ceilings
// (FMA, the special-function unit's ex2, instruction issue) of the roofline.
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
// the ceiling for kernels whose output is tiny (GEMV, reductions). A roof must be a
// ceiling, so this one keeps many bytes in flight: READ_UNROLL independent 16-byte loads
// per thread are issued before the first is used (one load at a time left it below the
// copy roof: latency x too few bytes in flight, see measure_05 and Little's law).
#ifndef READ_UNROLL
#define READ_UNROLL 8
#endif
extern "C" __global__ void measure_02_read(const float4* __restrict__ src, float* __restrict__ partial,
                                           long long n4) {
    __shared__ float scratch[33];
    float acc[READ_UNROLL];
#pragma unroll
    for (int k = 0; k < READ_UNROLL; ++k) acc[k] = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
#pragma unroll 1
    for (; i + (READ_UNROLL - 1) * stride < n4; i += READ_UNROLL * stride) {
        float4 v[READ_UNROLL];
#pragma unroll
        for (int k = 0; k < READ_UNROLL; ++k) v[k] = __ldg(src + i + k * stride);   // all in flight
#pragma unroll
        for (int k = 0; k < READ_UNROLL; ++k) acc[k] += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    for (; i < n4; i += stride) {                                                    // the tail
        const float4 v = __ldg(src + i);
        acc[0] += (v.x + v.y) + (v.z + v.w);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < READ_UNROLL; ++k) s += acc[k];
    s = block_reduce_sum(s, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// === measure_03_fma ===
// Why: the compute roof for the roofline. Each thread runs independent chains of
// fused multiply-adds in registers (2 FLOP each) and touches memory once at the end.
#ifndef FMA_CHAINS
#define FMA_CHAINS 8
#endif
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

// === measure_04_chase ===
// Why: latency, the other half of Little's law (bandwidth = bytes in flight / latency).
// One thread follows a random cycle: each load's address is the previous load's value,
// so exactly one load is in flight and the time per hop is the load latency. __ldcg
// skips L1; a cycle over a buffer much larger than L2 (flushed first) measures DRAM,
// one that fits in L2 (warmed first) measures L2. next[] holds element indices.
extern "C" __global__ void measure_04_chase(const unsigned int* __restrict__ next, unsigned int* __restrict__ out,
                                            int hops, unsigned int start) {
    unsigned int j = start;
#pragma unroll 1
    for (int h = 0; h < hops; ++h) j = __ldcg(next + j);
    out[0] = j;   // the chain's end: keeps every hop alive
}

// === measure_05_inflight_4B ===
// Why: Little's law says a streaming kernel's bandwidth is the bytes it keeps in flight
// divided by the latency. This sweep varies only the bytes in flight per thread; this first
// point keeps 4 bytes (one float) in flight per thread.
// The read kernel of the bytes-in-flight sweep: each thread issues K independent loads of
// type T (K * sizeof(T) bytes in flight per thread) before it uses any of them, then
// waits. `#pragma unroll 1` keeps the compiler from overlapping two iterations, so the
// bytes in flight are exactly what the source says. n counts elements of T.
__device__ __forceinline__ float hsum(float v) { return v; }
__device__ __forceinline__ float hsum(float2 v) { return v.x + v.y; }
__device__ __forceinline__ float hsum(float4 v) { return (v.x + v.y) + (v.z + v.w); }

template <typename T, int K>
__device__ __forceinline__ void read_inflight(const T* __restrict__ src, float* __restrict__ partial,
                                              long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    float acc = 0.0f;
#pragma unroll 1
    for (; i + (K - 1) * stride < n; i += K * stride) {
        T v[K];
#pragma unroll
        for (int k = 0; k < K; ++k) v[k] = __ldcg(src + i + k * stride);
#pragma unroll
        for (int k = 0; k < K; ++k) acc += hsum(v[k]);
    }
    for (; i < n; i += stride) acc += hsum(__ldcg(src + i));
    if (acc == 12345.0f) partial[blockIdx.x] = acc;   // keeps the loads alive, practically never stores
}

extern "C" __global__ void measure_05_inflight_4B(const float* __restrict__ s, float* __restrict__ p, long long n) {
    read_inflight<float, 1>(s, p, n);
}

// === measure_05_inflight_8B ===
// Why: 8 bytes in flight per thread (one float2).
extern "C" __global__ void measure_05_inflight_8B(const float2* __restrict__ s, float* __restrict__ p, long long n) {
    read_inflight<float2, 1>(s, p, n);
}

// === measure_05_inflight_16B ===
// Why: 16 bytes in flight per thread (one float4: the widest single load).
extern "C" __global__ void measure_05_inflight_16B(const float4* __restrict__ s, float* __restrict__ p, long long n) {
    read_inflight<float4, 1>(s, p, n);
}

// === measure_05_inflight_32B ===
// Why: 32 bytes in flight per thread (two independent float4 loads).
extern "C" __global__ void measure_05_inflight_32B(const float4* __restrict__ s, float* __restrict__ p, long long n) {
    read_inflight<float4, 2>(s, p, n);
}

// === measure_05_inflight_64B ===
// Why: 64 bytes in flight per thread (four independent float4 loads).
extern "C" __global__ void measure_05_inflight_64B(const float4* __restrict__ s, float* __restrict__ p, long long n) {
    read_inflight<float4, 4>(s, p, n);
}

// === measure_05_inflight_128B ===
// Why: 128 bytes in flight per thread (eight independent float4 loads).
extern "C" __global__ void measure_05_inflight_128B(const float4* __restrict__ s, float* __restrict__ p, long long n) {
    read_inflight<float4, 8>(s, p, n);
}

// === measure_06_ex2 ===
// Why: the special-function-unit ceiling. Softmax's exp is not one FLOP: expf/__expf
// become ex2.approx, which runs on the SFU (MUFU), a unit with far fewer lanes per SM
// than the FMA units. Independent chains of ex2.approx.ftz measure its throughput.
// v = 2^-v stays in (0.5, 1]; the negation is a cheap FP32 instruction on another pipe.
#ifndef EX2_CHAINS
#define EX2_CHAINS 8
#endif
extern "C" __global__ void measure_06_ex2(float* __restrict__ out, int iters, float seed) {
    float v[EX2_CHAINS];
#pragma unroll
    for (int k = 0; k < EX2_CHAINS; ++k) v[k] = seed + 0.001f * (threadIdx.x + k);
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < EX2_CHAINS; ++k) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(v[k]) : "f"(-v[k]));
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < EX2_CHAINS; ++k) s += v[k];
    if (s == 12345.0f) out[0] = s;
}

// === measure_07_issue ===
// Why: the instruction-issue ceiling. Each SM's schedulers issue a bounded number of warp
// instructions per clock, whatever the pipe. Independent FP32 (fmaf) and INT32 (add, xor)
// chains, interleaved, keep two pipes busy at once: 8 FFMA + 8 integer instructions per
// repeat, ISSUE_REPEAT repeats per loop trip. Its instruction rate, next to the FMA kernel's, is the issue roof
// that a kernel doing many cheap instructions per byte (fp16 softmax) can hit first.
#ifndef ISSUE_REPEAT
#define ISSUE_REPEAT 4
#endif
extern "C" __global__ void measure_07_issue(float* __restrict__ out, int iters, float a, float b,
                                            unsigned int c, unsigned int d) {
    float v[8];
    unsigned int u[4];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = threadIdx.x + k;
#pragma unroll
    for (int k = 0; k < 4; ++k) u[k] = threadIdx.x * (k + 3);
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int r = 0; r < ISSUE_REPEAT; ++r) {   // 64 instructions per trip, 3 of loop control
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                v[2 * k] = fmaf(v[2 * k], a, b);
                u[k] = u[k] + c;
                v[2 * k + 1] = fmaf(v[2 * k + 1], a, b);
                u[k] = u[k] ^ d;
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) s += v[k];
    unsigned int t = u[0] ^ u[1] ^ u[2] ^ u[3];
    if (s == 12345.0f || t == 0xdeadbeefu) out[0] = s + t;
}

// === measure_08_read_256B ===
// Why: a read roof must be a ceiling for every reader in the course, including lab 04's
// GEMV, which asks for 16 loads of 16 bytes per lane through the read-only path before it
// uses any. This reader keeps the same 256 bytes in flight per thread (16 independent float4
// loads through ld.global.nc); step 10 below reads in a GEMV's order.
extern "C" __global__ void measure_08_read_256B(const float4* __restrict__ s, float* __restrict__ p, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    float acc = 0.0f;
#pragma unroll 1
    for (; i + 15 * stride < n; i += 16 * stride) {
        float4 v[16];
#pragma unroll
        for (int k = 0; k < 16; ++k) v[k] = __ldg(s + i + k * stride);
#pragma unroll
        for (int k = 0; k < 16; ++k) acc += hsum(v[k]);
    }
    for (; i < n; i += stride) acc += hsum(__ldg(s + i));
    if (acc == 12345.0f) p[blockIdx.x] = acc;
}

// === measure_10_read_rows ===
// Why: the readers above walk the whole buffer with a grid-wide stride from a resident grid: at any
// moment the GPU's requests are spread over the entire array. Lab 04's GEMVs read in the other order:
// each warp asks for one contiguous piece (a row: 16 loads of 16 bytes per lane, lane-adjacent, 8 KiB
// per warp) and exits, and the grid covers the data once. DRAM can serve the two orders at different
// speeds, so the read roof and the GEMV's read-only floor take the faster of both.
extern "C" __global__ void measure_10_read_rows(const float4* __restrict__ s, float* __restrict__ p, long long n) {
    const long long w0 = ((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5) * 512;   // 512 float4 per warp
    const int lane = threadIdx.x & 31;
    float acc = 0.0f;
    if (w0 + 512 <= n) {
        float4 v[16];
#pragma unroll
        for (int k = 0; k < 16; ++k)
            asm("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
                : "=f"(v[k].x), "=f"(v[k].y), "=f"(v[k].z), "=f"(v[k].w) : "l"(s + w0 + lane + 32 * k));
#pragma unroll
        for (int k = 0; k < 16; ++k) acc += hsum(v[k]);
    } else {
        for (long long i = w0 + lane; i < n; i += 32) acc += hsum(__ldg(s + i));   // the last, partial piece
    }
    if (acc == 12345.0f) p[blockIdx.x] = acc;
}

// === measure_09_stream_2r1w ===
// Why: DRAM writes cost more than reads (the bus turns around), so a kernel that reads two
// bytes for each byte it writes (a residual add) moves more bytes per second than a 1:1
// copy. The copy roof is a ceiling for every read-once/write-once kernel only if it is the
// best of both mixes: this stream reads a and b and writes a + b, two float4 loads of each
// in flight per thread.
extern "C" __global__ void measure_09_stream_2r1w(const float4* __restrict__ a, const float4* __restrict__ b,
                                                  float4* __restrict__ out, long long n4) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
#pragma unroll 1
    for (; i + stride < n4; i += 2 * stride) {
        const float4 a0 = __ldg(a + i), a1 = __ldg(a + i + stride), b0 = __ldg(b + i), b1 = __ldg(b + i + stride);
        out[i] = make_float4(a0.x + b0.x, a0.y + b0.y, a0.z + b0.z, a0.w + b0.w);
        out[i + stride] = make_float4(a1.x + b1.x, a1.y + b1.y, a1.z + b1.z, a1.w + b1.w);
    }
    for (; i < n4; i += stride) {
        const float4 x = __ldg(a + i), y = __ldg(b + i);
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

// === measure_11_latency ===
// Why: the seeds quote latencies in clock cycles: an FMA 1 cycle against 2 for a multiply and
// an add, a shuffle round 1 cycle, shared memory 20-50, a __syncthreads round about 5, an
// integer modulo 20 or more. Each is measured as one dependent chain of n operations between
// two clock64() reads: every operation waits for the one before it, so the cycles per
// operation are its latency (loop control does not depend on the chain and overlaps it). The
// host runs n and 2n and takes the difference, so the clock reads and the set-up cancel. `op`
// (uniform across the block, tested outside the loop) picks the operation:
//   0: x = fmaf(x, a, b)                       1: x = __fadd_rn(__fmul_rn(x, a), b), never fused
//   2: u = __shfl_xor_sync(all, u, 1)          3: u = ring[u], a load from shared memory whose
//                                                 address is the last load's value (with its
//                                                 one integer address operation)
//   4: __syncthreads(), every thread of the block    5: u = u % m + 1 (m known only at run time)
// One block: 32 threads (one warp) for every op but 4, which the host launches with 256.
extern "C" __global__ void measure_11_latency(float* __restrict__ out, long long* __restrict__ cycles, int op,
                                              int n, float a, float b, unsigned int m) {
    __shared__ unsigned int ring[32];
    if (threadIdx.x < 32) ring[threadIdx.x] = (threadIdx.x + 1) & 31;   // a cycle through 32 words
    __syncthreads();
    float x = threadIdx.x * 0.001f;
    unsigned int u = threadIdx.x & 31;
    const long long t0 = clock64();
    if (op == 0) {
#pragma unroll 16
        for (int i = 0; i < n; ++i) x = fmaf(x, a, b);
    } else if (op == 1) {
#pragma unroll 16
        for (int i = 0; i < n; ++i) x = __fadd_rn(__fmul_rn(x, a), b);
    } else if (op == 2) {
#pragma unroll 16
        for (int i = 0; i < n; ++i) u = __shfl_xor_sync(0xffffffffu, u, 1);
    } else if (op == 3) {
        volatile unsigned int* r = ring;        // volatile: every load goes to shared memory
#pragma unroll 16
        for (int i = 0; i < n; ++i) u = r[u];
    } else if (op == 4) {
#pragma unroll 16
        for (int i = 0; i < n; ++i) __syncthreads();
    } else {
#pragma unroll 16
        for (int i = 0; i < n; ++i) u = u % m + 1u;
    }
    asm volatile("" :: "f"(x), "r"(u) : "memory");   // the chain is done before the second read
    const long long t1 = clock64();
    cycles[threadIdx.x] = t1 - t0;
    if (x == 12345.0f || u == 0xdeadbeefu) out[0] = x + u;   // keeps the chains alive
}

// === measure_12_fmul ===
// Why: seed 000 says that on sm_87 an FMA issues as fast as a plain multiply. This is
// measure_03_fma with the FMA replaced by a multiply: the same independent chains over every
// SM, so its instruction rate against the FMA kernel's answers it.
extern "C" __global__ void measure_12_fmul(float* __restrict__ out, int iters, float a) {
    float v[FMA_CHAINS];
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; ++k) v[k] = threadIdx.x + k;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < FMA_CHAINS; ++k) v[k] = v[k] * a;
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; ++k) s += v[k];
    if (s == 12345.0f) out[0] = s;
}
