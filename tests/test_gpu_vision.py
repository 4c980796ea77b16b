"""GPU only: every vision VARIANTS entry (every op family) against its NumPy reference on the
family's awkward shapes x hostile values; the public API against the float64 ref_ functions at
the tower's shapes; misaligned views take the fallbacks; bad input raises a ValueError before
any launch and leaves the context healthy."""
import numpy as np
import pytest

from conftest import gpu
from kernellab import check, vision as V

pytestmark = gpu
PARAMS = [(f.OP, nm) for f in V.FAMILIES for nm in f.VARIANTS]
FAM = {f.OP: f for f in V.FAMILIES}


def _gpu(host):
    import cupy
    return [cupy.asarray(a) for a in host]


@pytest.mark.parametrize("op,name", PARAMS, ids=["-".join(p) for p in PARAMS])
def test_variant_matches_reference(op, name):
    f = FAM[op]
    fn = f.VARIANTS[name]
    for i, (shape, values) in enumerate(f.CHECK_CASES):
        if not fn.accepts((shape, values)):
            continue
        host = f.make_input(shape, "float16", values, seed=i)
        want = f.reference(*host)
        got = fn(*_gpu(host))
        for g, w in check._pairs(got, want):
            check.check(g, w, name=f"{op} {name} {shape} {values}", quiet=True)


def _ref16(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float16)


def test_public_api_against_the_float64_references():
    import cupy
    rng = np.random.default_rng(0)
    gh, gw = 24, 32
    N = gh * gw
    h = lambda *s, sc=1.0: (rng.standard_normal(s) * sc).astype(np.float16)  # noqa: E731
    x, w, b = h(N, V.HIDDEN), (1 + h(V.HIDDEN, sc=0.1)).astype(np.float16), h(V.HIDDEN, sc=0.1)
    check.check(V.layernorm(*_gpu((x, w, b))), _ref16(V.ref_layernorm(x, w, b)), name="layernorm", quiet=True)
    m = h(N, V.MLP, sc=2)
    bm = h(V.MLP, sc=0.5)
    check.check(V.gelu(cupy.asarray(m)), _ref16(V.ref_gelu(m)), name="gelu", quiet=True)
    check.check(V.bias_gelu(*_gpu((m, bm))), _ref16(V.ref_bias_gelu(m, bm)), name="bias_gelu", quiet=True)
    r = h(N, V.HIDDEN)
    check.check(V.bias_add_residual(*_gpu((x, b, r))), _ref16(V.ref_bias_add_residual(x, b, r)),
                name="bias+residual", quiet=True)
    qkv = h(N, 3 * V.HIDDEN)
    bq = h(3 * V.HIDDEN, sc=0.1)
    check.check(V.bias_add_residual(*_gpu((qkv, bq))), _ref16(V.ref_bias_add_residual(qkv, bq)),
                name="qkv bias", quiet=True)
    p, pw, pb = h(N, V.PATCH_DIM), h(V.HIDDEN, V.PATCH_DIM, sc=V.PATCH_DIM ** -0.5), h(V.HIDDEN, sc=0.02)
    check.check(V.patch_embed(*_gpu((p, pw, pb))), _ref16(V.ref_patch_embed(p, pw, pb)), name="patch_embed",
                quiet=True)
    table = h(V.POS_SIDE ** 2, V.HIDDEN)
    check.check(V.pos_embed_interpolate(cupy.asarray(table), gh, gw),
                _ref16(V.ref_pos_embed_interpolate(table, gh, gw)), name="pos_embed", quiet=True)
    check.check(V.spatial_merge(cupy.asarray(x), gh, gw), _ref16(V.ref_spatial_merge(x, gh, gw)),
                name="spatial_merge", quiet=True)
    got = V.split_rope_transpose(cupy.asarray(qkv), gh, gw)
    for nm, g, want in zip("qkv", got, V.ref_split_rope_transpose(qkv, gh, gw)):
        assert g.shape == (V.HEADS, N, V.HEAD_DIM)
        check.check(g, _ref16(want), name=f"split_rope {nm}", quiet=True)
    o = h(V.HEADS, N, V.HEAD_DIM)
    check.check(V.transpose_head_token(cupy.asarray(o)), _ref16(V.ref_transpose_head_token(o)),
                name="transpose", quiet=True)
    s = h(V.HEADS, 64, 64, sc=3)
    check.check(V.softmax(cupy.asarray(s)), _ref16(V.ref_softmax(s)), name="softmax", quiet=True)
    emb, feats = h(500, 64), h(30, 64)
    pos = np.sort(rng.choice(500, 30, replace=False))
    for dt in (np.int32, np.int64):
        e = cupy.asarray(emb)
        out = V.replace_image_tokens(e, cupy.asarray(feats), cupy.asarray(pos.astype(dt)))
        assert out is e
        check.check(e, _ref16(V.ref_replace_image_tokens(emb, feats, pos)), name="replace", quiet=True)


