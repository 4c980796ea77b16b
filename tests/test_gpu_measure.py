"""GPU only: the roofs are ceilings, launches and graphs are measured right, launchers cost
little host time next to a bare RawKernel call, decode shapes get a warm time, and an `out`
that aliases an input is refused unless the step is safe in place."""
import pytest

from kernellab.core.family import of

from conftest import gpu
from kernellab import add, bench, gemv, measuring, rmsnorm, softmax
from kernellab.check import check

pytestmark = gpu

# The read roof must be a ceiling at least as high as the copy roof. Medians of 10-100
# repetitions move by about 1% between runs, so "at least" is tested with 2% of slack.
ROOF_SLACK = 0.98
HOST_RATIO = 1.6      # issue 8's target is 1.5x a bare RawKernel call. With the identity fast path of
                      # launch.Variant the H200 hosts measured 1.32-1.51x (two hosts, four launchers); the
                      # launchers before launch plans measured 2.1-3.1x. 1.6 catches a regression without
                      # failing on host noise; the recorded host_us / bare_host_us columns report each ratio.


@pytest.mark.serial
def test_read_roof_is_at_least_the_copy_roof():
    r = bench.roofs()
    far = max(r["copy_kernel_gbps"], r["copy_memcpy_gbps"])    # past L2 (near it, L2 can absorb writes)
    assert r["read_gbps"] >= ROOF_SLACK * far, r
    assert r["copy_gbps"] == pytest.approx(max(r["copy_kernel_gbps"], r["copy_memcpy_gbps"], r["copy_2r1w_gbps"],
                                               r["copy_near_l2_gbps"]))


@pytest.mark.serial
def test_launch_costs():
    r = bench.roofs()
    # back to back, a launch costs the GPU less than one launch alone between two events,
    # and a graph replays its launches for no more than that
    assert 0 < r["launch_b2b_us"] < r["launch_us"], r
    assert 0 < r["launch_graph_us"] <= 1.2 * r["launch_b2b_us"], r
    # one graph launch costs the host far less than the launches it replays
    assert r["host_graph_us"] < 0.5 * bench.LAUNCHES * r["host_launch_us"], r


def test_graph_replays_and_refuses_allocation():
    import cupy
    a, b = (cupy.asarray(v) for v in add.make_input((4097,), "float32"))
    h = cupy.empty_like(a)
    y = cupy.empty_like(a)
    step = add.ADD.variants["02_f32_float4"]
    g = bench.graph(lambda: (step(a, b, out=h), step(h, b, out=y)))
    h.fill(0)
    y.fill(0)
    g()
    check(y, add.reference(add.reference(a.get(), b.get()), b.get()), name="graph of two adds")
    with pytest.raises(ValueError, match="allocated"):
        bench.graph(lambda: step(a, b))


def test_graph_warmup_waits_for_work_already_queued():
    """bench.graph's warm-up runs fn on its own non-blocking stream, which does not wait for the default stream.
    It must not start before work queued there ends (lab 09 ran its tower eagerly, then captured it, and the
    warm-up raced with the eager run over the same buffers). Here fn reads the last element of a 1 GiB copy
    still in flight: read too early it is 0."""
    import cupy
    src = cupy.ones(1 << 28, cupy.float32)
    dst = cupy.zeros_like(src)
    out = cupy.zeros(1, cupy.float32)
    cupy.cuda.Device().synchronize()
    dst[...] = src                                 # queued on the default stream, not waited for
    bench.graph(lambda: cupy.copyto(out, dst[-1:]))
    assert float(out.get()[0]) == 1.0


CASES = [(softmax, "05_online_vec4", (1, 4096), "float32"),
         (rmsnorm, "08_onepass", (1, 4096), "float16"),
         (add, "04_fp16_vec8", (4096,), "float16"),
         (gemv, "27_fp16_rows", (4096, 4096), "float16")]


@pytest.mark.serial
@pytest.mark.parametrize("fam,name,shape,dt", CASES, ids=[c[1] for c in CASES])
def test_launcher_host_cost_near_a_bare_call(fam, name, shape, dt):
    import cupy
    import functools
    fam = of(fam)
    args = [cupy.asarray(v) for v in fam.make_input(shape, dt)]
    v = fam.variants[name]
    fn = functools.partial(v, *args, out=v.alloc_out(*args))
    bare = bench.bare(fn)
    ours, floor = float("inf"), float("inf")
    for _ in range(5):             # interleaved, so a slow patch of the host hits both sides
        ours = min(ours, bench.host_us(fn, calls=100, batches=2))
        floor = min(floor, bench.host_us(bare, calls=100, batches=2))
    print(f"{fam.name} {name}: launcher {ours:.2f} us, bare RawKernel {floor:.2f} us, {ours / floor:.2f}x")
    assert ours <= HOST_RATIO * floor, f"{ours:.2f} us vs bare {floor:.2f} us"


