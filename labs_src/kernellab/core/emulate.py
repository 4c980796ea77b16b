"""Without a GPU, run a learner's kernel on the CPU: a few blocks of its grid, every CUDA thread a CPU
thread, so the grader can compare what those blocks write with NumPy (check.grade_exercise).

The kernel's CUDA C is compiled as C++ (g++ or clang++, where one is installed) with a small shim
(SHIM): threadIdx/blockIdx/blockDim/gridDim, __syncthreads as a barrier of the block's threads, the
warp shuffles (__shfl_xor_sync, __shfl_down_sync, __shfl_up_sync, __shfl_sync) and votes as an
exchange between the 32 threads of a warp, __shared__ as storage the block's threads share, the fp16
types (__half, __half2, their conversions, round to nearest even), the vector types, __ldg and the
math intrinsics. It runs in a subprocess, so an index past an array's end or a hang cannot take the
notebook's kernel down: a crash, a timeout or lanes that never meet at a shuffle are reported as such.

It emulates what a kernel computes, not how fast: timing needs a GPU. Lanes that diverge at a
shuffle (undefined on a GPU too) stop the emulation with a message instead of a result."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

TIMEOUT_S = 60          # the whole emulation (compile excluded)


class Unavailable(RuntimeError):
    """No C++ compiler, or the shim cannot build this kernel: the emulation cannot say anything."""


class Failed(RuntimeError):
    """The kernel ran on the CPU and went wrong: a crash, a hang, lanes that never met at a shuffle."""


SHIM = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <thread>
#include <mutex>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <type_traits>
#include <utility>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__ static
#define __constant__ static
#define __launch_bounds__(...)
struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
struct char4 { signed char x, y, z, w; };
struct uchar4 { unsigned char x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
thread_local uint3 threadIdx;
static uint3 blockIdx;
static dim3 blockDim, gridDim;
static const int warpSize = 32;
static std::atomic<bool> kl_stuck{false};
struct KlBarrier {
    std::mutex m; std::condition_variable cv; int n = 0, count = 0; long gen = 0;
    void init(int k) { n = count = k; }
    void release() { count = n; ++gen; cv.notify_all(); }
    void wait() {
        std::unique_lock<std::mutex> l(m);
        if (kl_stuck) return;
        long g = gen;
        if (--count == 0) { release(); return; }
        if (!cv.wait_for(l, std::chrono::seconds(5), [&] { return g != gen || kl_stuck; })) {
            kl_stuck = true; cv.notify_all();
        }
    }
    void drop() {
        std::unique_lock<std::mutex> l(m);
        --n;
        if (--count == 0) release();
    }
};
struct KlWarp { KlBarrier bar; uint64_t slot[32]; };
thread_local int kl_lane;
thread_local KlWarp* kl_warp;
thread_local KlBarrier* kl_block;
static std::mutex kl_atomic;
inline void __syncthreads() { kl_block->wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kl_warp->bar.wait(); }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <class T> T kl_exchange(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    uint64_t b = 0; std::memcpy(&b, &v, sizeof(T));
    kl_warp->slot[kl_lane] = b;
    kl_warp->bar.wait();
    uint64_t r = kl_warp->slot[src & 31];
    kl_warp->bar.wait();
    T out; std::memcpy(&out, &r, sizeof(T));
    return out;
}
template <class T> T __shfl_sync(unsigned, T v, int src, int w = 32) {
    return kl_exchange(v, (kl_lane & ~(w - 1)) + (src & (w - 1)));
}
template <class T> T __shfl_xor_sync(unsigned, T v, int m, int w = 32) {
    return kl_exchange(v, (kl_lane & ~(w - 1)) | ((kl_lane ^ m) & (w - 1)));
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned d, int w = 32) {
    return kl_exchange(v, (int)((kl_lane & (w - 1)) + d < (unsigned)w ? kl_lane + d : kl_lane));
}
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d, int w = 32) {
    return kl_exchange(v, (int)((kl_lane & (w - 1)) >= (int)d ? kl_lane - d : kl_lane));
}
inline unsigned __ballot_sync(unsigned, int p) {
    kl_warp->slot[kl_lane] = p ? 1 : 0;
    kl_warp->bar.wait();
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= (kl_warp->slot[i] == 1 ? 1u : 0u) << i;
    kl_warp->bar.wait();
    return r;
}
inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
inline int __all_sync(unsigned m, int p) { return __ballot_sync(m, !p) == 0; }
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T atomicAdd(T* p, T v) { std::lock_guard<std::mutex> l(kl_atomic); T o = *p; *p = o + v; return o; }
template <class T> T atomicMax(T* p, T v) { std::lock_guard<std::mutex> l(kl_atomic); T o = *p; if (v > o) *p = v; return o; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a + b) { return a > b ? a : b; }
template <class A, class B> inline auto min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __expf(float x) { return expf(x); }
inline float __exp2f(float x) { return exp2f(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
inline uint16_t kl_f2h(float f) {
    uint32_t x; std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
    if (e == 0xff) return sign | 0x7c00u | (m ? 0x200u : 0u);
    int ee = (int)e - 127 + 15;
    if (ee >= 31) return sign | 0x7c00u;
    if (ee <= 0) {
        if (ee < -10) return sign;
        m |= 0x800000u;
        int shift = 14 - ee;
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) ++h;
        return sign | h;
    }
    uint32_t h = ((uint32_t)ee << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
    return sign | h;
}
inline float kl_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e == 0) {
        if (m == 0) x = sign;
        else {
            int k = -1; do { ++k; m <<= 1; } while (!(m & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ffu) << 13);
        }
    } else x = sign | ((e + 112) << 23) | (m << 13);
    float f; std::memcpy(&f, &x, 4); return f;
}
struct __half {
    uint16_t x;
    __half() = default;
    __half(float f) : x(kl_f2h(f)) {}
    operator float() const { return kl_h2f(x); }
};
struct __half2 { __half x, y; };
typedef __half half;
typedef __half2 half2;
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return kl_h2f(h.x); }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 v) { return {__half(v.x), __half(v.y)}; }
inline __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __half2half2(__half a) { return {a, a}; }
inline float2 __half22float2(__half2 h) { return {kl_h2f(h.x.x), kl_h2f(h.y.x)}; }
inline float __low2float(__half2 h) { return kl_h2f(h.x.x); }
inline float __high2float(__half2 h) { return kl_h2f(h.y.x); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half __hadd(__half a, __half b) { return __half((float)a + (float)b); }
inline __half __hmul(__half a, __half b) { return __half((float)a * (float)b); }
inline __half __hfma(__half a, __half b, __half c) { return __half(fmaf((float)a, (float)b, (float)c)); }
inline __half2 __hadd2(__half2 a, __half2 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }
inline __half2 __hsub2(__half2 a, __half2 b) { return {__half((float)a.x - (float)b.x), __half((float)a.y - (float)b.y)}; }
"""

