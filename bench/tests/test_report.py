"""The markdown writer (and the analysis under it) on the recorded, hand-written SYNTHETIC
fixture bench/tests/fixtures/synthetic_run.json; the sets; the plots when matplotlib is
present. No torch, no GPU."""
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

FIXTURE = os.path.join(HERE, "fixtures", "synthetic_run.json")


def rows_by_shape(md):
    """{shape label: {contender label: [cells]}} from the markdown table."""
    out, cur = {}, None
    for line in md.splitlines():
        if not line.startswith("| ") or line.startswith("| shape") or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip()[1:-1].split(" | ")]
        if cells[0]:
            cur = cells[0].split(" (band")[0]
            out.setdefault(cur, {})
        out[cur][cells[1]] = cells
    return out


class TestFixture(unittest.TestCase):
    def test_fixture_is_labelled_synthetic(self):
        res = report.load(FIXTURE)
        self.assertTrue(res["synthetic"])
        self.assertIn("SYNTHETIC", res["note"])

    def test_ceilings(self):
        c = report.ceilings(report.load(FIXTURE))
        self.assertAlmostEqual(c["copy"], 2147483648 / 0.5e-3)
        self.assertAlmostEqual(c["gemm"], 2 * 8192 ** 3 / 1.6e-3)

    def test_analysis(self):
        ceil, shapes = report.analyze(report.load(FIXTURE))
        a = shapes[0]
        self.assertAlmostEqual(a["band"], 0.01)  # control ratio 0.262 / 0.2605 is under the floor
        self.assertAlmostEqual(a["control_ratio"], 0.262 / 0.2605)
        self.assertEqual(a["best_peer"], "sdpa-cudnn")
        r = {x["name"]: x for x in a["rows"]}
        self.assertAlmostEqual(r["kforge-tuned"]["median_ms"], 0.250)
        self.assertAlmostEqual(r["kforge-tuned"]["ratio_best_peer"], 0.250 / 0.270)
        self.assertEqual(r["kforge-tuned"]["verdict"], "win")
        self.assertAlmostEqual(r["kforge-tuned"]["throughput"], 2 * 32 * 8192 * 8 * 128 * 2 / 0.25e-3)
        self.assertAlmostEqual(r["kforge-tuned"]["pct_ceiling"], 100.0 * (2 ** 30 / 0.25e-3) / (2 ** 31 / 0.5e-3))
        self.assertIsNone(r["flex"]["median_ms"])
        b = shapes[1]
        self.assertAlmostEqual(b["band"], 0.02)
        self.assertEqual({x["name"]: x["verdict"] for x in b["rows"]},
                         {"kforge-tuned": "tie", "kforge-default": "tie", "kforge-default#2": "loss",
                          "sdpa-cudnn": "best peer", "sdpa-flash": "loss", "flex": "loss"})
        c = shapes[2]
        r = {x["name"]: x for x in c["rows"]}
        self.assertAlmostEqual(r["kforge-tuned"]["throughput"], 2.0 ** 41 / 4.4e-3)  # causal counts half
        self.assertEqual(r["kforge-tuned"]["verdict"], "loss")
        self.assertEqual(shapes[3]["error"], "OutOfMemoryError: synthetic")

    def test_band_counts_every_row_of_the_controls_variant(self):
        res = report.load(FIXTURE)
        e = json.loads(json.dumps(res["shapes"][2]))          # tuned, default and control: one variant
        for c in e["contenders"]:
            if c["name"] == "kforge-tuned":
                c["rounds"] = [[4.62, 4.62], [4.62, 4.62]]     # 5% slower than the default, the same variant
        a = report.analyze_shape(e, report.ceilings(res))
        dflt = {r["name"]: r for r in a["rows"]}["kforge-default"]["median_ms"]
        self.assertAlmostEqual(a["band"], 4.62 / dflt - 1)
        for c in e["contenders"]:
            if c["name"] == "kforge-tuned":
                c["variant"] = "attn_prefill.other"            # another variant: not a control
        self.assertAlmostEqual(report.analyze_shape(e, report.ceilings(res))["band"], 0.01)

    def test_markdown(self):
        md = report.markdown(report.load(FIXTURE), json_path="bench/tests/fixtures/synthetic_run.json")
        self.assertTrue(md.startswith("## 2000-01-01 00:00 UTC · Synthetic GPU · driver 0.0.0-synthetic · "
                                      "kforge 0.1.0 @ 000000000000\n"))
        self.assertIn("> **SYNTHETIC** — hand-written test data, not a measurement.", md)
        self.assertIn("- command: `python -m bench run --set synthetic-fixture`", md)
        self.assertIn("device copy 4.29 TB/s (read+write, 1 GiB copied), bf16 GEMM 687 TFLOP/s (8192³)", md)
        self.assertIn("| shape | contender | median ms | throughput | % ceiling | time / best peer | verdict |", md)
        t = rows_by_shape(md)
        self.assertEqual(list(t), ["decode B32 32/8 D128 Sq1 Skv8K", "decode B32 32/8 D128 Sq1 Skv32K",
                                   "prefill causal B1 32/8 D128 S16K", "prefill causal B1 32/8 D256 S4K"])
        d8 = t["decode B32 32/8 D128 Sq1 Skv8K"]
        self.assertEqual(d8["kforge tuned"][2:], ["0.2500", "4.29 TB/s", "100%", "0.926", "win"])
        self.assertEqual(d8["kforge default (control)"][6], "control (band ±1.0%)")
        self.assertEqual(d8["SDPA cuDNN"][2:], ["0.2700", "3.98 TB/s", "93%", "1.000", "best peer"])
        self.assertEqual(d8["flex_attention (compiled)"][6],
                         "unsupported: NotImplementedError: synthetic \\| refusal")
        self.assertEqual(t["decode B32 32/8 D128 Sq1 Skv32K"]["kforge tuned"][6], "tie")
        pf = t["prefill causal B1 32/8 D128 S16K"]
        self.assertEqual(pf["kforge tuned (= default variant)"][2:],
                         ["4.400", "500 TFLOP/s", "73%", "1.143", "loss"])
        self.assertEqual(pf["SDPA cuDNN"][3], "571 TFLOP/s")
        self.assertTrue(pf["flex_attention (compiled)"][6].startswith("**wrong** (rel err 3.40e-02), not timed"))
        self.assertEqual(t["prefill causal B1 32/8 D256 S4K"]["—"][6], "error: OutOfMemoryError: synthetic")
        self.assertIn("kforge tuned vs the best peer: 1 win, 1 tie, 1 loss", md)
        self.assertIn("| decode B32 32/8 D128 Sq1 Skv8K (band ±1.0%) | kforge tuned |", md)

    def test_burst_legend_and_no_clock_columns(self):
        """The fixture is a burst run (no timing_mode, no clocks): L2 flushed, the old columns."""
        md = report.markdown(report.load(FIXTURE))
        self.assertIn("L2 flushed (128 MiB write) before each sample", md)
        self.assertNotIn("sustained", md)
        self.assertNotIn("SM MHz", md)

    def test_sustained_legend_and_clocks_per_contender(self):
        """A sustained run: the legend says back to back over rotating inputs, not L2 flushed, and
        every contender's SM clock and power (mean over its rounds, min / max) are in the table."""
        res = report.load(FIXTURE)
        res["config"]["timing_mode"] = "sustained"
        for sh in res["shapes"]:
            for k, c in enumerate(sh["contenders"]):
                c["calls"], c["sets"] = 4, 3
                c["clocks"] = [{"sm_mhz_mean": 1700.0 + k, "sm_mhz_min": 1695.0, "power_w_mean": 680.0,
                                "power_w_max": 699.0, "temp_c_max": 61.0, "readings": 12},
                               {"sm_mhz_mean": 1720.0 + k, "sm_mhz_min": 1700.0, "power_w_mean": 690.0,
                                "power_w_max": 695.0, "temp_c_max": 62.0, "readings": 12}]
        res["shapes"][0]["contenders"][1]["clocks"] = [None, None]   # NVML gave nothing for this one
        md = report.markdown(res)
        method = next(line for line in md.splitlines() if line.startswith("- method:"))
        self.assertIn("sustained", method)
        self.assertIn("back-to-back calls over rotating input copies", method)
        self.assertNotIn("L2 flushed", method)
        self.assertIn("| shape | contender | median ms | throughput | % ceiling | SM MHz | power W | time / best peer |"
                      " verdict |", md)
        t = rows_by_shape(md)
        d8 = t["decode B32 32/8 D128 Sq1 Skv8K"]
        self.assertEqual(d8["kforge tuned"][2:], ["0.2500", "4.29 TB/s", "100%", "1710 (min 1695)", "685 (max 699)",
                                                  "0.926", "win"])
        second = res["shapes"][0]["contenders"][1]["label"]
        self.assertEqual(d8[second][5:7], ["—", "—"])
        ceil, shapes = report.analyze(res)
        r = shapes[0]["rows"][0]
        self.assertEqual((r["sm_mhz"], r["sm_mhz_min"], r["power_w"], r["power_w_max"], r["temp_c_max"]),
                         (1710.0, 1695.0, 685.0, 699.0, 62.0))
        self.assertEqual((r["calls"], r["sets"]), (4, 3))

    def test_cli_markdown_from(self):
        with tempfile.TemporaryDirectory() as d:
            md_path = os.path.join(d, "RESULTS.md")
            with open(md_path, "w") as f:
                f.write("# header\n")
            p = subprocess.run([sys.executable, "-m", "bench", "--markdown-from", FIXTURE, "--append-to", md_path],
                               cwd=REPO, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("| decode B32 32/8 D128 Sq1 Skv8K (band ±1.0%) | kforge tuned | 0.2500 |", p.stdout)
            with open(md_path) as f:
                text = f.read()
            self.assertTrue(text.startswith("# header\n\n## 2000-01-01"))
            self.assertIn(p.stdout, text)

    def test_schema_refused(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"schema": "other"}, f)
        try:
            with self.assertRaises(ValueError):
                report.load(f.name)
        finally:
            os.unlink(f.name)

    def test_plots(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("skipped: matplotlib not installed (the plots are checked on the GPU machine)")
        from bench import plots
        with tempfile.TemporaryDirectory() as d:
            paths = plots.plot(report.load(FIXTURE), d)
            self.assertEqual(sorted(os.path.basename(p) for p in paths),
                             ["decode-b32-32-8-d128-sq1.png", "prefill-causal-b1-32-8-d128.png"])
            for p in paths:
                with open(p, "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_plot_series(self):
        from bench import plots
        ceil, ser = plots.series(report.load(FIXTURE))
        kind, pts = ser["decode B32 32/8 D128 Sq1"]
        self.assertEqual(kind, "decode")
        self.assertEqual([x for x, _ in pts], [8192, 32768])
        self.assertNotIn("flex", pts[0][1])
        self.assertIn("flex", pts[1][1])


class TestSets(unittest.TestCase):
    def test_sets(self):
        self.assertEqual(set(sets.available()),
                         {"all", "gqa-decode", "gqa-prefill", "gqa-window", "kda", "prefill-matrix", "tiny"})
        # issue 19's matrix: D x length x heads, causal, Sq = Skv, 16K tokens a call, every shape once
        mat = sets.load("prefill-matrix")
        self.assertEqual(sorted({(s.d, s.sq, s.hq, s.hkv) for s in mat}),
                         sorted((d, n, hq, hkv) for d in (64, 128, 256) for n in (2048, 4096, 8192, 16384)
                                for hq, hkv in ((32, 8), (64, 8), (16, 16))))
        self.assertTrue(all(s.causal and s.sq == s.skv and s.b * s.sq == 16384 for s in mat))
        self.assertEqual(len({s.id for s in mat}), 36)
        dec, pre, al = sets.load("gqa-decode"), sets.load("gqa-prefill"), sets.load("all")
        self.assertEqual([s.id for s in al], [s.id for s in dec + pre])
        # the design.md reference rows are all there
        table = {(s.kind, s.b, s.hq, s.hkv, s.d, s.sq, s.skv, s.causal) for s in al if s.table}
        want = {("decode", 1, 32, 8, 128, 1, 131072, False), ("decode", 1, 64, 8, 128, 2, 131072, False),
                ("decode", 32, 32, 8, 128, 1, 8192, False), ("decode", 32, 32, 8, 128, 2, 8192, False),
                ("decode", 32, 32, 8, 128, 4, 8192, False), ("decode", 32, 32, 8, 128, 8, 8192, False),
                ("decode", 8, 8, 1, 128, 4, 32768, False), ("decode", 32, 32, 8, 128, 1, 32768, False),
                ("decode", 128, 32, 8, 128, 1, 8192, False),
                ("prefill", 1, 32, 8, 128, 16384, 16384, True), ("prefill", 1, 32, 8, 256, 4096, 4096, True),
                ("prefill", 1, 32, 8, 64, 8192, 8192, True)}
        self.assertEqual(table, want)
        lens = sorted(s.sq for s in pre if s.series)
        self.assertEqual(lens, [1024, 2048, 4096, 8192, 16384])
        self.assertEqual(len({s.id for s in al}), len(al))
        with self.assertRaises(ValueError):
            sets.load("nope")

    def test_work(self):
        s = sets.Shape("prefill", 1, 32, 8, 128, 16384, 16384, causal=True)
        self.assertEqual(s.flops(), 2.0 ** 41)
        s = sets.Shape("decode", 1, 32, 8, 128, 1, 131072)
        self.assertEqual(s.kv_bytes(), 2 * 131072 * 8 * 128 * 2)
        self.assertEqual(s.label, "decode B1 32/8 D128 Sq1 Skv128K")
        self.assertEqual(sets.parse_len("16K"), 16384)
        self.assertEqual(sets.Shape.from_dict(s.to_dict()).id, s.id)


if __name__ == "__main__":
    unittest.main()
