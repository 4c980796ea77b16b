"""Launching a step: Variant (a launcher plus what the harness needs to know), the launch path
with its plans, and the input checks every launcher runs before any launch (dtype, shape,
layout, alignment, aliasing): bad input is a ValueError here, never a CUDA error."""
from __future__ import annotations

import functools
import operator
import weakref

import numpy as np

from .build import _KERNELS, kernel

_ND = None          # cupy.ndarray, looked up once (require runs on every launch)
_DTYPES: dict = {}  # a dtype spec -> the tuple of np.dtype it allows


def _ndarray():
    global _ND
    if _ND is None:
        import cupy
        _ND = cupy.ndarray
    return _ND


def _allowed(dtype) -> tuple:
    key = tuple(dtype) if isinstance(dtype, list) else dtype
    got = _DTYPES.get(key)
    if got is None:
        got = _DTYPES[key] = tuple(np.dtype(d) for d in (key if isinstance(key, tuple) else (key,)))
    return got


def require(x, name: str = "x", *, dtype=None, ndim=None, shape=None, contiguous=True,
            align: int | None = None):
    """Raise ValueError naming what was expected, before any launch (cheap: it runs on every launcher call)."""
    if not isinstance(x, _ND or _ndarray()):
        raise ValueError(f"{name}: expected a cupy.ndarray on the GPU, got {type(x).__name__}")
    if dtype is not None:
        allowed = _allowed(dtype)
        if x.dtype not in allowed:
            raise ValueError(f"{name}: expected dtype {' or '.join(map(str, allowed))}, got {x.dtype}")
    if ndim is not None:
        allowed = ndim if isinstance(ndim, (tuple, list)) else (ndim,)
        if x.ndim not in allowed:
            raise ValueError(f"{name}: expected {' or '.join(map(str, allowed))}-D, got shape {x.shape}")
    if shape is not None and x.shape != (shape if type(shape) is tuple else tuple(shape)):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(x.shape)}")
    if contiguous and not x._c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array (strides {x.strides}); "
                         "use cupy.ascontiguousarray")
    if align and x.data.ptr % align:
        raise ValueError(f"{name}: expected a {align}-byte aligned base address")
    return x


def no_alias(out, inputs, inplace_ok: bool = False) -> None:
    """Raise ValueError when an output's bytes overlap an input's: the kernels' pointers are __restrict__
    (the compiler may reorder loads and stores and read through ld.global.nc). inplace_ok=True allows out
    to *be* an input's exact buffer, for element-wise steps that read an index before writing it."""
    nd = _ND or _ndarray()
    for o in (out if isinstance(out, (tuple, list)) else (out,)):
        if not isinstance(o, nd) or not o.size:
            continue
        o0 = o.data.ptr
        o1 = o0 + o.nbytes
        for i, a in enumerate(inputs):
            if not isinstance(a, nd) or not a.size:
                continue
            a0 = a.data.ptr
            if a0 < o1 and o0 < a0 + a.nbytes:
                if inplace_ok and a0 == o0 and a.shape == o.shape and a.dtype == o.dtype:
                    continue
                raise ValueError(
                    f"out overlaps input {i} ({a.dtype}{list(a.shape)} at {a0:#x}): this step's kernel "
                    "is __restrict__ and not safe in place"
                    + ("; only out= the exact input array is supported" if inplace_ok else
                       "; pass a separate output buffer"))


def aligned(width: int, *arrays) -> bool:
    """True when every array's base address is a multiple of `width` bytes (a 16-byte vector load needs 16)."""
    return not any(a.data.ptr % width for a in arrays)


def out_like(out, x, name="out", shape=None, dtype=None):
    """Allocate the output, or validate a caller's `out` (used outside timed regions)."""
    if out is None:
        import cupy
        return cupy.empty(x.shape if shape is None else shape, x.dtype if dtype is None else dtype)
    require(out, name, dtype=x.dtype if dtype is None else dtype, shape=x.shape if shape is None else shape)
    return out


_I32, _F32, _F64 = np.int32, np.float32, np.float64
_RECORD: list | None = None     # set by record_launches: launches are noted, not changed