MAIN = r"""
struct KlArg { char kind; long long i; double d; void* p; size_t n; std::string file; };
template <class T> T kl_conv(const KlArg& a) {
    if constexpr (std::is_pointer<T>::value) return (T)a.p;
    else if constexpr (std::is_integral<T>::value) return (T)a.i;
    else return (T)a.d;
}
template <class... A, size_t... I> void kl_call(void (*f)(A...), KlArg* a, std::index_sequence<I...>) {
    f(kl_conv<typename std::remove_cv<A>::type>(a[I])...);
}
template <class... A> void kl_call(void (*f)(A...), KlArg* a) { kl_call(f, a, std::index_sequence_for<A...>{}); }
template <class... A> size_t kl_arity(void (*)(A...)) { return sizeof...(A); }

int main(int argc, char** argv) {
    FILE* f = std::fopen(argv[1], "r");
    int nargs; if (std::fscanf(f, "%d", &nargs) != 1) return 2;
    std::vector<KlArg> args(nargs);
    for (auto& a : args) {
        char kind[4], path[4096];
        if (std::fscanf(f, "%3s", kind) != 1) return 2;
        a.kind = kind[0];
        if (a.kind == 'p') {
            if (std::fscanf(f, "%4095s %zu", path, &a.n) != 2) return 2;
            a.file = path; a.p = std::malloc(a.n ? a.n : 1);
            FILE* b = std::fopen(path, "rb"); if (std::fread(a.p, 1, a.n, b) != a.n) return 2; std::fclose(b);
        } else if (a.kind == 'i') { if (std::fscanf(f, "%lld", &a.i) != 1) return 2; a.d = (double)a.i; }
        else { if (std::fscanf(f, "%lf", &a.d) != 1) return 2; a.i = (long long)a.d; }
    }
    if (kl_arity(&KL_KERNEL) != (size_t)nargs) {
        std::fprintf(stderr, "KL_ARITY %zu %d\n", kl_arity(&KL_KERNEL), nargs); return 3;
    }
    if (std::fscanf(f, "%u %u %u %u %u %u", &gridDim.x, &gridDim.y, &gridDim.z,
                    &blockDim.x, &blockDim.y, &blockDim.z) != 6) return 2;
    int nblocks; if (std::fscanf(f, "%d", &nblocks) != 1) return 2;
    const int n = blockDim.x * blockDim.y * blockDim.z;
    for (int b = 0; b < nblocks; ++b) {
        if (std::fscanf(f, "%u %u %u", &blockIdx.x, &blockIdx.y, &blockIdx.z) != 3) return 2;
        KlBarrier block; block.init(n);
        std::vector<KlWarp> warps((n + 31) / 32);
        for (size_t w = 0; w < warps.size(); ++w) warps[w].bar.init(std::min(32, n - 32 * (int)w));
        std::vector<std::thread> threads;
        for (int t = 0; t < n; ++t)
            threads.emplace_back([&, t] {
                threadIdx = {t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y)};
                kl_lane = t % 32; kl_warp = &warps[t / 32]; kl_block = &block;
                kl_call(&KL_KERNEL, args.data());
                kl_warp->bar.drop(); block.drop();
            });
        for (auto& th : threads) th.join();
        if (kl_stuck) { std::fprintf(stderr, "KL_STUCK\n"); return 4; }
    }
    for (auto& a : args)
        if (a.kind == 'p') { FILE* b = std::fopen(a.file.c_str(), "wb"); std::fwrite(a.p, 1, a.n, b); std::fclose(b); }
    return 0;
}
"""


