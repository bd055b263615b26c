"""Sustained timing helpers of the harness (bench/stats.py, bench/env.py), pure Python: the
rotation count and burst size (the tuner's rules), clocks unknown without NVML, the clock
summary; and, with torch, the sustained timer end to end on the CPU (host-clock events)."""
import os
import subprocess
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from bench import env, stats  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


class TestSustainedHelpers(unittest.TestCase):
    def test_rotate_sets_exceed_twice_l2(self):
        l2 = 60e6
        self.assertEqual(stats.rotate_sets(16e6, l2), 8)      # as tests/cpu/test_tune.c
        self.assertGreaterEqual(stats.rotate_sets(16e6, l2) * 16e6, 2 * l2)
        self.assertEqual(stats.rotate_sets(120e6, l2), 1)
        self.assertEqual(stats.rotate_sets(1e3, l2), stats.MAX_SETS)
        self.assertEqual(stats.rotate_sets(16e6, 0), 1)
        self.assertEqual(stats.rotate_sets(0, l2), 1)

    def test_burst_calls_and_per_call(self):
        self.assertEqual(stats.burst_calls(0.25, 1.0), 4)
        self.assertEqual(stats.burst_calls(1.3, 1.0), 2)       # at least two calls
        self.assertEqual(stats.burst_calls(0.0, 1.0), 2)
        self.assertEqual(stats.burst_calls(1e-6, 1.0), 100000)
        self.assertEqual(stats.per_call([4.0, 8.0], 4), [1.0, 2.0])

    def test_nvml_absent_is_unknown(self):
        old = os.environ.get("KFORGE_NVML_LIB")
        os.environ["KFORGE_NVML_LIB"] = "/nonexistent/libnvidia-ml.so.1"
        try:
            nv = env.Nvml("GPU-00000000-0000-0000-0000-000000000000")
        finally:
            if old is None:
                del os.environ["KFORGE_NVML_LIB"]
            else:
                os.environ["KFORGE_NVML_LIB"] = old
        self.assertFalse(nv.ok)
        self.assertIsNone(nv.read())
        self.assertIn("/nonexistent/libnvidia-ml.so.1", nv.why)
        s = env.ClockSampler(nv).start().stop()
        self.assertEqual(s["readings"], 0)
        for k in ("sm_mhz_mean", "sm_mhz_min", "power_w_mean", "power_w_max", "temp_c_max"):
            self.assertIsNone(s[k])

    def test_clock_summary(self):
        s = env.clock_summary([(1700.0, 690.0, 60.0), (1980.0, 400.0, 55.0), (None, 500.0, None)])
        self.assertEqual(s["sm_mhz_min"], 1700.0)
        self.assertEqual(s["sm_mhz_mean"], 1840.0)
        self.assertAlmostEqual(s["power_w_mean"], 530.0)
        self.assertEqual(s["power_w_max"], 690.0)
        self.assertEqual(s["temp_c_max"], 60.0)
        self.assertEqual(s["readings"], 3)

    def test_cli_offers_timing(self):
        p = subprocess.run([sys.executable, "-c", "import sys; sys.argv=['bench','run','--help'];"
                            "from bench import cli; cli.main()"], cwd=REPO, capture_output=True, text=True)
        if "No module named 'torch'" in p.stderr:
            self.skipTest("bench's CLI imports torch")
        self.assertIn("--timing", p.stdout + p.stderr)


@unittest.skipUnless(HAVE_TORCH, "skipped: torch not installed (the sustained timer's CPU run needs torch)")
class TestSustainedTimerOnCpu(unittest.TestCase):
    def test_timer_rotates_and_divides(self):
        from bench import harness
        harness._DRY = True
        calls = []
        fns = [lambda i=i: calls.append(i) for i in range(3)]
        fns[0].rotation = fns
        t = harness.SustainedTimer(None, burst_ms=1.0, warm_ms=1.0)
        evs = t.time(fns[0], 4)
        ms = harness._elapsed(evs)
        self.assertEqual(len(ms), 4)
        self.assertEqual(evs[0], "sustained")
        self.assertEqual(evs[3], 3)                       # sets
        self.assertEqual(set(calls), {0, 1, 2})            # every set used
        self.assertGreaterEqual(t.warmups, 1)

    def test_graph_of_calls_counts_each_call(self):
        """A callable standing for a graph of 8 calls (fn.calls, as _kda_graph_all makes them) is counted 8
        times a replay, so a sample is the burst's time over the calls inside the graphs, and the sets reported
        are the input sets the graphs rotate over (fn.sets), not the graphs."""
        from bench import harness
        harness._DRY = True
        replays = []
        fns = [lambda i=i: replays.append(i) for i in range(2)]
        for f in fns:
            f.calls = 8
        fns[0].rotation, fns[0].sets = fns, 16
        t = harness.SustainedTimer(None, burst_ms=1.0, warm_ms=1.0)
        from unittest import mock
        with mock.patch.object(harness.statsmod, "burst_calls", lambda *a, **k: 5):
            evs = t.time(fns[0], 3)
        self.assertEqual(evs[2], 40)                      # calls a sample: 5 replays x 8
        self.assertEqual(evs[3], 16)
        self.assertEqual(len(harness._elapsed(evs)), 3)
        ev = harness.Timer.__new__(harness.Timer)
        ev.flush, ev.cushion, ev._sleep, ev._n = None, 0, None, 0
        ev.before = lambda: None
        out = ev.time(fns[0], 2)
        self.assertEqual((out[0], out[2], len(out[1])), ("per", 8, 2))


if __name__ == "__main__":
    unittest.main()