def kernel_args(args) -> tuple:
    """Python ints become int32 and floats float32, as the kernels declare them (CuPy would pass 64-bit)."""
    out = []
    for a in args:
        t = type(a)
        if t is int or t is bool:
            a = _I32(a)
        elif t is float or t is _F64:
            a = _F32(a)
        out.append(a)
    return tuple(out)


def _dims(d) -> tuple:
    if type(d) is tuple:
        for x in d:
            if type(x) is not int:
                return tuple(int(x) for x in d)
        return d
    return (int(d),)


_SPECIALISED: dict = {}     # (family, name, -D options) -> RawKernel


def specialised(family: str, name: str, extra: tuple):
    """Kernel `name` of a family compiled with `extra` options (lab 07's -DDEC_GROUP=7 -DDEC_D=64), once."""
    k = _SPECIALISED.get((family, name, extra))
    if k is None:
        from .build import module
        k = _SPECIALISED[family, name, extra] = module(family, extra).get_function(name)
    return k


def launch(family: str, name: str, grid, block, args, smem: int = 0, extra: tuple = (), pdl: bool = False) -> None:
    """Launch kernel `name` of a family with kernel_args(args); `extra`: a specialised() build's options;
    pdl: as a programmatic dependent of the kernel ahead (core/pdl.py). Kept lean: its host cost is every step's."""
    k = (_KERNELS.get((family, name)) or kernel(family, name)) if not extra else \
        (_SPECIALISED.get((family, name, extra)) or specialised(family, name, extra))
    grid, block, args = _dims(grid), _dims(block), kernel_args(args)
    if _RECORD is not None:
        _RECORD.append((k, grid, block, args, smem))
    if pdl:
        from .pdl import launch as launch_pdl
        launch_pdl(k, grid, block, args, smem)
    elif smem:
        k(grid, block, args, shared_mem=smem)
    else:
        k(grid, block, args)


class _Records(list):
    result = None


def record_launches(fn, keep_result: bool = False) -> list:
    """The launches one call of fn() made through launch(): [(RawKernel, grid, block, args, smem)] (.result)."""
    global _RECORD
    prev, _RECORD = _RECORD, _Records()
    try:
        res = fn()
        recs = _RECORD
        if keep_result:
            recs.result = res
        return recs
    finally:
        mine, _RECORD = _RECORD, prev
        if prev is not None:
            prev.extend(mine)


# A step's plans, one per argument set. A decoder calls its GEMV step 4 x layers times per token with other weights
# each time (144 keys for Qwen3-8B), so this cap makes its eager step take the full path on most calls (~100 µs of
# host each). Raising it to 1024 made the eager Qwen3-8B token 4x faster on the H100, but the live suite then
# failed lab 09's GPU tests after other tests in the same process (a stale plan replayed where it should not):
# kept at 64 until the plan key is shown to cover everything a launcher decides from (issue 38, left open).
PLANS_PER_VARIANT = 64
_VARIANTS = weakref.WeakSet()      # every Variant, for clear_plans


def clear_plans() -> None:
    """Forget every launch plan: needed after changing a module-level knob a launcher reads (a block size)."""
    for v in list(_VARIANTS):
        v._plans.clear()
        v._last = None


_SCALAR = object()     # marks a non-array argument in a plan key


def _plan_key(args, out) -> tuple:
    """Each array's address, shape, layout and dtype and every other argument's value, as one flat tuple
    (an unhashable argument makes the dict lookup raise TypeError)."""
    nd = _ND or _ndarray()
    parts = []
    add = parts.append
    for a in (*args, *out) if type(out) is tuple else (*args, out):
        if type(a) is nd:
            add(a.data.ptr)
            add(a.shape)
            add(a._c_contiguous or a.strides)
            add(a.dtype)
        else:
            add(_SCALAR)
            add(a)
    return tuple(parts)


_WORKSPACE: dict = {}    # address -> a launcher's long-lived workspace buffer (workspace()): plans may use it


def workspace(buf):
    """Declare `buf` a launcher's workspace (kept; each call reads only what it wrote first: split-KV
    partials), so a launch plan may replay launches that use it."""
    _WORKSPACE[buf.data.ptr] = buf
    return buf


