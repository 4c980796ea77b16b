"""Lab 08's token step: GpuOps (the launchers a step calls: the best step of each lab, or a swap),
NumpyOps (their effects in NumPy, to check the wiring without a GPU) and Decoder: embedding -> per
layer (lab 02's fused add + RMSNorm, lab 04's GEMVs, q/k norm, lab 07's RoPE + KV append and decode
attention, SiLU x up) -> final norm -> lab 04's logits GEMV -> argmax; the position, the length and
the token live in device memory, so one CUDA graph replays every token."""
from __future__ import annotations

import math

import numpy as np

from .. import attention as A
from .. import gemv as G
from .. import rmsnorm as R
from .config import Config, PATHS
from .reference import ref_rmsnorm, ref_rope
from .steps import argmax_into, embed, head_norm, reference_embed, reference_head_norm, reference_silu_mul, silu_mul
from .fused import (FUSED, SEPARATE, fused_rows_ok, gemv_residual, l2_prefetch, norm_gemv, norm_logits, qk_norm_rope,
                    separate, silu_gemv_residual)
from ..core.pdl import supported as pdl_supported
from .weights import layer_shapes, lw, weight_shapes


# ---- the token step on the GPU ----------------------------------------------------------------------------

def _gemv_step(path):
    """The lab 04 step a path's projections run: the default fp16 step, or the W8A16 / int4 steps
    (fp32 out, converted back to fp16 by lab 04's conversion step)."""
    return G.GEMV.variants[G.GEMV.default[path]]


TOKEN_DECODE = "06_gqa_flash"


class GpuOps:
    """The launchers a token step calls, on the GPU: the course's kernels (the best step of each
    lab), or with `swap` = {op: step name} some op run by another step of its lab (the Amdahl
    table): gemv (lab 04's steps), fused (lab 02's add + RMSNorm steps, or 'add + <RMSNorm step>':
    lab 03's add, then that RMSNorm step), decode (lab 07's decode steps)."""

    OPS = ("gemv", "conv", "fused", "logits", "embed", "head_norm", "silu_mul", "argmax", "rope_append", "decode",
           "bias_add", "norm", "norm_gemv", "norm_logits", "gemv_residual", "silu_gemv_residual", "l2_prefetch", "fuse")

    def __init__(self, path, swap: dict | None = None):
        self.gemv = _gemv_step(path)
        self.conv = G.CONVERT.variants[G.CONVERT.default["f32_to_f16"]]
        self.fused = R.FUSED.variants[R.FUSED.default["float16"]]
        self.logits = G.LOGITS.variants[G.LOGITS.default["fp16_f32out"]]
        self.embed, self.head_norm, self.silu_mul, self.argmax = embed, head_norm, silu_mul, argmax_into
        # lab 07's step 06 (one launch: each KV head's last block merges) is the token's decode: -2% a token at context
        # 512 against step 05 in the H100 record (the Amdahl swap); lab 07's ladder keeps 05 as its default
        self.rope_append, self.decode = A.rope_append, A.DEC_VARIANTS[TOKEN_DECODE]
        self.qk_rope = qk_norm_rope                      # q/k head norm + RoPE + the cache append, one launch
        from .. import add
        self.bias_add = add.ADD.variants[add.ADD.default["float16"]]     # lab 03's add: Qwen2.5's q/k/v biases
        self.norm = R.RMSNORM.variants[R.RMSNORM.default["float16"]]      # lab 02's RMSNorm (no add)
        # steps 08-10: the GEMVs that build their input (RMSNorm, SiLU x up) and add the residual (fp16 path)
        self.fuse = FUSE_SWAPS[FUSE_DEFAULT if path == "float16" else "separate"]
        self.norm_gemv, self.norm_logits, self.gemv_residual = norm_gemv, norm_logits, gemv_residual
        self.silu_gemv_residual, self.l2_prefetch = silu_gemv_residual, l2_prefetch
        for op, name in (swap or {}).items():
            if op == "fuse":
                if name not in FUSE_SWAPS:
                    raise ValueError(f"no step {name!r} for the op 'fuse': one of {list(FUSE_SWAPS)}")
                self.fuse = FUSE_SWAPS[name]
            else:
                setattr(self, op, _step_of(op, name))
                if op in ("fused", "gemv", "logits"):       # ops that only the separate launches run
                    self.fuse = FUSE_SWAPS["separate"]


