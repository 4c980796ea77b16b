"""Sampling on the GPU (kernels/decoder.cu, decoder_06_sample_*): the next token drawn from the fp32 logits
with a temperature, a top-k and a top-p (nucleus) cut, seeded and counter-based, written where the argmax
writes it (the token, and with `state` the history and the position/length moved on by one), so the token
step swaps argmax_into for sample_into and one CUDA graph still replays every token.

The distribution, stated once (the kernel, the float64 reference and the NumPy emulation follow it):
  weights     w_i = exp((x_i - max x) / T); when some logit is +inf, the +inf logits share the mass equally.
  order       argmax's: value down, then index up (-0 == +0); NaN and all -inf logits are not sampled: the
              token is numpy.argmax's (the first NaN: the logits say so), as greedy gives.
  top-k       the first k logits in that order (top_k 0, or >= n: all of them).
  top-p       of those, the shortest prefix in that order whose weight reaches top_p of theirs (top_p 1: all).
  the draw    r = splitmix64(splitmix64(seed) ^ position) (the position the token goes to, read on the
              device); the token is the first index, in index order over the kept logits, whose running
              weight passes r / 2^64 of their total. temperature 0 or top_k 1: the argmax itself.
The kernel holds weights as integers (2^40 = the largest logit's), so its sums are exact and do not depend on
the order atomics land in; it differs from float64 only by fp32 exp and rounding (~1e-6 of the total), so
the check cases pick draws and top_p values at least MARGIN of the total away from any boundary, and then
the kernel's token equals the reference's exactly."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.family import Family
from ..core.launch import aligned, launch, require, variant
from .config import FAMILY, NAME
from .steps import ARGMAX_MAX_BLOCKS, ARGMAX_THREADS, _scratch, argmax_blocks, argmax_into, token_args

SAMPLE_THREADS = 256
MAX_PARTS = 1024            # the final block scans at most this many chunk sums
CHUNK = 2048                # logits per chunk at least (a multiple of SAMPLE_THREADS)
MARGIN = 1e-5               # check cases: draws and top-p targets this far (of the total) from any boundary
_M64 = (1 << 64) - 1


# ---- the draw: counter-based, the kernel's splitmix64 in Python integers ---------------------------------------

def splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def draw(seed: int, position: int) -> int:
    """The kernel's 64-bit random number for (seed, position): splitmix64(splitmix64(seed) ^ position)."""
    return splitmix64(splitmix64(int(seed) & _M64) ^ (int(position) & 0xFFFFFFFF))


def uniform(seed: int, position: int) -> float:
    """draw(seed, position) / 2^64, in [0, 1)."""
    return draw(seed, position) / 2.0 ** 64