_DERIVED: dict = {}      # address -> weak reference to an array derived() declares (gemv.tiles' repack of a weight)


def derived(*bufs) -> None:
    """Declare arrays a launcher made from its arguments and keeps with them (a cached repack): a plan using one
    replays only for the very same argument objects (Variant's identity fast path)."""
    for b in bufs:
        _DERIVED[b.data.ptr] = weakref.ref(b)


def _plan(records, args, out):
    """The recorded launches as one zero-argument call, arrays passed by address (kept alive by none);
    None when a launch used memory outside the call's arrays, workspaces and derived arrays (a temporary:
    a replay would write into freed memory) or an argument that is no array or NumPy scalar."""
    flat = (*args, *out) if type(out) is tuple else (*args, out)
    spans = [(a.data.ptr, a.data.ptr + a.nbytes) for a in flat if type(a) is _ND]
    calls, kept, identity_only = [], [], False
    for k, g, b, packed, sm in records:
        new, where = [], []
        for x in packed:
            if type(x) is _ND:
                p = x.data.ptr
                if not any(lo <= p and p + x.nbytes <= hi for lo, hi in spans):
                    ref = _DERIVED.get(p)
                    if ref is not None and ref() is x:
                        identity_only = True      # made from these very arguments: replay for them alone
                    elif _WORKSPACE.get(p) is not x:
                        return None
                    kept.append(x)                # a workspace or derived array: the plan keeps it alive
                where.append(next((i for i, a in enumerate(flat) if a is x), None))
                x = np.uint64(p)
            elif not isinstance(x, np.generic):
                return None
            else:
                where.append(None)
            new.append(x)
        calls.append(functools.partial(k, g, b, tuple(new), shared_mem=sm) if sm else
                     functools.partial(k, g, b, tuple(new)))
    if len(calls) == 1:
        calls[0].kept, calls[0].identity_only = kept, identity_only
        if not sm:   # for Variant's fast path: the call's own arrays in place of their addresses
            n = len(flat)
            calls[0].with_arrays = (k, g, b, operator.itemgetter(*[i if i is not None else n + j
                                                                  for j, i in enumerate(where)]), tuple(new))
        return calls[0]

    def replay():
        for c in calls:
            c()
    replay.kept, replay.identity_only = kept, identity_only
    return replay


def _seen(args, out, plan):
    """What Variant's fast path compares the next call against: a weak reference, shape and dtype per array
    (a freed array never matches); None without a plan or with a non-array argument (the keyed path)."""
    flat = (*args, *out) if type(out) is tuple else (*args, out)
    if plan is None or any(type(a) is not _ND for a in flat):
        return None
    return tuple((weakref.ref(a), a.shape, a.dtype) for a in flat), plan


