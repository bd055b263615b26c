"""KDA in the harness, on the CPU: bench/kda_torch.py (the chunked WY/UT form equals the
token-by-token recurrence in float64; the recurrence equals a per-head loop written plainly
from design.md; a mutant without the state decay is caught), the KDA set file, the markdown of
a KDA row, and a CPU dry run of `python -m bench run --set kda` on the small shapes.
The torch parts are skipped with a message where torch is not installed."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)
from bench import report, sets  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

NO_TORCH = "skipped: torch not installed (the KDA PyTorch implementations are checked where torch is)"


def _cu(lens):
    cu = [0]
    for x in lens:
        cu.append(cu[-1] + x)
    return cu


def make_case(seed, lens=None, n=2, t=17, h=2, hv=4, dk=16, dv=8, gate="sigmoid", g_scale=1.0,
              h0=True, l2norm=True, beta_sigmoid=True, dtype=None):
    """Random float64 inputs: (q, k, v, g, beta), kwargs of kda_torch."""
    dtype = dtype or torch.float64
    gen = torch.Generator().manual_seed(seed)
    lead = (sum(lens),) if lens is not None else (n, t)
    nseq = len(lens) if lens is not None else n

    def r(*s):
        return torch.randn(*s, generator=gen, dtype=dtype)

    q, k, v = r(*lead, h, dk), r(*lead, h, dk), r(*lead, hv, dv)
    if not l2norm:
        q, k = q * dk ** -0.5, k * dk ** -0.5
    a_log = torch.log(1 + 15 * torch.rand(hv, generator=gen, dtype=dtype))
    dt_bias = r(hv, dk)
    if gate == "sigmoid":
        g = r(*lead, hv, dk)
    else:  # log space: g_scale * (lower bound -5 times a sigmoid), in (-5 g_scale, 0)
        g = -5.0 * g_scale * torch.sigmoid(r(*lead, hv, dk))
    beta = r(*lead, hv)
    if not beta_sigmoid:
        beta = torch.sigmoid(beta)
    kw = {"initial_state": 0.5 * r(nseq, hv, dk, dv) if h0 else None,
          "cu_seqlens": _cu(lens) if lens is not None else None, "gate": gate,
          "A_log": a_log if gate == "sigmoid" else None, "dt_bias": dt_bias if gate == "sigmoid" else None,
          "lower_bound": -5.0, "l2norm": l2norm, "beta_sigmoid": beta_sigmoid, "dtype": dtype}
    return (q, k, v, g, beta), kw


def plain(q, k, v, g, beta, initial_state=None, cu_seqlens=None, gate="log", A_log=None, dt_bias=None,
          lower_bound=-5.0, l2norm=False, beta_sigmoid=False, scale=None, dtype=None):
    """design.md's recurrence per sequence, per value head, per token, in float64, on packed
    or padded inputs."""
    if cu_seqlens is None:
        n, tl = q.shape[:2]
        q, k, v, g, beta = (x.reshape((n * tl,) + tuple(x.shape[2:])) for x in (q, k, v, g, beta))
        cu = [i * tl for i in range(n + 1)]
    else:
        cu = list(cu_seqlens)
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    H, K = q.shape[1], q.shape[2]
    HV, V = v.shape[1], v.shape[2]
    scale = K ** -0.5 if scale is None else scale
    o = torch.zeros_like(v)
    S_all = torch.zeros(len(cu) - 1, HV, K, V, dtype=torch.float64)
    for s in range(len(cu) - 1):
        for hv in range(HV):
            h = hv // (HV // H)
            S = (initial_state[s, hv].double().clone() if initial_state is not None
                 else torch.zeros(K, V, dtype=torch.float64))
            for t in range(cu[s], cu[s + 1]):
                qt, kt = q[t, h], k[t, h]
                if l2norm:
                    qt = qt / torch.sqrt((qt * qt).sum() + 1e-6)
                    kt = kt / torch.sqrt((kt * kt).sum() + 1e-6)
                qt = qt * scale
                gt = g[t, hv]
                if gate == "sigmoid":
                    x = gt + (dt_bias[hv].double() if dt_bias is not None else 0.0)
                    gt = lower_bound * torch.sigmoid(torch.exp(A_log[hv].double()) * x)
                bt = torch.sigmoid(beta[t, hv]) if beta_sigmoid else beta[t, hv]
                S = torch.exp(gt)[:, None] * S
                u = bt * (v[t, hv] - S.T @ kt)
                S = S + torch.outer(kt, u)
                o[t, hv] = S.T @ qt
            S_all[s, hv] = S
    if cu_seqlens is None:
        o = o.reshape((n, tl) + tuple(o.shape[1:]))
    return o, S_all


def rel(a, b):
    a, b = a.double(), b.double()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@unittest.skipIf(torch is None, NO_TORCH)
class TestNaive(unittest.TestCase):
    """The oracle itself against the plain per-head loop."""

    def test_against_plain(self):
        from bench import kda_torch
        for i, (lens, gate, h0, l2, bs) in enumerate([
                ([17, 0, 16], "sigmoid", True, True, True), (None, "log", False, True, False),
                ([1, 5], "log", True, False, True), (None, "sigmoid", True, False, False)]):
            a, kw = make_case(10 + i, lens=lens, t=9, gate=gate, h0=h0, l2norm=l2, beta_sigmoid=bs)
            o, s = kda_torch.naive(*a, **kw)
            kw.pop("dtype")
            po, ps = plain(*a, **kw)
            self.assertEqual(o.shape, a[2].shape)
            self.assertLess(rel(o, po), 1e-12, (lens, gate))
            self.assertLess(rel(s, ps), 1e-12, (lens, gate))

    def test_packed_leading_one_and_empty(self):
        from bench import kda_torch
        a, kw = make_case(3, lens=[4, 3])
        o, s = kda_torch.naive(*a, **kw)
        o1, s1 = kda_torch.naive(*(x.unsqueeze(0) for x in a), **kw)
        self.assertEqual(o1.shape, (1,) + tuple(o.shape))
        self.assertLess(rel(o1[0], o), 1e-15)
        # all sequences empty: no output rows, the state passes through
        a, kw = make_case(4, lens=[0, 0])
        o, s = kda_torch.chunked(*a, chunk=16, **kw)
        self.assertEqual(o.shape[0], 0)
        self.assertTrue(torch.equal(s, kw["initial_state"]))


@unittest.skipIf(torch is None, NO_TORCH)
class TestChunked(unittest.TestCase):
    """chunked == naive in float64 (to rounding) on small random cases."""

    def check(self, seed, chunk, tol=1e-10, **case):
        from bench import kda_torch
        a, kw = make_case(seed, **case)
        no, ns = kda_torch.naive(*a, **kw)
        co, cs = kda_torch.chunked(*a, chunk=chunk, **kw)
        self.assertEqual(co.shape, no.shape)
        self.assertTrue(torch.isfinite(co).all() and torch.isfinite(cs).all(), (chunk, case))
        self.assertLess(rel(co, no), tol, (chunk, case))
        self.assertLess(rel(cs, ns), tol, (chunk, case))
        return no, ns

    def test_lengths_and_chunks(self):
        i = 0
        for chunk in (16, 32, 64):
            for t in (1, 17, 63, 64, 65):
                for gate in ("sigmoid", "log"):
                    i += 1
                    self.check(100 + i, chunk, t=t, n=2, h=2, hv=4, gate=gate)

    def test_packed(self):
        for i, chunk in enumerate((16, 32, 64)):
            self.check(200 + i, chunk, lens=[17, 0, 16], h=2, hv=4)
            self.check(210 + i, chunk, lens=[17, 0, 16], h=2, hv=4, gate="log", h0=False)
            self.check(220 + i, chunk, lens=[65, 1, 0, 64, 130], h=1, hv=2)

    def test_gate_near_zero(self):
        # g ~ -5e-5 per token: almost no decay, the state carries far
        for i, chunk in enumerate((16, 64)):
            self.check(300 + i, chunk, t=65, gate="log", g_scale=1e-5)

    def test_strong_decay_no_overflow(self):
        # g down to -5 x 20 = -100 per token: the cumulative gate of a chunk of 64 reaches -6400;
        # exp(-G) alone would overflow; the products exp(G_i - G_j) must stay finite
        for i, chunk in enumerate((16, 64)):
            self.check(400 + i, chunk, t=130, gate="log", g_scale=20.0)
        self.check(410, 64, t=130, gate="log", g_scale=20.0, dtype=torch.float32, tol=1e-4)

    def test_heads_and_no_l2norm(self):
        self.check(500, 32, t=40, h=1, hv=3)
        self.check(501, 32, t=40, h=3, hv=3, l2norm=False, beta_sigmoid=False)

    def test_fp32_within_the_harness_tolerance(self):
        # the contenders' setting: bf16 q, k, v, fp32 everything else, fp32 compute, bf16 o
        from bench import kda_torch
        a, kw = make_case(600, t=200, n=1, h=2, hv=2, dk=128, dv=128)
        a = tuple(x.to(torch.bfloat16).double() if i < 3 else x for i, x in enumerate(a))  # bf16-exact
        ro, rs = kda_torch.naive(*a, **kw)
        a32 = tuple(x.to(torch.bfloat16) if i < 3 else x.float() for i, x in enumerate(a))
        kw32 = dict(kw, dtype=torch.float32, out_dtype=torch.bfloat16, initial_state=kw["initial_state"].float(),
                    A_log=kw["A_log"].float(), dt_bias=kw["dt_bias"].float())
        for impl in (kda_torch.chunked, kda_torch.naive):
            o, s = impl(*a32, **kw32)
            self.assertEqual(o.dtype, torch.bfloat16)
            self.assertEqual(s.dtype, torch.float32)
            self.assertLess(rel(o, ro), 1e-2, impl)
            self.assertLess(rel(s, rs), 5e-3, impl)

    def test_mutant_without_state_decay_differs(self):
        from bench import kda_torch

        class NoDecay(kda_torch.Chunked):
            def _state_decay(self, S, egl):
                return S

        for i, case in enumerate([dict(t=65), dict(lens=[17, 0, 16]), dict(t=17)]):
            a, kw = make_case(700 + i, **case)
            no, ns = kda_torch.naive(*a, **kw)
            mo, ms = NoDecay(*a, chunk=16, **kw)()
            self.assertGreater(max(rel(mo, no), rel(ms, ns)), 1e-2, case)
            co, cs = kda_torch.Chunked(*a, chunk=16, **kw)()
            self.assertLess(max(rel(co, no), rel(cs, ns)), 1e-10, case)

    def test_chunk_must_be_a_power_of_two(self):
        from bench import kda_torch
        a, kw = make_case(800)
        with self.assertRaises(ValueError):
            kda_torch.chunked(*a, chunk=48, **kw)


class TestKdaSet(unittest.TestCase):
    def test_set_parses(self):
        shs = sets.load("kda")
        self.assertTrue(all(s.kind == "kda" for s in shs))
        self.assertEqual(len({s.id for s in shs}), len(shs))
        table = {(s.mode, s.n, s.t, tuple(s.lens) if s.lens else None, s.h, s.hv, s.dk, s.dv)
                 for s in shs if s.table}
        self.assertEqual(table, {("prefill", 1, 8192, None, 16, 16, 128, 128),
                                 ("prefill", 1, 8192, None, 64, 64, 128, 128),
                                 ("prefill", 3, None, (17, 0, 16), 2, 4, 128, 128),
                                 ("prefill", 8, 2048, None, 16, 16, 128, 128),
                                 ("prefill", 3, None, (1024, 0, 31), 2, 2, 128, 128),
                                 ("prefill", 1, 32768, None, 8, 8, 128, 128),
                                 ("decode", 128, 1, None, 32, 32, 128, 128),
                                 ("decode", 32, 1, None, 32, 32, 128, 128),
                                 ("decode", 512, 1, None, 16, 16, 128, 128)})   # issue 17's rows
        for s in shs:
            self.assertTrue(s.initial_state)
            self.assertEqual(s.lower_bound, -5.0)
            self.assertEqual(sets.shape_from_dict(s.to_dict()).id, s.id)
        self.assertEqual({s.gate for s in shs}, {"sigmoid", "log"})
        self.assertNotIn("kda", {s.kind for s in sets.load("all")})  # a separate step of bench/run.sh

    def test_work(self):
        s = sets.KdaShape(n=1, t=8192, h=16, dk=128, gate="log", initial_state=True)
        st = 16 * 128 * 128 * 4
        want = 2 * 8192 * 16 * 128 * 2 * 2 + 8192 * 16 * 128 * 4 + 8192 * 16 * 4 + 2 * st
        self.assertEqual(s.bytes_moved(), want)
        self.assertEqual(s.tokens, 8192)
        self.assertEqual(s.mode, "prefill")
        d = sets.KdaShape(n=128, t=1, h=32, initial_state=False)
        self.assertEqual(d.mode, "decode")
        p = sets.KdaShape(lens=[17, 0, 16], h=2, hv=4)
        self.assertEqual((p.tokens, p.n, p.max_len), (33, 3, 17))
        with self.assertRaises(ValueError):
            sets.KdaShape(n=1, t=8, h=3, hv=4)


def kda_fixture():
    """A hand-written SYNTHETIC results dict with one KDA shape."""
    sh = sets.KdaShape(n=1, t=8192, h=16, dk=128, table=True, set="kda")
    ok = lambda name, label, role, ms: {"name": name, "label": label, "role": role, "status": "ok",  # noqa: E731
                                        "message": None, "rel_err": 1e-3, "state_err": 1e-4, "variant": "v1",
                                        "rounds": [[ms] * 10, [ms] * 10]}
    return sh, {
        "schema": report.SCHEMA, "synthetic": True, "started": "2000-01-01 00:00 UTC", "command": "synthetic",
        "env": {"gpu": {"name": "Synthetic GPU"}}, "config": {"rounds": 2, "samples_per_round": 10},
        "ceilings": {"copy": {"bytes": 2 * 2 ** 30, "samples_ms": [0.5] * 5}},
        "shapes": [{"shape": sh.to_dict(), "control": {"of": "kforge-default", "duplicate": "kforge-default#2"},
                    "contenders": [
                        {"name": "kforge-tuned", "label": "kforge tuned", "role": "kforge", "status": "unsupported",
                         "message": "no tuning database at 'x'", "rounds": []},
                        ok("kforge-default", "kforge default", "kforge", 1.0),
                        ok("kforge-default#2", "kforge default (control)", "control", 1.0),
                        ok("torch-chunked", "torch chunked (C64, fp32)", "peer", 4.0),
                        {"name": "torch-naive", "label": "torch token recurrence (fp32 state)", "role": "peer",
                         "status": "skipped", "message": "8192 serial token steps > 256", "rounds": []}]}]}


class TestKdaMarkdown(unittest.TestCase):
    def test_kda_row(self):
        sh, res = kda_fixture()
        ceil, shapes = report.analyze(res)
        r = {x["name"]: x for x in shapes[0]["rows"]}
        self.assertAlmostEqual(r["kforge-default"]["tokens_per_s"], 8192 / 1e-3)
        self.assertAlmostEqual(r["kforge-default"]["bytes_per_s"], sh.bytes_moved() / 1e-3)
        self.assertAlmostEqual(r["kforge-default"]["pct_ceiling"], 100 * (sh.bytes_moved() / 1e-3) / (2 ** 31 / 0.5e-3))
        self.assertEqual(r["kforge-default"]["verdict"], "win")
        self.assertEqual(r["torch-chunked"]["verdict"], "best peer")
        md = report.markdown(res)
        self.assertIn("| KDA shape | contender | median ms | tokens/s | moved/s | % copy ceiling | time / best peer "
                      "| verdict |", md)
        self.assertNotIn("| shape | contender | median ms | throughput |", md)  # no empty GQA table
        self.assertIn("- KDA: every contender's o and final state checked first", md)
        rows = [line for line in md.splitlines() if line.startswith("| ")]
        head = f"{sh.label} · {report.fmt_bytes(sh.bytes_moved())} moved (band ±1.0%)"
        self.assertTrue(rows[2].startswith(f"| {head} | kforge tuned |"), rows[2])
        cells = {c[1]: c for c in ([x.strip() for x in line.strip()[1:-1].split(" | ")] for line in rows[2:])}
        mb = sh.bytes_moved() / 1e-3 / 1e12
        self.assertEqual(cells["kforge default"][2:],
                         ["1.000", "8.19 M tok/s", f"{mb:.2f} TB/s",
                          f"{100 * (sh.bytes_moved() / 1e-3) / (2 ** 31 / 0.5e-3):.0f}%", "0.250", "win"])
        self.assertEqual(cells["torch token recurrence (fp32 state)"][7], "skipped: 8192 serial token steps > 256")
        self.assertEqual(cells["kforge tuned"][7], "unsupported: no tuning database at 'x'")
        self.assertNotIn("kforge tuned vs the best peer", md)  # kforge tuned did not run

    def test_mixed_run_keeps_the_gqa_table(self):
        sh, res = kda_fixture()
        fx = report.load(os.path.join(HERE, "fixtures", "synthetic_run.json"))
        res["shapes"] = fx["shapes"] + res["shapes"]
        md = report.markdown(res)
        i, j = md.index("| shape | contender |"), md.index("| KDA shape | contender |")
        self.assertLess(i, j)
        self.assertIn("| decode B32 32/8 D128 Sq1 Skv8K (band ±1.0%) | kforge tuned |", md[i:j])


@unittest.skipIf(torch is None, NO_TORCH)
class TestKdaDryRun(unittest.TestCase):
    """The whole pipeline on the CPU for the small KDA shapes (host-clock timings)."""

    def test_dry_run(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
            env["KFORGE_DB"] = os.path.join(d, "none.db")
            cmd = [sys.executable, "-m", "bench", "run", "--set", "kda", "--shapes", "lens17", "--dry-run-cpu",
                   "--rounds", "2", "--samples", "3", "--warmup", "1", "--out", d, "--no-append", "--no-plots"]
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            with open(os.path.join(d, "results.json")) as f:
                res = json.load(f)
            self.assertEqual(len(res["shapes"]), 2)
            for e in res["shapes"]:
                self.assertEqual(e["reference"]["dtype"], "float64")
                st = {c["name"]: c for c in e["contenders"]}
                for name in ("torch-chunked", "torch-naive"):
                    self.assertEqual(st[name]["status"], "ok", st[name])
                    self.assertLess(st[name]["rel_err"], 1e-2)
                    self.assertLess(st[name]["state_err"], 5e-3)
                    self.assertEqual([len(r) for r in st[name]["rounds"]], [3, 3])
                for name in ("kforge-tuned", "kforge-default", "kforge-default#2", "torch-chunked-graph"):
                    self.assertEqual(st[name]["status"], "unsupported", st[name])
                    self.assertTrue(st[name]["message"])
            with open(os.path.join(d, "results.md")) as f:
                md = f.read()
            self.assertIn("| KDA shape | contender |", md)
            self.assertIn("| KDA prefill N3 lens [17, 0, 16] H2/HV4 K128 V128 sigmoid gate lb -5 l2norm h0 · ", md)

    def test_naive_skipped_above_the_limit(self):
        from bench import harness
        sh = sets.KdaShape(n=1, t=harness.KDA_NAIVE_MAX_STEPS + 1, h=1, dk=16)
        case = harness.KdaCase(sh, torch.device("cpu"), 1)
        c = harness.KdaTorchContender("torch-naive", "naive", "naive")
        with self.assertRaises(harness.Skipped):
            c.setup(case)


if __name__ == "__main__":
    unittest.main()