def compiler() -> str | None:
    """The C++ compiler the emulation uses (g++, clang++ or c++ on PATH), or None."""
    for c in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


def _include_dir() -> Path:
    """Where `#include "common.cuh"` and <cuda_fp16.h> resolve: the course's kernels/ folder, and empty
    stand-ins for the CUDA headers (the shim defines what they would)."""
    from .build import KERNELS
    d = Path(tempfile.gettempdir()) / f"kernellab-emu-{os.getuid() if hasattr(os, 'getuid') else 0}"
    inc = d / "include"
    inc.mkdir(parents=True, exist_ok=True)
    for h in ("cuda_fp16.h", "cuda_bf16.h", "cuda_runtime.h", "cuda.h"):
        if not (inc / h).exists():
            (inc / h).write_text("#pragma once\n")
    for h in Path(KERNELS).glob("*.cuh"):
        text = h.read_text()
        if not (inc / h.name).exists() or (inc / h.name).read_text() != text:
            (inc / h.name).write_text(text)
    return d


def build(src: str, kernel_name: str) -> Path:
    """The emulator executable for this kernel (compiled once per source, kept in the temp folder)."""
    cxx = compiler()
    if cxx is None:
        raise Unavailable("no C++ compiler (g++ or clang++) to emulate the kernel on the CPU")
    d = _include_dir()
    key = hashlib.sha256("\0".join((SHIM, MAIN, src, kernel_name, cxx)).encode()).hexdigest()[:24]
    exe = d / f"{kernel_name}-{key}"
    if exe.exists():
        return exe
    cpp = d / f"{kernel_name}-{key}.cpp"
    cpp.write_text(SHIM + "\n#line 1 \"" + f"{kernel_name}.cu" + "\"\n" + src + "\n" + MAIN)
    tmp = exe.with_suffix(f".{os.getpid()}.tmp")
    r = subprocess.run([cxx, "-std=c++17", "-O1", "-w", "-pthread", "-fno-strict-aliasing", f"-DKL_KERNEL={kernel_name}",
                        "-I", str(d / "include"), str(cpp), "-o", str(tmp)], capture_output=True, text=True)
    if r.returncode != 0:
        raise Unavailable("the CPU emulation cannot build this kernel (it uses something the emulator does not "
                          f"have): {r.stderr.strip().splitlines()[0] if r.stderr.strip() else 'no message'}")
    os.replace(tmp, exe)
    return exe