# ---- the parameters ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sampling:
    """temperature >= 0 (0: greedy), top_k >= 0 (0: no cut; 1: greedy), 0 < top_p <= 1 (1: no cut), seed
    0 <= seed < 2^64. Checked when made, before any launch."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        check_params(self.temperature, self.top_k, self.top_p, self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def gpu_step(self):
        """A launcher with argmax_into's signature (x, token, state, history): the token step's last op."""
        def step(x, token, state=None, history=None):
            return sample_into(x, token, state, history, temperature=self.temperature, top_k=self.top_k,
                               top_p=self.top_p, seed=self.seed)
        return step

    def numpy_step(self):
        """The same op on NumPy arrays (Decoder(..., emulate=True)): the float64 reference, the same draw."""
        def step(x, token, state=None, history=None):
            p = int(state[0]) if state is not None else 0
            token[0] = sample_reference(x, self.temperature, self.top_k, self.top_p, uniform(self.seed, p))
            if state is not None:
                if history is not None and 0 <= p < history.shape[0]:
                    history[p] = token[0]
                state[0], state[1] = p + 1, state[1] + 1
            return token
        return step


def check_params(temperature, top_k, top_p, seed=0) -> None:
    """ValueError unless temperature >= 0 (finite), top_k an int >= 0, 0 < top_p <= 1, 0 <= seed < 2^64."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.floating, np.integer)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature: expected a finite number >= 0 (0: greedy), got {temperature!r}")
    if 0 < temperature and float(np.float32(temperature)) == 0:
        raise ValueError(f"temperature: {temperature!r} is 0 in fp32; use 0 for greedy")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise ValueError(f"top_k: expected an int >= 0 (0: no cut), got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.floating, np.integer)) \
            or not 0 < top_p <= 1:
        raise ValueError(f"top_p: expected 0 < top_p <= 1 (1: no cut), got {top_p!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) <= _M64:
        raise ValueError(f"seed: expected an int in [0, 2^64), got {seed!r}")


# ---- the launcher ------------------------------------------------------------------------------------------------

def chunk_of(n: int) -> int:
    """Logits per chunk (parts pass): CHUNK, or more so that there are at most MAX_PARTS chunks."""
    per = -(-n // MAX_PARTS)
    return max(CHUNK, -(-per // SAMPLE_THREADS) * SAMPLE_THREADS)


def sample_launches(n: int, temperature=1.0, top_k=0, top_p=1.0) -> list:
    """The kernels one call launches, in order: 2 for greedy (the argmax), else 4, + 4 with a top-k cut
    (k < n), + 4 with a top-p cut."""
    if temperature == 0 or top_k == 1:
        return ["decoder_04_argmax_blocks", "decoder_05_argmax_final"]
    radix = ["decoder_06_sample_radix"] * 4
    return ["decoder_04_argmax_blocks", "decoder_06_sample_init", *(radix if 0 < top_k < n else []),
            *(radix if top_p < 1 else []), "decoder_06_sample_parts", "decoder_06_sample_final"]


def sample_into(x, token, state=None, history=None, *, temperature=1.0, top_k=0, top_p=1.0, seed=0, position=0):
    """token[0] = a draw from the logits x (fp32 [n], n >= 1) with temperature / top_k / top_p and the seed's
    counter-based draw at the position: state[0] when state is given (int32 [2]: position, length; then
    history[position] = token and both move on by one, as argmax_into), else `position`. Checks every
    argument before any launch; temperature 0 or top_k 1 is argmax_into itself. Graph-capturable."""
    check_params(temperature, top_k, top_p, seed)
    n, sptr, hptr, cap = token_args(x, token, state, history)
    if state is None and (isinstance(position, bool) or not isinstance(position, (int, np.integer))
                          or not 0 <= position < 2 ** 31):
        raise ValueError(f"position: expected an int in [0, 2^31), got {position!r}")
    if temperature == 0 or top_k == 1:
        return argmax_into(x, token, state, history)
    t, k = float(temperature), int(top_k) if 0 < top_k < n else 0
    blocks, chunk = argmax_blocks(n), chunk_of(n)
    parts = -(-n // chunk)
    pv = _scratch("argmax_v", (ARGMAX_MAX_BLOCKS,), np.float32)
    pi = _scratch("argmax_i", (ARGMAX_MAX_BLOCKS,), np.int32)
    ctl = _scratch("sample_ctl", (512,), np.uint64)
    pm = _scratch("sample_part_mass", (MAX_PARTS,), np.uint64)
    pt = _scratch("sample_part_ties", (MAX_PARTS,), np.uint32)
    launch(FAMILY, "decoder_04_argmax_blocks", (blocks,), (ARGMAX_THREADS,), (x, n, pv, pi, int(aligned(16, x))))
    launch(FAMILY, "decoder_06_sample_init", (1,), (SAMPLE_THREADS,), (pv, pi, blocks, ctl))
    for phase, on in ((0, k > 0), (1, top_p < 1)):
        if on:
            for shift in (24, 16, 8, 0):
                launch(FAMILY, "decoder_06_sample_radix", (blocks,), (SAMPLE_THREADS,),
                       (x, n, ctl, t, phase, shift, k, float(top_p)))
    launch(FAMILY, "decoder_06_sample_parts", (parts,), (SAMPLE_THREADS,), (x, n, chunk, ctl, t, pm, pt))
    launch(FAMILY, "decoder_06_sample_final", (1,), (SAMPLE_THREADS,),
           (x, n, chunk, parts, ctl, t, pm, pt, np.uint64(seed), int(position), token, sptr, hptr, cap))
    return token


def _alloc_token(x, *_):
    import cupy
    return cupy.empty((1,), cupy.int32)


def sample(x, temperature=1.0, top_k=0, top_p=1.0, seed=0, position=0):
    """A draw from fp32 logits [n] into a new int32 [1] on the device (see sample_into)."""
    check_params(temperature, top_k, top_p, seed)
    require(x, "logits", dtype="float32", ndim=1)
    return sample_into(x, _alloc_token(x), temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                       position=position)


# ---- the float64 reference -------------------------------------------------------------------------------------

def _top(x, temperature, top_k):
    """(the top-k set in the order, every logit's float64 weight, the set's running weights) for a draw on
    logits with no NaN and some logit above -inf; the temperature as the kernel sees it (fp32)."""
    x = np.asarray(x, np.float64).reshape(-1)
    n, t, m = x.size, float(np.float32(temperature)), x.max()
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        w = (x == np.inf).astype(np.float64) if m == np.inf else np.exp((x - m) / t)
    order = np.lexsort((np.arange(n), -x))            # value down, index up (-0 == +0: -x compares equal)
    top = order[:top_k if 0 < top_k < n else n]
    return top, w, np.cumsum(w[top])


def _kept(x, temperature, top_k, top_p, top=None):
    """(indices kept in index order, their weights, the top-k set's running weights, top_p's target or None);
    top_p as the kernel sees it (fp32)."""
    top, w, cum = top or _top(x, temperature, top_k)
    p, target = float(np.float32(top_p)), None
    if p < 1:
        target = p * cum[-1]
        top = top[:int(np.searchsorted(cum, target, side="left")) + 1]
    keep = np.sort(top)
    return keep, w[keep], cum, target


def _fixed(x, temperature, top_k):
    """The draw needs none: NaN anywhere, every logit -inf, temperature 0 or top_k 1 -> numpy.argmax."""
    x = np.asarray(x)
    return temperature == 0 or top_k == 1 or bool(np.isnan(x).any()) or bool((x == -np.inf).all())


def sample_reference(x, temperature, top_k, top_p, u) -> int:
    """The token the distribution above gives for the uniform draw u in [0, 1), in float64."""
    if _fixed(x, temperature, top_k):
        return int(np.argmax(np.asarray(x)))
    keep, w, _, _ = _kept(x, temperature, top_k, top_p)
    c = np.cumsum(w)
    return int(keep[min(int(np.searchsorted(c, u * c[-1], side="right")), keep.size - 1)])


def distribution(x, temperature, top_k, top_p) -> np.ndarray:
    """The exact probabilities of every token (float64 [n]): softmax(x / T) restricted to the top-k / top-p
    set and renormalised; a one-hot at numpy.argmax where no draw happens."""
    n = np.asarray(x).size
    out = np.zeros(n)
    if _fixed(x, temperature, top_k):
        out[int(np.argmax(np.asarray(x)))] = 1.0
        return out
    keep, w, _, _ = _kept(x, temperature, top_k, top_p)
    out[keep] = w / w.sum()
    return out


def _gap(c, v) -> float:
    """The distance from v to the nearest of the running sums c (their last excluded: the total), a fraction of c[-1]."""
    i = int(np.searchsorted(c[:-1], v))
    near = [abs(c[j] - v) for j in (i - 1, i) if 0 <= j < c.size - 1]
    return min(near, default=math.inf) / c[-1]


def margin(x, temperature, top_k, top_p, u=None) -> float:
    """How far (a fraction of the total weight) top_p's target, and the draw u where given, are from the
    nearest boundary where float64 and the kernel's fp32 could pick differently (inf: no draw happens)."""
    if _fixed(x, temperature, top_k):
        return math.inf
    keep, w, cum, target = _kept(x, temperature, top_k, top_p)
    got = math.inf if target is None else _gap(cum, target)
    return got if u is None else min(got, _gap(np.cumsum(w), u * w.sum()))


def reference_sample(x, knobs) -> np.ndarray:
    """The family's reference: knobs = [temperature, top_k, top_p, seed, position] (float64 [5]); int32 [1]."""
    T, k, p, seed, pos = (float(v) for v in np.asarray(knobs, np.float64))
    return np.array([sample_reference(x, T, int(k), p, uniform(int(seed), int(pos)))], np.int32)


# ---- check cases ---------------------------------------------------------------------------------------------------

# values -> (temperature, top_k, top_p): each check case's knobs
KNOBS = {"randn": (1.0, 0, 1.0), "topk": (0.8, 50, 1.0), "topp": (1.0, 0, 0.9), "both": (0.7, 40, 0.8),
         "cold": (1e-3, 0, 1.0), "hot": (3.0, 0, 0.95), "greedy": (0.0, 0, 1.0), "topk1": (1.3, 1, 1.0),
         "ties": (1.0, 3, 1.0), "ties_p": (1.0, 0, 0.5), "flat": (1.0, 7, 0.6), "nan": (1.0, 10, 0.9),
         "inf": (1.0, 0, 0.9), "neg_inf": (1.0, 5, 0.9), "some_neg_inf": (0.9, 1000, 0.999), "huge": (1.0, 20, 0.9),
         "zeros": (1.0, 2, 1.0)}


def _sample_input(shape, dtype="float32", values="randn", seed=0):
    """(logits fp32 [n], knobs float64 [5]: temperature, top_k, top_p, seed, position). Logits ~ N(0, 3^2)
    (peaked, as a model's); ties: the largest value at 5 places; flat: all equal; nan: two NaN; inf: +inf at
    3 places; neg_inf: all -inf; some_neg_inf: half -inf (top_k beyond the finite ones); huge: +-3e38 and
    N(0, 1e4^2); zeros: -0.0 and +0.0 the largest. The position (and top_p, by 1e-3 steps) is chosen so the
    draw and the top-p target are at least MARGIN from a boundary."""
    (n,) = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 3
    spots = rng.permutation(n)[:5]
    if values in ("ties", "ties_p"):
        x[spots] = x.max() + 1
    elif values == "flat":
        x[:] = 0.25
    elif values == "nan":
        x[spots[:2]] = np.nan
    elif values == "inf":
        x[spots[:3]] = np.inf
    elif values == "neg_inf":
        x[:] = -np.inf
    elif values == "some_neg_inf":
        x[rng.permutation(n)[:n // 2]] = -np.inf
    elif values == "huge":
        x = rng.standard_normal(n) * 1e4
        x[spots[:1]], x[spots[1:2]] = 3e38, -3e38
    elif values == "zeros":
        x = -np.abs(x) - 1
        x[spots[:2]] = np.array([-0.0, 0.0])[:len(spots[:2])]
    x = x.astype(np.float32)
    T, k, p = KNOBS[values]
    pos = 0
    if not _fixed(x, T, k):
        top = _top(x, T, k)
        while p < 1 and _gap(top[2], float(np.float32(p)) * top[2][-1]) < MARGIN:
            p = min(1.0, p + 1e-3)
        _, w, _, _ = _kept(x, T, k, p, top)
        c = np.cumsum(w)
        for pos in range(100_000):
            if _gap(c, uniform(seed, pos) * c[-1]) >= MARGIN:
                break
        else:
            raise RuntimeError(f"no draw {MARGIN} from a boundary for {shape} {values}")
    return x, np.array([T, k, p, seed, pos], np.float64)


@variant(dtypes=("float32",), alloc_out=_alloc_token, plan=False, reads_back=True)
def _sample_case(x, knobs, out=None):
    """The family's call: sample_into with the case's knobs (read back to the host: they set the launches)."""
    T, k, p, seed, pos = (float(v) for v in (knobs.get() if hasattr(knobs, "get") else np.asarray(knobs)))
    out = _alloc_token(x) if out is None else out
    return sample_into(x, out, temperature=T, top_k=int(k), top_p=p, seed=int(seed), position=int(pos))


SAMPLE_VALUES = tuple(KNOBS)
SAMPLE = Family(
    name=NAME, kernels=FAMILY, op="sample", case_key=lambda shape, dtype="float32": f"sample:{shape[0]}:{dtype}",
    make_input=_sample_input, reference=reference_sample, bytes_moved=lambda x, *_: x.nbytes + 4,
    tolerance=lambda *_: {"rtol": 0.0, "atol": 1e-9},      # an index is exact
    variants={"06_sample": _sample_case}, default={"float32": "06_sample"}, roof="read",
    shapes={"Qwen3 vocabulary": (151936,)}, record_cases=[((151936,), "float32")],
    check_cases=[((n,), v) for n in (1, 5, 1023, 2049, 151936, 600_001) for v in SAMPLE_VALUES],
    about="temperature / top-k / top-p sampling over fp32 logits: radix selects, integer weights, a "
          "counter-based draw")
