"""Steps 36 / 37's offline tile-major layout (as engines repack at load time) and its cache (tiles)."""
from __future__ import annotations

import numpy as np

from ..core.launch import derived
from .reference import FAMILY  # noqa: F401  (the kernels' family, for core.fingerprint)


def _tile_major(W, scales, zeros=None):
    """The offline layout of steps 36 and 37 (done once, as engines repack weights at load time;
    NumPy or CuPy in, the same out). W [K, G * B] bytes (B = 64: int4, 128: int8), M % 128 == 0 ->
      Wi [T, G, 2B/64, 32, 16] uint8, T = ceil(K/16) tiles: Wi[T, q, 2c + h, 4g + t] = the 16 bytes at
         64c + 16t of row 16T + g + 8h's group q: the bytes a warp reads for tile T and group q, in
         the order its 32 lanes read them, so each 16-byte load of a warp is one contiguous 512-byte run;
      Mi [T, G, 8, 2 x]: for rows g and g + 8 of tile T, group q, their scales (and for int4 their zero
         points after them, then 2 bytes of padding): one 8-byte load per lane. Rows past K are zero."""
    xp = np if isinstance(W, np.ndarray) else __import__("cupy")
    K, G = W.shape[0], scales.size // max(W.shape[0], 1)
    T, C = -(-K // 16), W.shape[1] // (64 * G)
    pad = lambda a, dt: xp.concatenate([xp.asarray(a, dt).reshape(K, -1), xp.zeros((T * 16 - K, a.size // K), dt)])  # noqa: E731
    tile = lambda a: pad(a, a.dtype).reshape(T, 2, 8, G).transpose(0, 3, 2, 1)      # noqa: E731   [T, G, g, h]
    Wi = xp.ascontiguousarray(pad(W.view(xp.uint8), xp.uint8).reshape(T, 2, 8, G, C, 4, 16)
                              .transpose(0, 3, 4, 1, 2, 5, 6)).reshape(T, G, 2 * C, 32, 16)
    if zeros is None:                                                  # W8A16: fp32 scales, [T, G, 8, 2]
        return Wi, xp.ascontiguousarray(tile(xp.asarray(scales, xp.float32)))
    Mi = xp.zeros((T, G, 8, 8), xp.uint8)
    Mi[..., 0:4] = xp.ascontiguousarray(tile(xp.asarray(scales, xp.float16))).view(xp.uint8).reshape(T, G, 8, 4)
    Mi[..., 4:6] = tile(xp.asarray(zeros, xp.uint8))
    return Wi, Mi


def interleave_int4(W, scales, zeros):
    """Step 36's layout of int4 weights (packed W [K, M/2], scales and zeros [K, G]): _tile_major."""
    return _tile_major(W, scales, zeros)


def interleave_w8a16(W, scales):
    """Step 37's layout of int8 weights (W [K, M], fp32 scales [K, G]): _tile_major."""
    return _tile_major(W, scales)


def untile(Wi, K):
    """The inverse of _tile_major's weight layout (uint8: view as int8 for W8A16); NumPy or CuPy."""
    xp = np if isinstance(Wi, np.ndarray) else __import__("cupy")
    T, Gn, C2 = Wi.shape[:3]
    return xp.ascontiguousarray(Wi.reshape(T, Gn, C2 // 2, 2, 8, 4, 16).transpose(0, 3, 4, 1, 2, 5, 6)
                                .reshape(T * 16, -1)[:K])


_TILED: dict = {}      # id(W) -> (weak references to the weight arrays, their _tile_major repack)


def tiles(*weights):
    """Steps 36 / 37's layout of one matrix's quantised weights (int4: packed, scales, zeros; W8A16:
    q, scales): (Wi, Mi), repacked on the first call and kept while those arrays live, so the next
    call with the same arrays (by identity, through weak references) costs a dictionary lookup.
    An engine repacks once at load time (pack()) and keeps only the repacked arrays; this cache is
    for the call a learner makes with the quantiser's arrays. Changing a weight array in place
    leaves its old repack here: make a new array (or call forget(W))."""
    import weakref
    key = id(weights[0])
    hit = _TILED.get(key)
    if hit is not None and len(hit[0]) == len(weights) and all(r() is a for r, a in zip(hit[0], weights)):
        return hit[1]
    packed = _tile_major(*weights)
    if not isinstance(packed[0], np.ndarray):
        derived(*packed)                  # a launch plan may replay them for these very arrays (core.launch)
    drop = lambda _, k=key: _TILED.pop(k, None)          # noqa: E731   any of them freed: the entry goes
    _TILED[key] = (tuple(weakref.ref(a, drop) for a in weights), packed)
    return packed


def forget(W) -> None:
    """Drop the cached repack of W (after changing W in place)."""
    _TILED.pop(id(W), None)