def test_out_arguments_and_in_place_residual():
    import cupy
    x, b, r = _gpu(V.BIAS_RESIDUAL.make_input((64, 1152)))
    want = V.BIAS_RESIDUAL.reference(x.get(), b.get(), r.get())
    V.bias_add_residual(x, b, r, out=r)                 # the residual stream updated in place
    check.check(r, want, quiet=True)
    qkv, cos, sin = _gpu(V.SPLIT_ROPE.make_input((4, 4, V.HEADS, V.HEAD_DIM)))
    outs = tuple(cupy.empty((V.HEADS, 16, V.HEAD_DIM), cupy.float16) for _ in range(3))
    got = V.split_rope_transpose(qkv, 4, 4, out=outs)
    assert all(g is o for g, o in zip(got, outs))


def test_misaligned_views_take_the_fallbacks():
    import cupy

    def off(a):          # the same values, 2 bytes off 16-byte alignment
        big = cupy.empty(a.size + 1, a.dtype)
        v = big[1:].reshape(a.shape)
        v[...] = cupy.asarray(a)
        return v
    for f in (V.LAYERNORM, V.GELU, V.BIAS_GELU, V.BIAS_RESIDUAL, V.QKV_BIAS, V.SPATIAL_MERGE, V.TRANSPOSE,
              V.SOFTMAX):
        shape = {"transpose": (16, 9, 72), "softmax": (3, 1024)}.get(f.OP, (8, 1152))
        host = f.make_input(shape, "float16", "randn")
        want = f.reference(*host)
        for nm, fn in f.VARIANTS.items():
            check.check(fn(*[off(a) for a in host]), want, name=f"{f.OP} {nm} misaligned", quiet=True)
    qkv, cos, sin = V.SPLIT_ROPE.make_input((2, 4, V.HEADS, V.HEAD_DIM))
    for nm, fn in V.SPLIT_ROPE.VARIANTS.items():
        for g, w in zip(fn(off(qkv), *_gpu((cos, sin))), V.SPLIT_ROPE.reference(qkv, cos, sin)):
            check.check(g, w, name=f"split_rope {nm} misaligned", quiet=True)


def test_bad_input_raises_before_launch():
    import cupy
    f16 = cupy.float16
    x, w = cupy.zeros((16, 1152), f16), cupy.ones(1152, f16)
    qkv = cupy.zeros((16, 3456), f16)
    emb, feats = cupy.zeros((10, 64), f16), cupy.ones((3, 64), f16)
    bad = [
        (V.layernorm, (x, cupy.ones(1151, f16), w), "length 1152"),
        (V.layernorm, (x, w, cupy.ones(1152, cupy.float32)), "dtype"),
        (V.layernorm, (x.astype(cupy.float32), w, w), "dtype"),
        (V.layernorm, (cupy.zeros((1152, 16), f16).T, w, w), "contiguous"),
        (V.bias_gelu, (x, cupy.ones(1000, f16)), "length 1152"),
        (V.bias_add_residual, (x, w, cupy.zeros((16, 1151), f16)), "shape"),
        (V.patch_embed, (cupy.zeros((4, 1536), f16), cupy.zeros((1152, 1535), f16), w), "1536 columns"),
        (V.patch_embed, (cupy.zeros((4, 1536), f16), cupy.zeros((1152, 1536), f16), cupy.ones(8, f16)), "1152"),
        (V.pos_embed_interpolate, (cupy.zeros((2303, 1152), f16), 4, 4), "square"),
        (V.pos_embed_interpolate, (cupy.zeros((2304, 1152), f16), 3, 4), "grid_h"),
        (V.spatial_merge, (x, 2, 4), "tokens"),
        (V.spatial_merge, (x, 4, 5), "grid_w"),
        (V.spatial_merge, (x, 1, 16), "grid_h"),
        (V.split_rope_transpose, (qkv, 2, 4), "tokens"),
        (V.split_rope_transpose, (cupy.zeros((16, 3455), f16), 4, 4), "multiple of 48"),
        (V.split_rope_transpose, (qkv, 4, 4, 15), "3 \\* heads"),
        (V.split_rope_transpose, (cupy.zeros((16, 3 * 16 * 6), f16), 4, 4), "head_dim % 4"),
        (V.transpose_head_token, (x,), "3-D"),
        (V.softmax, (x.astype(cupy.float32),), "dtype"),
        (V.replace_image_tokens, (emb, feats, cupy.asarray([0, 5, 10], cupy.int32)), "< 10"),
        (V.replace_image_tokens, (emb, feats, cupy.asarray([-1, 5, 9], cupy.int64)), "< 10"),
        (V.replace_image_tokens, (emb, cupy.ones((3, 65), f16), cupy.asarray([0, 1, 2], cupy.int32)), "64 columns"),
        (V.replace_image_tokens, (emb, feats, cupy.asarray([0, 1], cupy.int32)), "3 entries"),
        (V.replace_image_tokens, (emb, feats, cupy.asarray([0, 1, 2], cupy.float32)), "dtype"),
        (V.layernorm, (x, w, w, 1e-5), "eps"),
    ]
    for fn, args, match in bad:
        with pytest.raises(ValueError, match=match):
            fn(*args)
    assert float(emb.sum()) == 0                        # nothing was written
    cupy.cuda.Device().synchronize()                    # the context is still healthy
    check.check(V.layernorm(x, w, w), np.ones((16, 1152), np.float16), quiet=True)