class Fuse(tuple):
    """Which of steps 08-10 a token step runs ('residual', 'norm', 'silu'); its name is its swap's name."""

    def __new__(cls, name, parts=()):
        t = super().__new__(cls, parts)
        t.__name__ = name
        return t


FUSE_ALL = ("residual", "norm", "silu")
FUSE_DEFAULT = "08 + 09 + 12"
# the Amdahl table's swaps that take steps 08-12 apart (one change each). The token step runs 08 + 09 + 12 (12 only
# inside its CUDA graph, on sm_90; elsewhere 08 + 09): step 10's SiLU per warp costs more than the launch it saves,
# and step 11 is a swap (lab 08 shows the measurements).
FUSE_SWAPS = {n: Fuse(n, p) for n, p in (("separate", ()), ("09 alone", ("residual",)),
                                          ("08 + 09", ("residual", "norm")), ("08 + 09 + 10", FUSE_ALL),
                                          ("08 + 09 + 11", ("residual", "norm", "prefetch")),
                                          ("08 + 09 + 12", ("residual", "norm", "pdl")))}


def _unpacked(step):
    """A GEMV step that reads the quantiser's arrays, called with a decoder's packed weights (a swap of
    the Amdahl table): the arrays it reads are unpacked once per weight (kept while the swap runs)."""
    if step.__name__.endswith("_tiles"):
        return step
    raw: dict = {}

    def run(*args, out=None):
        w = raw.get(id(args[0]))
        if w is None:
            w = raw[id(args[0])] = G.unpack(*args[:-1])
        return step(*w, args[-1], out=out)
    run.__name__ = step.__name__
    return run


SKIPPED = "skipped"


def skipped(*args, **kwargs):
    """An op left out of the token step (timing only: the tokens are then wrong): what the op costs a token."""
    return None


def _step_of(op: str, name: str):
    """The launcher of step `name` for one op of the token step (GpuOps' swap)."""
    if name == SKIPPED:
        return skipped
    if op == "qk_rope" and name in (SEPARATE, FUSED):
        return separate if name == SEPARATE else qk_norm_rope
    if op == "gemv" and name in G.GEMV.variants:
        return _unpacked(G.GEMV.variants[name])
    if op == "decode" and name in A.DEC_VARIANTS:
        return A.DEC_VARIANTS[name]
    if op == "fused" and name in R.FUSED.variants:
        return R.FUSED.variants[name]
    if op == "fused" and name.startswith("add + ") and name[6:] in R.RMSNORM.variants:
        from .. import add
        norm = R.RMSNORM.variants[name[6:]]

        def fused(x, res, w, out):
            add.ADD.variants[add.ADD.default["float16"]](x, res, out=out[0])
            return out[0], norm(out[0].reshape(1, -1), w, out=out[1].reshape(1, -1))
        return fused
    raise ValueError(f"no step {name!r} for the op {op!r} (gemv: lab 04's steps; decode: lab 07's; fused: "
                     f"lab 02's add + RMSNorm steps, or 'add + <an RMSNorm step>'; qk_rope: {SEPARATE!r} or {FUSED!r})")


