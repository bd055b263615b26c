"""Sliding-window rows (issue 21): the shape's work against brute force, its id, label and round
trip, the gqa-window set; with torch (CPU is enough): the SDPA mask and flex's mask_mod against
the brute-force visibility, masked SDPA against the windowed reference, and the contenders that
refuse (the mask over its budget, the flash backend) skipped with their reasons."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench import sets  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def brute_pairs(sq, skv, w):
    """Query-key pairs one head computes: key j visible to query i when j <= i + skv - sq (causal,
    bottom-right) and j >= i + skv - sq - w (the window)."""
    off = skv - sq
    return sum(1 for i in range(sq) for j in range(skv) if i + off - w <= j <= i + off)


def brute_keys_read(sq, skv, w):
    off = skv - sq
    return len({j for i in range(sq) for j in range(skv) if i + off - w <= j <= i + off})


CASES = [(1, 1, 0), (1, 100, 10), (4, 100, 10), (40, 40, 5), (40, 40, 39), (40, 40, 100), (33, 70, 0),
         (16, 16, 3), (20, 8, 2), (20, 8, 50), (64, 200, 64), (7, 7, 6)]


class TestWindowShape(unittest.TestCase):
    def test_window__flops_count_the_visible_pairs(self):
        for sq, skv, w in CASES:
            s = sets.Shape("prefill" if sq > 16 else "decode", 2, 8, 2, 64, sq, skv, causal=True, window=w)
            self.assertEqual(s.visible_pairs(), brute_pairs(sq, skv, w), (sq, skv, w))
            self.assertEqual(s.flops(), 4.0 * 2 * 8 * 64 * brute_pairs(sq, skv, w), (sq, skv, w))

    def test_window__kv_bytes_count_the_keys_read(self):
        for sq, skv, w in CASES:
            s = sets.Shape("decode", 2, 8, 2, 64, sq, skv, causal=True, window=w)
            self.assertEqual(s.kv_bytes(), 2 * 2 * brute_keys_read(sq, skv, w) * 2 * 64 * 2, (sq, skv, w))

    def test_window__32k_row(self):
        s = sets.Shape("prefill", 1, 32, 8, 128, 32768, 32768, causal=True, window=4096)
        pairs = 4097 * 4098 // 2 + (32768 - 4097) * 4097  # rows 0..4096 see i + 1 keys, the rest 4097
        self.assertEqual(s.visible_pairs(), pairs)
        self.assertEqual(s.flops(), 4.0 * 32 * 128 * pairs)

    def test_window__dense_figures_unchanged(self):
        s = sets.Shape("prefill", 1, 32, 8, 128, 16384, 16384, causal=True)
        self.assertEqual(s.flops(), 2.0 ** 41)  # causal counts half, as design.md's table
        s = sets.Shape("decode", 32, 32, 8, 128, 1, 32768)
        self.assertEqual(s.kv_bytes(), 2 * 32 * 32768 * 8 * 128 * 2)
        self.assertIsNone(s.window)
        self.assertNotIn("-w", s.id)

    def test_window__id_label_round_trip(self):
        s = sets.Shape("prefill", 1, 32, 8, 128, 32768, 32768, causal=True, window=4096)
        self.assertEqual(s.id, "prefill-b1-h32x8-d128-q32K-kv32K-causal-w4096-bf16")
        self.assertEqual(s.label, "prefill causal win4096 B1 32/8 D128 S32K")
        d = s.to_dict()
        self.assertEqual(d["window"], 4096)
        t = sets.shape_from_dict(d)
        self.assertEqual((t.id, t.window, t.flops()), (s.id, 4096, s.flops()))
        d.pop("window")  # a results JSON from before windows: dense
        self.assertIsNone(sets.Shape.from_dict(d).window)
        s = sets.Shape("decode", 32, 32, 8, 128, 1, 32768, causal=True, window=4096)
        self.assertEqual(s.label, "decode causal win4096 B32 32/8 D128 Sq1 Skv32K")

    def test_window__refuses_bad_values(self):
        for w in (-1, True, 1.5, "4K"):
            with self.assertRaises(ValueError):
                sets.Shape("prefill", 1, 8, 2, 64, 128, 128, causal=True, window=w)
        with self.assertRaises(ValueError):  # a window is a left window of causal attention
            sets.Shape("prefill", 1, 8, 2, 64, 128, 128, causal=False, window=16)

    def test_window__set_loads(self):
        shs = sets.load("gqa-window")
        self.assertEqual([(s.kind, s.b, s.hq, s.hkv, s.d, s.sq, s.skv, s.window) for s in shs],
                         [("prefill", 1, 32, 8, 128, 32768, 32768, 4096),
                          ("prefill", 1, 32, 8, 128, 8192, 8192, 4096),
                          ("prefill", 1, 32, 8, 128, 16384, 16384, 4096),
                          ("prefill", 1, 16, 8, 256, 8192, 8192, 4096),
                          ("prefill", 1, 64, 8, 64, 8192, 8192, 128),
                          ("decode", 32, 32, 8, 128, 1, 32768, 4096)])
        self.assertTrue(all(s.causal and s.table and s.dtype == "bf16" for s in shs))
        self.assertEqual(len({s.id for s in shs}), len(shs))
        self.assertNotIn("gqa-window", [s.set for s in sets.load("all")])  # not in the default run


def _case(shape):
    from bench.harness import Case
    return Case(shape, torch.device("cpu"), 5)


@unittest.skipIf(torch is None, "skipped: torch not installed (the window mask and SDPA are checked where torch is)")
class TestWindowTorch(unittest.TestCase):
    def test_window__sdpa_mask_is_the_visibility(self):
        from bench.harness import window_mask
        for sq, skv, w in CASES:
            s = sets.Shape("prefill", 1, 8, 2, 64, sq, skv, causal=True, window=w)
            m = window_mask(s, torch.bfloat16, torch.device("cpu"))
            self.assertEqual(tuple(m.shape), (1, 1, sq, skv))
            self.assertEqual(m.dtype, torch.bfloat16)
            vis = m[0, 0] == 0
            self.assertTrue(bool(((m[0, 0] == 0) | (m[0, 0] == float("-inf"))).all()))
            self.assertEqual(int(vis.sum()), brute_pairs(sq, skv, w), (sq, skv, w))
            off = skv - sq
            for i in range(sq):
                row = [j for j in range(skv) if bool(vis[i, j])]
                self.assertEqual(row, [j for j in range(skv) if i + off - w <= j <= i + off], (sq, skv, w, i))

    def test_window__flex_mask_mod_is_the_visibility(self):
        from bench.harness import flex_mask_mod, window_mask
        for sq, skv, w in CASES:
            s = sets.Shape("prefill", 1, 8, 2, 64, sq, skv, causal=True, window=w)
            qi = torch.arange(sq)[:, None]
            kj = torch.arange(skv)[None, :]
            got = flex_mask_mod(s)(0, 0, qi, kj)
            self.assertTrue(torch.equal(got, window_mask(s, torch.float32, torch.device("cpu"))[0, 0] == 0))

    def test_window__masked_sdpa_matches_the_windowed_reference(self):
        from torch.nn.attention import SDPBackend
        from bench.harness import SdpaContender, reference, rel_err
        for sq, skv, w in [(48, 48, 7), (4, 96, 16), (1, 64, 9)]:
            s = sets.Shape("prefill" if sq > 16 else "decode", 2, 8, 2, 32, sq, skv, causal=True, window=w)
            case = _case(s)
            ref = reference(case.q, case.k, case.v, True, out_dtype=torch.float64, window=w)
            dense = reference(case.q, case.k, case.v, True, out_dtype=torch.float64)
            out = SdpaContender("sdpa-math", "SDPA math", SDPBackend.MATH).setup(case)()
            self.assertLess(rel_err(out, ref), 1e-2, (sq, skv, w))
            self.assertGreater(rel_err(out, dense), 5e-2, (sq, skv, w))  # not run dense

    def test_window__mask_over_budget_is_skipped(self):
        from torch.nn.attention import SDPBackend
        from bench.harness import MASK_BUDGET_BYTES, SdpaContender, Skipped, window_mask
        s = sets.Shape("prefill", 1, 8, 2, 32, 64, 64, causal=True, window=8)
        c = SdpaContender("sdpa-math", "SDPA math", SDPBackend.MATH, mask_budget=64 * 64 * 2 - 1)
        with self.assertRaises(Skipped) as cm:
            c.setup(_case(s))
        self.assertIn("[64, 64] bfloat16 window mask", str(cm.exception))
        self.assertIn("mask budget", str(cm.exception))
        big = sets.Shape("prefill", 1, 8, 2, 32, 65536, 65536, causal=True, window=4096)  # 8 GiB of bf16
        with self.assertRaises(Skipped):  # refused before any allocation
            window_mask(big, torch.bfloat16, torch.device("cpu"))
        s32k = sets.Shape("prefill", 1, 8, 2, 32, 32768, 32768, causal=True, window=4096)
        self.assertLessEqual(s32k.sq * s32k.skv * 2, MASK_BUDGET_BYTES)  # the set's 32K row fits

    def test_window__flash_is_skipped_not_run_dense(self):
        from torch.nn.attention import SDPBackend
        from bench.harness import SdpaContender, Skipped
        s = sets.Shape("prefill", 1, 8, 2, 32, 64, 64, causal=True, window=8)
        with self.assertRaises(Skipped) as cm:
            SdpaContender("sdpa-flash", "SDPA flash", SDPBackend.FLASH_ATTENTION).setup(_case(s))
        self.assertIn("takes no attn_mask", str(cm.exception))

    def test_window__mask_shared_by_the_rotation_copies(self):
        from torch.nn.attention import SDPBackend
        from bench.harness import Case, SdpaContender
        s = sets.Shape("prefill", 1, 8, 2, 32, 64, 64, causal=True, window=8)
        c = SdpaContender("sdpa-math", "SDPA math", SDPBackend.MATH)
        c.setup(_case(s))
        m = c._mask[1]
        c.setup(Case(s, torch.device("cpu"), 12))
        self.assertIs(c._mask[1], m)
        c.setup(_case(sets.Shape("prefill", 1, 8, 2, 32, 64, 64, causal=True)))  # a dense row frees it
        self.assertIsNone(c._mask[1])


if __name__ == "__main__":
    unittest.main()
