"""Labs 07 and 08's sentences name what the record ran: a sentence that reads a row recorded with an earlier
version of a step says so (attention.stale: stale_said / stale_line), and lab 08's launch count follows the token
step's own sequence of calls (decoder.report.token_ops, run on NumPy)."""
import pandas as pd

from kernellab.attention import stale as P
from kernellab import decoder as D
from kernellab.decoder import report as R


def frame(note_a="", note_b=""):
    return pd.DataFrame([{"name": n, "case": "c", "median_us": us, "device": dev, "date": "2026-01-01",
                          "source": "recorded", "note": note}
                         for n, us, note, dev in (("05_gqa_tile", 10.0, note_a, "GPU A"), ("02_head", 20.0, note_b, "GPU A"),
                                                  ("05_gqa_tile", 9.0, "recorded with an earlier version of step 05_gqa_tile",
                                                   "GPU B"))])


def test_stale_said_names_only_the_rows_a_sentence_reads():
    fresh = frame()
    assert P.stale_names(fresh) == [] and P.stale_said(fresh, "`05_gqa_tile` is fast.") == "`05_gqa_tile` is fast."
    old = frame(note_b="recorded with an earlier version of step 02_head")
    assert P.stale_said(old, "`05_gqa_tile` is fast.") == "`05_gqa_tile` is fast."       # it does not read 02
    said = P.stale_said(old, "`05_gqa_tile` beats `02_head`.")
    assert "On the GPU A record, `02_head` ran an earlier version" in said and "`05_gqa_tile` ran" not in said
    assert "`02_head` ran" in P.stale_said(old, "The token step.", names=("02_head",))   # a row named, not quoted
    assert P.stale_said(frame(), "x", names=("05_gqa_tile",)) == "x"                      # GPU B's row is not GPU A's


def test_stale_line_per_device():
    line = P.stale_line(frame())
    assert "GPU B record, 1 row of this section" in line and "GPU A" not in line
    assert P.stale_line(frame().drop(columns="note")) == ""


def test_launches_follow_the_token_steps_calls():
    n = R.token_ops(D.QWEN3_8B, "int4")
    assert n["gemv"] == n["conv"] == 4 * 36 and n["decode"] == 36 and n["argmax"] == 1 and n["embed"] == 1
    assert R.token_ops(D.QWEN25_7B, "int4")["bias_add"] == 28 and "bias_add" not in n
    assert R.launches_per_token(D.QWEN3_8B, "int4", attention_launches=1) == \
        R.launches_per_token(D.QWEN3_8B, "int4", attention_launches=2) - 36
    assert R.launches_per_token(D.QWEN3_8B, "int4") == R.launches_per_token(D.QWEN3_8B, "int4", attention_launches=1)


def test_context_text_says_what_sets_a_baselines_time():
    def rows(name, us1, us4096, host):
        return [{"name": name, "case": f"context {c}", "median_us": us, "p10_us": us * 0.97, "p90_us": us * 1.03,
                 "host_us": us * host, "device": "GPU A", "date": "2026-01-01", "source": "recorded"}
                for c, us in ((1, us1), (4096, us4096))]
    d = pd.DataFrame(rows("eager", 50000.0, 30000.0, 0.99) + rows("graph", 7000.0, 7700.0, 0.001))
    s = R.context_text(d, "eager")
    assert "**1.67×** as long at context 1" in s and "host's dispatch" in s, s
    g = R.context_text(d, "graph")
    assert "**1.10×** as long at context 4096" in g and "the GPU's work sets it" in g, g
    assert "within noise" in R.context_text(pd.DataFrame(rows("eager", 50000.0, 49000.0, 0.99)), "eager")
    assert R.context_text(d, "absent") == ""


def test_every_op_of_the_token_is_a_weight_read_or_named():
    reads = {"gemv", "logits", "norm_gemv", "norm_logits", "gemv_residual", "silu_gemv_residual"}
    for cfg in (D.QWEN3_8B, D.QWEN25_7B):
        for path in ("float16", "int4"):
            n = R.token_ops(cfg, path)
            assert set(n) <= reads | set(R.OTHER_OPS), set(n) - reads - set(R.OTHER_OPS)
            assert sum(v for op, v in n.items() if op in reads) == 4 * cfg.layers + 1     # the floor's weight reads


def test_launch_share_does_not_mix_versions():
    rows = [{"name": n, "case": "context 512", "median_us": us, "p10_us": us, "p90_us": us, "device": "NVIDIA H200",
             "date": "2026-01-01", "source": "recorded", "note": note}
            for n, us, note in ((D.step_name("float16", "graph"), 5000.0, "recorded with an earlier version of it"),
                                ("float16 read-only floor (graph)", 4000.0, ""))]
    s = R.launch_share(pd.DataFrame(rows))           # lab 00's record of the H200 gives the launch cost
    assert "1000 µs (20% of the token)" in s and "not set against its time" in s and "launches more" not in s, s