class NumpyOps:
    """The same launchers' effects in NumPy, with the GPU's storage (fp16 tensors, fp32 logits) and
    float64 arithmetic: Decoder(..., emulate=True) runs Decoder.step's exact sequence of calls and
    buffers through these, so the step's wiring (views, the residual ping-pong, the device-side
    position, length, token and history) is checked without a GPU against the float64 reference
    with fp16 storage. It checks the wiring, not the kernels (tests/test_gpu_decoder.py does)."""

    def __init__(self, cfg: Config):
        self.cfg, self._dense = cfg, {}

    def _w(self, w, M):
        key = id(w[0])
        if key not in self._dense:
            w = G.unpack(*w)
            self._dense[key] = (np.asarray(w[0], np.float64) if len(w) == 1 else
                                G.dequantize_int8(*w) if len(w) == 2 else G.dequantize_int4(*w, M))
        return self._dense[key]

    def gemv(self, *args, out):
        *w, x = args
        with np.errstate(over="ignore", invalid="ignore"):
            out[...] = (self._w(w, x.shape[0]) @ np.asarray(x, np.float64)).astype(out.dtype)
        return out

    def conv(self, a, out):
        with np.errstate(over="ignore"):
            out[...] = a.astype(out.dtype)
        return out

    def fused(self, x, res, w, out):
        h, y = out
        with np.errstate(over="ignore"):
            h[...] = (np.asarray(x, np.float64) + res).astype(h.dtype)
            y[...] = ref_rmsnorm(h, w, self.cfg.eps).astype(y.dtype)
        return h, y

    def logits(self, W, x, out):
        return self.gemv(W, x, out=out)

    fuse = FUSE_SWAPS[FUSE_DEFAULT]

    def norm(self, x, w, out):
        with np.errstate(over="ignore", invalid="ignore"):
            out[...] = ref_rmsnorm(x, w, self.cfg.eps).astype(out.dtype)
        return out

    def norm_gemv(self, W, h, w, out, eps=None, pdl=False):
        return self.gemv(W, self.norm(h, w, np.empty(h.shape, np.float16)), out=out)

    norm_logits = norm_gemv

    def gemv_residual(self, W, x, h, pdl=False):
        d = self.gemv(W, x, out=np.empty(h.shape, np.float16))
        with np.errstate(over="ignore", invalid="ignore"):
            h[...] = (np.asarray(h, np.float64) + d).astype(np.float16)
        return h

    def silu_gemv_residual(self, W, gate, up, h):
        return self.gemv_residual(W, self.silu_mul(gate, up, np.empty(gate.shape, np.float16)), h)

    def embed(self, table, token, out):
        out[...] = reference_embed(table, token)
        return out

    def head_norm(self, q, k, wq, wk, out):
        qo, ko = out
        qo[...], ko[...] = reference_head_norm(q, k, wq, wk, self.cfg.eps)
        return qo, ko

    def silu_mul(self, gate, up, out):
        out[...] = reference_silu_mul(gate, up)
        return out

    def bias_add(self, x, b, out):
        with np.errstate(over="ignore"):
            out[...] = (np.asarray(x, np.float64) + b).astype(out.dtype)
        return out

    def qk_rope(self, q, k, v, wq, wk, k_cache, v_cache, pos, q_out, cos=None, sin=None, scratch=None):
        qn, kn = self.head_norm(q, k, wq, wk, out=scratch)
        return self.rope_append(qn, kn, v, k_cache, v_cache, pos, q_out, cos, sin)

    def rope_append(self, q, k, v, k_cache, v_cache, pos, q_out, cos=None, sin=None):
        p = int(pos[0])
        if 0 <= p < k_cache.shape[1]:           # as the kernel: out of range writes nothing
            q_out[...] = ref_rope(q, p, self.cfg.theta).astype(np.float16)
            k_cache[:, p] = ref_rope(k, p, self.cfg.theta).astype(np.float16)
            v_cache[:, p] = v
        return q_out

    def decode(self, q, k_cache, v_cache, length, out):
        cfg = self.cfg
        L = min(max(int(length[0]), 0), k_cache.shape[1])
        K, V = np.asarray(k_cache[:, :L], np.float64), np.asarray(v_cache[:, :L], np.float64)
        qg = np.asarray(q, np.float64).reshape(cfg.kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim)
        s = np.einsum("hgd,hld->hgl", qg, K) / math.sqrt(cfg.head_dim)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[...] = np.einsum("hgl,hld->hgd", p / p.sum(-1, keepdims=True), V).reshape(out.shape).astype(out.dtype)
        return out

    def argmax(self, x, token, state=None, history=None):
        token[0] = int(np.argmax(x))
        if state is not None:
            p = int(state[0])
            if history is not None and 0 <= p < history.shape[0]:
                history[p] = token[0]
            state[0], state[1] = p + 1, state[1] + 1
        return token