def _linear_blocks(grid, picks) -> list[tuple[int, int, int]]:
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    total = gx * gy * gz
    out = []
    for b in dict.fromkeys(int(p) % total for p in picks):
        out.append((b % gx, (b // gx) % gy, b // (gx * gy)))
    return out


def run(src: str, kernel_name: str, arrays, scalars, grid, block, blocks=(0, 1, -1)):
    """Run blocks `blocks` (linear indices; negative from the end) of the launch grid x block on the CPU
    with `arrays` (NumPy, passed as pointers, in order) then `scalars` as the kernel's arguments.
    Returns the arrays after the run (copies) and the blocks run. Raises Unavailable or Failed."""
    exe = build(src, kernel_name)
    grid = tuple(int(g) for g in (grid if isinstance(grid, tuple) else (grid,)))
    block = tuple(int(b) for b in (block if isinstance(block, tuple) else (block,)))
    total = int(np.prod(grid))
    picks = _linear_blocks(grid, [p if p >= 0 else total + p for p in blocks])
    with tempfile.TemporaryDirectory(prefix="kl-emu-") as tmp:
        lines = [str(len(arrays) + len(scalars))]
        files = []
        for k, a in enumerate(arrays):
            f = Path(tmp, f"a{k}.bin")
            np.ascontiguousarray(a).tofile(f)
            files.append(f)
            lines.append(f"p {f} {a.nbytes}")
        for s in scalars:
            if isinstance(s, (float, np.floating)):
                lines.append(f"f {float(s)!r}")
            else:
                lines.append(f"i {int(s)}")
        lines.append(" ".join(map(str, (grid + (1, 1))[:3] + (block + (1, 1))[:3])))
        lines.append(str(len(picks)))
        lines += [" ".join(map(str, b)) for b in picks]
        spec = Path(tmp, "spec.txt")
        spec.write_text("\n".join(lines) + "\n")
        try:
            r = subprocess.run([str(exe), str(spec)], capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Failed(f"it did not finish within {TIMEOUT_S} s on the CPU (a loop that never ends?)") from None
        if r.returncode == 3:
            want, got = r.stderr.split()[1:3]
            raise Failed(f"the kernel takes {want} arguments, and the grader passes {got} (the inputs, one output "
                         "per array the reference returns, then the scalars): keep the stub's signature")
        if r.returncode == 4:
            raise Failed("the threads of a warp (or of the block) did not all reach the same shuffle or "
                         "__syncthreads: a shuffle with the full mask, or __syncthreads, inside a branch that "
                         "only some threads take")
        if r.returncode != 0:
            sig = -r.returncode if r.returncode < 0 else None
            raise Failed("it crashed on the CPU" + (f" (signal {sig})" if sig else f" (exit {r.returncode})")
                         + ": usually an index past the end of an array")
        out = [np.fromfile(f, dtype=a.dtype).reshape(a.shape) for f, a in zip(files, arrays)]
    return out, picks