def test_rope_of_large_values_within_fp32_cancellation():
    # out = x1 cos - x2 sin can cancel: with |x| ~ 1e4 each fp32 product carries ~|x| 2^-24 of
    # rounding, so a small result is only good to that absolute error (HF's fp32 rotary too)
    for shape in [(32, 32, V.HEADS, V.HEAD_DIM), (2, 18, 2, 72), (2, 4, 2, 12)]:
        host = V.SPLIT_ROPE.make_input(shape, "float16", "large")
        atol = 4 * float(np.abs(host[0].astype(np.float64)).max()) * 2.0 ** -24
        want = V.SPLIT_ROPE.reference(*host)
        for nm, fn in V.SPLIT_ROPE.VARIANTS.items():
            for g, w in zip(fn(*_gpu(host)), want):
                check.check(g, w, name=f"split_rope {nm} {shape} large", atol=atol, quiet=True)


def test_empty_inputs_launch_nothing():
    import cupy
    e = cupy.zeros((0, 1152), cupy.float16)
    w = cupy.ones(1152, cupy.float16)
    assert V.layernorm(e, w, w).shape == (0, 1152)
    assert V.gelu(e).shape == (0, 1152) and V.bias_add_residual(e, w).shape == (0, 1152)
    assert V.transpose_head_token(cupy.zeros((16, 0, 72), cupy.float16)).shape == (0, 1152)


def test_gelu_steps_agree_with_each_other_and_with_erf_within_fp16():
    import cupy
    x = np.linspace(-8, 8, 4096 * 8).astype(np.float16).reshape(8, 4096)
    outs = {nm: fn(cupy.asarray(x)).get().astype(np.float64) for nm, fn in V.GELU.VARIANTS.items()}
    erf = V.ref_gelu_erf(x)
    for nm, o in outs.items():
        assert np.max(np.abs(o - erf)) < 4e-3, nm      # tanh vs erf (< 5e-4) plus fp16 rounding


def test_transpose_walks_agree_exactly():
    """A transpose copies: every walk (output order 21/22/28, input order 29, the seed's) gives the same
    bits, at the tower's shape and at odd / non-multiple-of-8 head dims (the 2- and 1-half fallbacks)."""
    import cupy
    for shape in [(V.HEADS, 1024, V.HEAD_DIM), (3, 37, 6), (5, 11, 7), (2, 1, 8)]:
        (o,) = V.TRANSPOSE.make_input(shape, "float16", "hostile", seed=1)
        want = np.ascontiguousarray(o.transpose(1, 0, 2)).reshape(shape[1], shape[0] * shape[2])  # the same bits
        for nm, fn in V.TRANSPOSE.variants.items():
            np.testing.assert_array_equal(fn(cupy.asarray(o)).get().view(np.uint16), want.view(np.uint16),
                                          err_msg=f"{nm} {shape}")


