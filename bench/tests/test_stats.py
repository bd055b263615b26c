"""Harness statistics on recorded samples (pure Python)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench import stats  # noqa: E402


class TestStats(unittest.TestCase):
    def test_median(self):
        self.assertEqual(stats.median([3, 1, 2]), 2)
        self.assertEqual(stats.median([4, 1, 3, 2]), 2.5)
        self.assertIsNone(stats.median([]))
        self.assertEqual(stats.median([1.0, float("nan"), 3.0, None]), 2.0)  # non-finite dropped

    def test_quantile_and_spread(self):
        xs = [1.0, 2.0, 3.0, 4.0, 5.0]
        self.assertEqual(stats.quantile(xs, 0.0), 1.0)
        self.assertEqual(stats.quantile(xs, 1.0), 5.0)
        self.assertEqual(stats.quantile(xs, 0.25), 2.0)
        self.assertAlmostEqual(stats.quantile([1.0, 2.0], 0.5), 1.5)
        s = stats.summary([0.250, 0.251, 0.249, 0.252, 0.250, 0.248])
        self.assertEqual(s["n"], 6)
        self.assertAlmostEqual(s["median"], 0.250)
        self.assertAlmostEqual(s["min"], 0.248)
        self.assertAlmostEqual(s["max"], 0.252)
        self.assertAlmostEqual(s["q25"], 0.24925)
        self.assertAlmostEqual(s["q75"], 0.25075)
        self.assertAlmostEqual(s["rel_iqr"], 0.0015 / 0.250)
        self.assertIsNone(stats.summary([])["median"])
        with self.assertRaises(ValueError):
            stats.quantile(xs, 1.5)

    def test_control_band(self):
        a = [1.000, 1.001, 0.999, 1.002, 1.000, 0.998]
        b = [1.020, 1.021, 1.019, 1.022, 1.020, 1.018]
        self.assertAlmostEqual(stats.control_band(a, b), 0.02)
        self.assertAlmostEqual(stats.control_band(b, a), 1 - 1 / 1.02)
        # identical timings: the floor
        self.assertEqual(stats.control_band(a, list(a)), stats.DEFAULT_BAND_FLOOR)
        self.assertEqual(stats.control_band(a, list(a), floor=0.005), 0.005)
        self.assertIsNone(stats.control_band([], a))

    def test_verdicts(self):
        band = 0.02
        self.assertEqual(stats.verdict(0.97, band), "win")
        self.assertEqual(stats.verdict(0.985, band), "tie")
        self.assertEqual(stats.verdict(1.0, band), "tie")
        self.assertEqual(stats.verdict(1.019, band), "tie")
        self.assertEqual(stats.verdict(1.03, band), "loss")
        self.assertIsNone(stats.verdict(None, band))
        self.assertIsNone(stats.verdict(1.0, None))

    def test_ratio_and_flatten(self):
        self.assertEqual(stats.ratio(1.0, 2.0), 0.5)
        self.assertIsNone(stats.ratio(1.0, 0))
        self.assertIsNone(stats.ratio(None, 1.0))
        self.assertEqual(stats.flatten([[1, 2], [3]]), [1, 2, 3])
        self.assertEqual(stats.flatten(None), [])


if __name__ == "__main__":
    unittest.main()