def test_compare_has_warm_and_host_columns():
    df = bench.compare(add, [((4096,), "float32"), ((2 ** 24,), "float32")], names=["02_f32_float4"])
    small = df[df["case"] == "4096:float32"]
    big = df[df["case"] == f"{2 ** 24}:float32"]
    assert small["warm_us"].notna().all() and big["warm_us"].isna().all()
    assert df["host_us"].notna().all()
    ours = df[df["kind"] == "variant"]
    assert ours["bare_host_us"].notna().all()


@pytest.mark.serial
def test_fundamentals_little_and_ceilings():
    fund = measuring.fundamentals()
    v = lambda q: measuring.value(fund, q)   # noqa: E731
    assert v("DRAM latency (pointer chase)") > v("L2 latency (pointer chase)") > 0
    sweep = measuring.inflight(fund)
    gb = list(sweep["GB/s"])
    assert gb[-1] > 1.2 * gb[0], sweep           # more bytes in flight, more bandwidth (H100: 1.34x)
    assert v("ex2.approx (SFU) throughput") < v("FFMA instructions")   # the SFU has fewer lanes
    assert v("instruction issue ceiling") >= v("FFMA instructions")


def test_out_aliasing():
    import cupy
    a, b = (cupy.asarray(x) for x in add.make_input((4097,), "float16"))
    want = add.reference(a.get(), b.get())
    check(add.ADD.variants["04_fp16_vec8"](a, b, out=a), want, name="add in place (out=a)")
    a2, b2 = (cupy.asarray(x) for x in add.make_input((4097,), "float16"))
    check(add.ADD.variants["04_fp16_vec8"](a2, b2, out=b2), want, name="add in place (out=b)")
    big = cupy.asarray(add.make_input((8200,), "float16")[0])
    with pytest.raises(ValueError, match="overlaps"):
        add.ADD.variants["04_fp16_vec8"](big[:4096], big[8:4104], out=big[4:4100])   # a shifted overlap
    (x,) = [cupy.asarray(v) for v in softmax.make_input((3, 1023))]
    with pytest.raises(ValueError, match="__restrict__"):
        softmax.SOFTMAX.variants["05_online_vec4"](x, out=x)
    xr, w = (cupy.asarray(v) for v in rmsnorm.make_input((3, 1152), "float16"))
    with pytest.raises(ValueError, match="overlaps"):
        rmsnorm.RMSNORM.variants["08_onepass"](xr, w, out=xr)


def test_launch_plan_replays_with_new_values_and_keeps_checks():
    import cupy
    step = add.ADD.variants["04_fp16_vec8"]
    ha, hb = add.make_input((4097,), "float16")
    a, b = cupy.asarray(ha), cupy.asarray(hb)
    out = cupy.empty_like(a)
    step(a, b, out=out)                              # validated and launched; the plan is kept
    n = len(step._plans)
    ha2 = (ha * 0.5).astype("float16")
    a.set(ha2)                                       # same buffers, new values
    out.fill(0)
    check(step(a, b, out=out), add.reference(ha2, hb), name="replayed plan")
    assert len(step._plans) == n                     # replayed, not recorded again
    assert step._last is not None and step._last[1] is not None   # the fast path is armed
    a.set(ha)                                        # the very same objects again: the fast path
    out.fill(0)
    check(step(a, b, out=out), add.reference(ha, hb), name="fast path")
    b2 = cupy.asarray(hb)                            # an equal but different array: not the fast path
    check(step(a, b2, out=out), add.reference(ha, hb), name="new array")
    del b2                                           # freed: its weak reference must not match a new one
    b3 = cupy.asarray((hb * 2).astype("float16"))
    check(step(a, b3, out=out), add.reference(ha, (hb * 2).astype("float16")), name="after free")
    a.shape = (1, 4097)                              # reshaped in place: validated again, not replayed
    with pytest.raises(ValueError):
        step(a, b3, out=out)
    a.shape = (4097,)
    with pytest.raises(ValueError, match="dtype"):
        step(a.astype("float32"), b, out=out)
    with pytest.raises(ValueError, match="shape"):
        step(a, b[:100], out=out)
    with pytest.raises(ValueError, match="overlaps"):
        step(a[1:], b[1:], out=a[:-1])
    x, res, w = (cupy.asarray(v) for v in rmsnorm.FUSED.make_input((3, 1152), "float16"))
    fused = rmsnorm.FUSED.variants["02_fused"]
    h, y = fused.alloc_out(x, res, w)
    want = rmsnorm.FUSED.reference(x.get(), res.get(), w.get())
    for _ in range(3):                               # recorded, replayed by key, then by identity
        h.fill(0)
        y.fill(0)
        got = fused(x, res, w, out=(h, y))
        check(got[0], want[0], name="fused h")
        check(got[1], want[1], name="fused y")