def test_the_seeds_forms_misaligned_bad_input_and_agreement():
    """Issue 34 item 5: the seed's transpose_token_head_kernel (32, 33) and its split + RoPE over fp16 [N, D]
    tables (34, 35): misaligned views take the fallbacks, bad input raises before a launch, the token-head
    transpose inverts the head-token one bit for bit, and the fp16 tables agree with the fp32 tables' steps
    to the tables' rounding."""
    import cupy

    def off(a):          # the same values, 2 bytes off 16-byte alignment
        big = cupy.empty(a.size + 1, a.dtype)
        v = big[1:].reshape(a.shape)
        v[...] = cupy.asarray(a)
        return v
    f = V.TRANSPOSE_TOKEN_HEAD
    for shape in [(9, 16, 72), (5, 3, 7)]:
        host = f.make_input(shape, "float16", "hostile")
        for nm, fn in f.variants.items():
            check.check(fn(off(host[0])), f.reference(*host), name=f"{nm} {shape} misaligned", quiet=True)
    (o,) = V.TRANSPOSE.make_input((V.HEADS, 1000, V.HEAD_DIM), "float16", "hostile", seed=2)
    go = cupy.asarray(o)
    back = V.transpose_token_head(V.transpose_head_token(go).reshape(1000, V.HEADS, V.HEAD_DIM))
    np.testing.assert_array_equal(back.get().view(np.uint16), o.view(np.uint16))
    assert V.transpose_token_head(cupy.zeros((0, 16, 72), cupy.float16)).shape == (16, 0, 72)
    qkv, c, s = V.SPLIT_ROPE_F16.make_input((2, 4, V.HEADS, V.HEAD_DIM))
    for nm, fn in V.SPLIT_ROPE_F16.variants.items():
        for g, w in zip(fn(off(qkv), *_gpu((c, s))), V.SPLIT_ROPE_F16.reference(qkv, c, s)):
            check.check(g, w, name=f"split_rope_f16tab {nm} misaligned", quiet=True)
    host32 = V.SPLIT_ROPE.make_input((32, 32, V.HEADS, V.HEAD_DIM), "float16", "randn", seed=5)
    host16 = V.SPLIT_ROPE_F16.make_input((32, 32, V.HEADS, V.HEAD_DIM), "float16", "randn", seed=5)
    assert (host32[0] == host16[0]).all()
    for g16, g32 in zip(V.SPLIT_ROPE_F16.variants["35_split_rope_fma_f16tab"](*_gpu(host16)),
                        V.SPLIT_ROPE.variants["19_split_rope_fma"](*_gpu(host32))):
        assert float(cupy.abs(g16.astype(cupy.float32) - g32.astype(cupy.float32)).max()) < 0.02
    f16 = cupy.float16
    q, c16 = cupy.zeros((8, 3 * 16 * 72), f16), cupy.zeros((8, 72), f16)
    bad = [(V.transpose_token_head, (cupy.zeros((8, 1152), f16),), "3-D"),
           (V.transpose_token_head, (cupy.zeros((8, 16, 72), cupy.float32),), "dtype"),
           (V.split_rope_transpose_f16tab, (q, c16.astype(cupy.float32), c16), "dtype"),
           (V.split_rope_transpose_f16tab, (q, c16[:7], c16[:7]), "rows"),
           (V.split_rope_transpose_f16tab, (q, cupy.zeros((8, 70), f16), cupy.zeros((8, 70), f16)), "head_dim")]
    for fn, args, match in bad:
        with pytest.raises(ValueError, match=match):
            fn(*args)
    cupy.cuda.Device().synchronize()


def test_the_seeds_rope_of_large_values_within_fp32_cancellation():
    for shape in [(32, 32, V.HEADS, V.HEAD_DIM), (2, 18, 2, 72), (2, 4, 2, 12)]:
        host = V.SPLIT_ROPE_F16.make_input(shape, "float16", "large")
        atol = 4 * float(np.abs(host[0].astype(np.float64)).max()) * 2.0 ** -24
        want = V.SPLIT_ROPE_F16.reference(*host)
        for nm, fn in V.SPLIT_ROPE_F16.variants.items():
            for g, w in zip(fn(*_gpu(host)), want):
                check.check(g, w, name=f"split_rope_f16tab {nm} {shape} large", atol=atol, quiet=True)