class Variant:
    """One step of a lab: a launcher plus what the harness needs to know about it.

    inplace=True: out= may be exactly one of the inputs. Launch plans (docs/design.md, "Measuring honestly"):
    later calls with out= and the same _plan_key (or the very same arrays) replay the first's launches as bare
    RawKernel calls; a launcher doing other GPU work (a CuPy op, cuBLAS, a memset) says plan=False.
    reads_back=True: it copies to the host on every call (bench times its launches alone)."""

    def __init__(self, fn, dtypes=("float32",), overflow_safe=True, alloc_out=None, inplace=False,
                 plan=True, min_arch=None, reads_back=False):
        self.fn, self.dtypes, self.overflow_safe = fn, tuple(dtypes), overflow_safe
        self.min_arch = min_arch        # e.g. 80: mma.sync and cp.async; the harness skips it below
        self._alloc = alloc_out
        self.inplace = inplace
        self.plan, self.reads_back = plan, reads_back
        self._plans: dict = {}
        self._last = None       # (what the previous call passed, its plan): the fast path
        _VARIANTS.add(self)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, out=None):
        if out is not None and _RECORD is None and self.plan:
            last = self._last
            if last is not None:                  # the fast path: the very same objects as last call
                seen, plan = last
                flat = (*args, *out) if type(out) is tuple else (*args, out)
                if len(seen) == len(flat):
                    for (ref, shape, dtype), a in zip(seen, flat):
                        if ref() is not a or a.dtype is not dtype or a.shape != shape:
                            break
                    else:
                        fast = getattr(plan, "with_arrays", None)
                        if fast is None:
                            plan()
                        else:        # the arrays themselves: CuPy packs them faster than addresses
                            k, g, b, pick, consts = fast
                            k(g, b, pick((*flat, *consts)) if len(consts) > 1 else (pick((*flat, *consts)),))
                        return out
            key = _plan_key(args, out)
            try:
                plan = self._plans.get(key)
            except TypeError:                     # an unhashable argument: no plan for this call
                plan = key = None
            if plan is not None:
                plan()                            # the launches this key always makes
                self._last = _seen(args, out, plan)
                return out
            ret, plan = self._first(args, out, key)
            self._last = _seen(args, out, plan)
            return ret
        if out is not None:                       # being recorded (bench.bare, an outer plan), or plan=False
            no_alias(out, args, self.inplace)
        return self.fn(*args, out=out)

    def _first(self, args, out, key):
        """The full path: validate, launch, and keep the launches as this key's plan."""
        no_alias(out, args, self.inplace)
        if key is None:
            return self.fn(*args, out=out), None
        records = record_launches(lambda: self.fn(*args, out=out), keep_result=True)
        ret = records.result
        same = ret is out or (type(ret) is tuple and type(out) is tuple and len(ret) == len(out)
                              and all(r is o for r, o in zip(ret, out)))
        plan = _plan(records, args, out) if same and records else None
        if plan is not None and not plan.identity_only:     # keyed by addresses: safe for any objects there
            if len(self._plans) >= PLANS_PER_VARIANT:
                self._plans.clear()
            self._plans[key] = plan
        return ret, plan

    def alloc_out(self, *args):
        import cupy
        return self._alloc(*args) if self._alloc else cupy.empty_like(args[0])

    def runs_here(self) -> bool:
        """False on a GPU older than the step's min_arch."""
        if not self.min_arch:
            return True
        from .device import info
        return int(info()["arch"].split("_")[1]) >= self.min_arch

    def accepts(self, case) -> bool:
        """False for the cases a kernel that does not subtract the max overflows on (values >= 89)."""
        return self.overflow_safe or case[1] not in ("large", "hostile")


def variant(**kw):
    """Decorator: @variant(dtypes=("float16",)) turns a launcher into a Variant."""
    return lambda fn: Variant(fn, **kw)


MAX_INT32_N = 2 ** 31 - 64     # kernels that index with int32 (as the seeds' do) take at most this many


def int32_size(n: int) -> int:
    """Raise ValueError (before any launch) when n elements overflow a kernel's int32 index."""
    if n > MAX_INT32_N:
        raise ValueError(f"{n} elements: these kernels index with int32 (at most {MAX_INT32_N}); split the call")
    return n


def host_or_device_index(x, hi: int, name: str, what: str):
    """(device array or 0, host value or 0), the pair such kernels take, of an index given as a Python int
    (checked: 0 <= x < hi) or as a one-element int32 device array (a CUDA graph replays with a new value)."""
    if isinstance(x, (int, np.integer)):
        if not 0 <= int(x) < hi:
            raise ValueError(f"{name}: expected 0 <= {name} < {what} ({hi}), got {int(x)}")
        return np.uint64(0), int(x)
    require(x, name, dtype="int32", shape=(1,))
    return x, 0


def _capturing(a) -> bool:
    """True while the current CUDA stream is being captured into a graph (device arrays only)."""
    if isinstance(a, np.ndarray):
        return False
    import cupy
    return cupy.cuda.get_current_stream().is_capturing()


def in_range(idx, hi: int, name: str = "idx") -> None:
    """Raise ValueError unless every index is in [0, hi) (a gather out of bounds kills the context): a copy
    of the min and max, skipped during a graph capture (which allows none; bench.graph's eager call checks)."""
    if idx.size and not _capturing(idx):
        lo_, hi_ = int(idx.min()), int(idx.max())
        if lo_ < 0 or hi_ >= hi:
            raise ValueError(f"{name}: expected 0 <= index < {hi}, got min {lo_}, max {hi_}")