def _fits(cfg, path, capacity):
    """fit.check_fits before any allocation: free memory now (plus what CuPy's pool holds free for reuse),
    or the learner's cap (KERNELLAB_MEMORY_CAP); a ValueError with the numbers when the model does not fit."""
    import cupy
    from . import fit
    free = fit.free_memory()
    if free is not None and fit.memory_cap()[0] is None:
        free += cupy.get_default_memory_pool().free_bytes()
    fit.check_fits(cfg, path, int(capacity), free=free, staged=False)


class Decoder:
    """One Qwen3 decoder on the GPU, batch 1: weights, KV cache and workspace allocated once, then
    `step()` runs one token with the course's kernels and nothing else:

        embed -> per layer: fused add + RMSNorm (lab 02) -> QKV GEMV (lab 04) -> q/k head norm ->
        RoPE + KV append (lab 07) -> decode attention (lab 07) -> o GEMV -> fused add + RMSNorm ->
        gate/up GEMV -> SiLU x up -> down GEMV; then the final add + RMSNorm -> logits GEMV (lab 04,
        fp32 out) -> argmax (+ position, length and history moved on by one).

    The residual stream ping-pongs between two buffers (h_a, h_b): each fused add + RMSNorm reads
    the sublayer's output (`delta`) and one, writes the other. Layer 0 adds the embedding to zeros.
    `token`, `state` = [position, length] and `history` live on the device: nothing in a step
    depends on the host, so `graph()` captures one step and every replay decodes the next token.
    weights: a host dict (random_weights / load_checkpoint); None draws random weights on the GPU
    (the 8B shape: 16 GB of fp16, not worth a host round trip). path: float16, w8a16 or int4 (the
    quantised paths quantise with lab 04's quantisers, or draw random quantised weights).
    emulate=True: the same step on NumPy arrays through NumpyOps (no GPU; any head layout; host
    weights required), to check the wiring against the float64 reference."""

    def __init__(self, cfg: Config, weights: dict | None = None, path: str = "float16", capacity: int = 4096,
                 seed: int = 0, emulate: bool = False):
        if path not in PATHS:
            raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
        if emulate:
            if weights is None:
                raise ValueError("emulate=True needs host weights (random_weights or load_checkpoint)")
            xp, self.ops = np, NumpyOps(cfg)
        else:
            import cupy
            from ..core.device import need_gpu
            need_gpu("the decoder's token step")
            if cfg.gpu_reason():
                raise ValueError(cfg.gpu_reason())
            _fits(cfg, path, capacity)
            xp, self.ops = cupy, GpuOps(path)
            self._rng = cupy.random.RandomState(seed)
        if cfg.layers < 1 or not 1 <= capacity <= 2 ** 20:
            raise ValueError(f"need >= 1 layer and 1 <= capacity <= 2^20; got {cfg.layers} layers, capacity {capacity}")
        self.cfg, self.path, self.capacity, self.xp, self.emulate = cfg, path, int(capacity), xp, emulate
        W = weights
        if W is not None:
            missing = [n for n in weight_shapes(cfg) if n not in W]
            if missing:
                raise ValueError(f"weights: missing {missing[:3]}{' ...' if len(missing) > 3 else ''}")
        H, F = cfg.hidden, cfg.ffn
        self.layers = []
        for i in range(cfg.layers):
            get = (lambda k, i=i: W[lw(i, k)]) if W is not None else None
            L = {"ln1": self._vec(get, "input_layernorm", H), "ln2": self._vec(get, "post_attention_layernorm", H),
                 "qkv": self._linear(get, ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                 "o": self._linear(get, ("self_attn.o_proj",)), "gu": self._linear(get, ("mlp.gate_proj", "mlp.up_proj")),
                 "down": self._linear(get, ("mlp.down_proj",))}
            if cfg.qk_norm:              # Qwen3: RMSNorm of each q and k head
                L["qn"], L["kn"] = (self._vec(get, f"self_attn.{n}_norm", cfg.head_dim) for n in "qk")
            if cfg.qkv_bias:             # Qwen2.5: one bias vector over the QKV GEMV's output [q | k | v]
                L["bias"] = self._bias(get, cfg.q_dim + 2 * cfg.kv_dim)
            self.layers.append(L)
        self.norm = self._vec((lambda k: W[k]) if W is not None else None, "model.norm.weight", H)
        if W is not None:
            self.embed_w = xp.asarray(W["model.embed_tokens.weight"])
            self.lm = self.embed_w if cfg.tied else xp.asarray(W["lm_head.weight"])
        else:
            self.embed_w = self._randn((cfg.vocab, H), 1.0)
            self.lm = self.embed_w if cfg.tied else self._randn((cfg.vocab, H), 1 / math.sqrt(H))
        e = lambda *s: xp.zeros(s, xp.float16)   # noqa: E731
        self.k_cache = e(cfg.layers, cfg.kv_heads, self.capacity, cfg.head_dim)
        self.v_cache = e(cfg.layers, cfg.kv_heads, self.capacity, cfg.head_dim)
        self.kc = [self.k_cache[i] for i in range(cfg.layers)]
        self.vc = [self.v_cache[i] for i in range(cfg.layers)]
        qd, kd = cfg.q_dim, cfg.kv_dim
        self.delta, self.zeros, self.h_a, self.h_b, self.y = e(H), e(H), e(H), e(H), e(H)
        self.qkv, self.gu, self.m = e(qd + 2 * kd), e(2 * F), e(F)
        self.qkv_raw = e(qd + 2 * kd) if cfg.qkv_bias else self.qkv    # the GEMV's output before the bias
        self.q = self.qkv[:qd].reshape(cfg.heads, cfg.head_dim)
        self.k = self.qkv[qd:qd + kd].reshape(cfg.kv_heads, cfg.head_dim)
        self.v = self.qkv[qd + kd:].reshape(cfg.kv_heads, cfg.head_dim)
        self.gate, self.up = self.gu[:F], self.gu[F:]
        self.qn, self.kn = e(cfg.heads, cfg.head_dim), e(cfg.kv_heads, cfg.head_dim)
        self.qr, self.o = e(cfg.heads, cfg.head_dim), e(cfg.heads, cfg.head_dim)
        self.o_flat = self.o.reshape(-1)
        # fp32 outputs of the quantised GEMVs, before lab 04's fp32 -> fp16 conversion step
        self.f32 = {id(b): xp.zeros(b.shape, xp.float32) for b in (self.qkv_raw, self.delta, self.gu)} \
            if path != "float16" else {}
        self.logits = xp.zeros(cfg.vocab, xp.float32)
        self.token = xp.zeros(1, xp.int32)
        self.state = xp.zeros(2, xp.int32)
        self.pos, self.length = self.state[0:1], self.state[1:2]
        self.history = xp.full(self.capacity, -1, xp.int32)
        # the decoder's own copy: set_rope_delta rewrites it in place (a captured graph keeps reading it)
        self.cos, self.sin = (None, None) if emulate else (t.copy() for t in A.rope_table(self.capacity, cfg.theta,
                                                                                          cfg.head_dim))
        self._graph, self._pdl = None, False      # _pdl: step 12's launches, only while graph() captures
        ws = [self.layers[0][k][0] for k in ("qkv", "o", "gu", "down")] + [self.lm] if path == "float16" else []
        self._rows_ok = emulate or all(fused_rows_ok(*w.shape) for w in ws)
        self.host_pos = 0
        self.reset()                     # position 0, length 1: a fresh decoder can feed() at once

    # -- weights on the device
    def _randn(self, shape, scale):
        import cupy
        return (self._rng.standard_normal(shape, dtype=cupy.float32) * scale).astype(cupy.float16)

    def _vec(self, get, key, n):
        if get is None:
            import cupy
            return (1.0 + 0.1 * self._rng.standard_normal((n,), dtype=cupy.float32)).astype(cupy.float16)
        return self.xp.asarray(np.asarray(get(key), np.float16))

    def _bias(self, get, n):
        if get is None:
            import cupy
            return (0.5 * self._rng.standard_normal((n,), dtype=cupy.float32)).astype(cupy.float16)
        return self.xp.asarray(np.concatenate([np.asarray(get(f"self_attn.{k}_proj.bias"), np.float16) for k in "qkv"]))

    def _linear(self, get, keys):
        """One GEMV's weight, the keys' matrices stacked by rows, on this path: (W,) fp16, or lab
        04's quantised arrays (q int8, scales fp32) / (packed uint8, scales fp16, zeros uint8) in the
        layout the path's default step reads, made once here (gemv.pack: steps 36 / 37's tiles)."""
        shapes = [layer_shapes(self.cfg)[k] for k in keys]
        K, M = sum(s[0] for s in shapes), shapes[0][1]
        if get is not None:
            W = np.concatenate([np.asarray(get(k), np.float16) for k in keys], axis=0)
            if self.path == "float16":
                return (self.xp.asarray(W),)
            q = G.quantize_int8(W.astype(np.float32)) if self.path == "w8a16" else G.quantize_int4(W.astype(np.float32))
            return G.pack(self.path, *(self.xp.asarray(a) for a in q))
        import cupy
        if self.path == "float16":
            return (self._randn((K, M), 1 / math.sqrt(M)),)
        Gn = -(-M // G.GROUP)
        if self.path == "w8a16":          # random int8 weights: |w| up to 127 x scale
            q = self._rng.randint(-127, 128, (K, M)).astype(cupy.int8)
            return G.pack(self.path, q, cupy.full((K, Gn), 1 / (127 * math.sqrt(M / 3)), cupy.float32))
        packed = self._rng.randint(0, 256, (K, -(-M // 2))).astype(cupy.uint8)
        return G.pack(self.path, packed, cupy.full((K, Gn), 2 / (15 * math.sqrt(M / 3)), cupy.float16),
                      cupy.full((K, Gn), 8, cupy.uint8))

    def _host(self, a):
        return np.asarray(a) if self.emulate else a.get()

    def dense(self, i: int, key: str):
        """Layer i's GEMV weight (key: qkv, o, gu, down) as the float64 matrix the kernels multiply
        by: the fp16 matrix, or lab 04's dequantisation of the quantised one."""
        w = list(G.unpack(*(self._host(a) for a in self.layers[i][key])))
        if self.path == "float16":
            return w[0].astype(np.float64)
        if self.path == "w8a16":
            return G.dequantize_int8(*w)
        M = {"qkv": self.cfg.hidden, "gu": self.cfg.hidden, "o": self.cfg.q_dim, "down": self.cfg.ffn}[key]
        return G.dequantize_int4(*w, M)

    # -- one token
    def _proj(self, w, x, out):
        if self.path == "float16":
            self.ops.gemv(*w, x, out=out)
        else:
            f = self.f32[id(out)]
            self.ops.gemv(*w, x, out=f)
            self.ops.conv(f, out=out)

    @property
    def fuse(self) -> tuple:
        """Steps 08-10 this token step runs: the ops' choice on the fp16 path when every weight has rows enough
        (fused.fused_rows_ok), else none (the separate launches); step 12 ('pdl') only where the GPU runs it (sm_90)."""
        f = self.ops.fuse if self.path == "float16" and self._rows_ok else ()
        if "pdl" in f and (self.emulate or not pdl_supported()):
            f = FUSE_SWAPS["08 + 09"]
        return f

    def step(self):
        """Launch one token's step (asynchronous): the token in self.token at position state[0]."""
        if "residual" in self.fuse:
            return self._step_fused(self.fuse)
        ops = self.ops
        ops.embed(self.embed_w, self.token, out=self.delta)
        res = self.zeros
        for i, L in enumerate(self.layers):
            ops.fused(self.delta, res, L["ln1"], out=(self.h_b, self.y))
            self._proj(L["qkv"], self.y, self.qkv_raw)
            self._attention(i, L)
            self._proj(L["o"], self.o_flat, self.delta)
            ops.fused(self.delta, self.h_b, L["ln2"], out=(self.h_a, self.y))
            self._proj(L["gu"], self.y, self.gu)
            ops.silu_mul(self.gate, self.up, out=self.m)
            self._proj(L["down"], self.m, self.delta)
            res = self.h_a
        ops.fused(self.delta, res, self.norm, out=(self.h_b, self.y))
        ops.logits(self.lm, self.y, out=self.logits)
        ops.argmax(self.logits, self.token, self.state, self.history)

    def _attention(self, i, L):
        """The QKV GEMV's output -> (bias) -> q/k norm, RoPE, the cache append -> decode attention -> self.o."""
        ops = self.ops
        if "bias" in L:
            ops.bias_add(self.qkv_raw, L["bias"], out=self.qkv)
        if "qn" in L:                                # Qwen3: q/k head norm, RoPE, the cache append
            ops.qk_rope(self.q, self.k, self.v, L["qn"], L["kn"], self.kc[i], self.vc[i], self.pos, self.qr,
                        self.cos, self.sin, scratch=(self.qn, self.kn))
        else:                                        # Qwen2.5: RoPE and the cache append
            ops.rope_append(self.q, self.k, self.v, self.kc[i], self.vc[i], self.pos, self.qr, self.cos, self.sin)
        ops.decode(self.qr, self.kc[i], self.vc[i], self.length, out=self.o)

    def _normed(self, W, ln, out, fuse):
        """out = W . (RMSNorm(h) * ln): step 08 (one launch), or lab 02's RMSNorm then lab 04's GEMV."""
        if "norm" in fuse:
            return self.ops.norm_gemv(W, self.h_a, ln, out, self.cfg.eps, self._pdl)
        self.ops.norm(self.h_a.reshape(1, -1), ln, out=self.y.reshape(1, -1))
        return self.ops.gemv(W, self.y, out=out)

    def _fork(self, launch):
        """Run `launch` on the decoder's second stream, after everything the current stream has issued so far
        (an event; inside a graph capture this becomes a parallel branch of the graph)."""
        import cupy
        if getattr(self, "_side", None) is None:
            self._side = cupy.cuda.Stream(non_blocking=True)
            self._forked, self._joined = cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True)
        self._forked.record(cupy.cuda.get_current_stream())
        self._side.wait_event(self._forked)
        with self._side:
            launch()
        self._joined.record(self._side)

    def _join(self):
        """The current stream waits for what _fork launched (the graph's branch joins here)."""
        import cupy
        cupy.cuda.get_current_stream().wait_event(self._joined)

    def _step_fused(self, fuse):
        """The fp16 token step with steps 08-10: one residual stream h (self.h_a) that the o and down GEMVs add
        into (step 09's epilogue), RMSNorm inside the QKV, gate/up and logits GEMVs (step 08), and with 'silu' SiLU x
        up inside the down GEMV (step 10). By default (08 + 09) 6 launches a layer plus attention's, against 8."""
        ops, h = self.ops, self.h_a
        side = "prefetch" in fuse and not self.emulate
        ops.embed(self.embed_w, self.token, out=h)
        for i, L in enumerate(self.layers):
            self._normed(L["qkv"][0], L["ln1"], self.qkv_raw, fuse)
            if side:                                 # step 11: W_o into L2 on a second stream while attention runs
                self._fork(lambda: ops.l2_prefetch(L["o"][0]))
            self._attention(i, L)
            ops.gemv_residual(L["o"][0], self.o_flat, h, self._pdl)
            if side:
                self._join()
            self._normed(L["gu"][0], L["ln2"], self.gu, fuse)
            if "silu" in fuse:
                ops.silu_gemv_residual(L["down"][0], self.gate, self.up, h)
            else:
                ops.silu_mul(self.gate, self.up, out=self.m)
                ops.gemv_residual(L["down"][0], self.m, h, self._pdl)
        if "norm" in fuse:
            ops.norm_logits(self.lm, h, self.norm, self.logits, self.cfg.eps, self._pdl)
        else:
            ops.norm(h.reshape(1, -1), self.norm, out=self.y.reshape(1, -1))
            ops.logits(self.lm, self.y, out=self.logits)
        ops.argmax(self.logits, self.token, self.state, self.history)

    def at(self, pos: int):
        """Set the device-side position to pos and the length to pos + 1 (the next step's token
        goes to position pos); the cache's rows below pos are whatever earlier steps left there."""
        if not 0 <= pos < self.capacity:
            raise ValueError(f"pos: expected 0 <= pos < capacity ({self.capacity}), got {pos}")
        self.state[...] = self.xp.asarray(np.array([pos, pos + 1], np.int32))
        self.host_pos = pos

    def reset(self):
        """Back to position 0 (the cache's old rows are never read: the length bounds attention)."""
        self.at(0)
        self.history.fill(-1)

    def feed(self, token: int):
        """Run one step on a given token (teacher forcing): the prompt, or a test's sequence."""
        if not 0 <= int(token) < self.cfg.vocab:
            raise ValueError(f"token: expected 0 <= token < vocab ({self.cfg.vocab}), got {token}")
        if self.host_pos >= self.capacity:
            raise ValueError(f"the KV cache is full ({self.capacity} positions)")
        self.token[...] = int(token)
        self.step()
        self.host_pos += 1

    def graph(self):
        """One step captured as a CUDA graph (after an eager step has run: plans and scratch exist)."""
        from ..core.bench import graph
        if self.emulate:
            raise ValueError("an emulated decoder has no CUDA graph: use_graph=False")
        if self._graph is None:
            self._pdl = "pdl" in self.fuse      # step 12's programmatic launches go into the graph; eager steps
            try:                                # launch through CuPy (core/pdl.py: a ctypes launch costs host time)
                self._graph = graph(self.step, warmup=False)
            finally:
                self._pdl = False
        return self._graph

    def prefill(self, tokens, embeds=None, rope=None, deepstack=None):
        """The prompt in one pass (decoder/prefill.py): GEMMs and lab 07's causal flash attention,
        then the last token's logits and argmax, as its token step would leave them (embeds, rope,
        deepstack: a vision-language prompt's, lab 09)."""
        from .prefill import prefill
        prefill(self, tokens, embeds, rope, deepstack)

    def set_rope_delta(self, delta: int):
        """Token steps from now on rotate the token in cache slot p by the angle of position p + delta
        (Qwen3-VL: an image's tokens take fewer positions than slots, so the text after it is shifted;
        delta 0 is plain RoPE). Rewrites the decoder's own cos/sin table in place (graph-safe)."""
        if self.emulate:
            raise ValueError("an emulated decoder has no RoPE table")
        c, s = A.rope_table_host(self.capacity + abs(int(delta)), self.cfg.theta, self.cfg.head_dim)
        if delta < 0:                    # positions below zero: cos is even, sin odd
            c = np.concatenate([c[1:-delta + 1][::-1], c])
            s = np.concatenate([-s[1:-delta + 1][::-1], s])
            lo = 0
        else:
            lo = int(delta)
        self.cos[...] = self.xp.asarray(c[lo:lo + self.capacity])
        self.sin[...] = self.xp.asarray(s[lo:lo + self.capacity])

    def generate(self, prompt, n_new: int, use_graph: bool = True, use_prefill: bool = True) -> list:
        """Greedy: the prompt in one prefill (or, where prefill cannot run or use_prefill is False,
        fed eagerly one token at a time), then n_new - 1 more steps (graph replays, or eager);
        returns the n_new tokens (history, read once at the end)."""
        from .prefill import why_not
        prompt = [int(t) for t in prompt]
        if not prompt or n_new < 1:
            raise ValueError("generate: a non-empty prompt and n_new >= 1")
        if len(prompt) + n_new - 1 > self.capacity:
            raise ValueError(f"{len(prompt)} + {n_new} tokens do not fit the KV cache ({self.capacity})")
        self.reset()
        if use_prefill and why_not(self) is None:
            self.prefill(prompt)
        else:
            for t in prompt:
                self.feed(t)
        run = self.graph() if use_graph else self.step
        for _ in range(n_new - 1):
            run()
        self.host_pos += n_new - 1
        start = len(prompt) - 1
        return [int(t) for t in self._host(self.history[start:start + n_new])]

