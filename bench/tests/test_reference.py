"""The harness's fp32 reference against a plain fp64 softmax(QK^T)V on expanded heads, on the
CPU (torch needed, no GPU): GQA ratios that separate "heads per group" from "KV heads",
causal bottom-right alignment with Sq < Skv, the sliding window, chunking over batch and query
rows."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

try:
    import torch
except ImportError:
    torch = None


def naive(q, k, v, causal, window=None):
    B, Sq, Hq, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    q, k, v = (x.to(torch.float64) for x in (q, k, v))
    out = torch.zeros((B, Sq, Hq, D), dtype=torch.float64)
    for h in range(Hq):
        kh = h // G  # native head mapping
        s = torch.einsum("bid,bjd->bij", q[:, :, h], k[:, :, kh]) / math.sqrt(D)
        if causal:
            i = torch.arange(Sq)[:, None]
            j = torch.arange(Skv)[None, :]
            s = s.masked_fill(j > i + Skv - Sq, float("-inf"))
        if window is not None:  # keys p - W .. p of the query at key position p = i + Skv - Sq
            i = torch.arange(Sq)[:, None]
            j = torch.arange(Skv)[None, :]
            s = s.masked_fill(j < i + Skv - Sq - window, float("-inf"))
        p = torch.softmax(s, dim=-1)
        out[:, :, h] = torch.einsum("bij,bjd->bid", p, v[:, :, kh])
    return out


@unittest.skipIf(torch is None, "skipped: torch not installed (the reference is checked where torch is)")
class TestReference(unittest.TestCase):
    def test_against_naive(self):
        from bench.harness import reference, rel_err
        g = torch.Generator().manual_seed(0)
        for (B, Sq, Skv, Hq, Hkv, D, causal) in [(2, 1, 37, 8, 4, 16, False), (2, 4, 50, 8, 2, 32, True),
                                                  (1, 20, 20, 6, 2, 16, True), (3, 5, 64, 64, 8, 8, True),
                                                  (1, 33, 40, 4, 1, 16, False)]:
            q = torch.randn((B, Sq, Hq, D), generator=g).to(torch.bfloat16)
            k = torch.randn((B, Skv, Hkv, D), generator=g).to(torch.bfloat16)
            v = torch.randn((B, Skv, Hkv, D), generator=g).to(torch.bfloat16)
            want = naive(q, k, v, causal)
            for budget in (1 << 28, 97):  # one chunk, and many small chunks
                got = reference(q, k, v, causal, out_dtype=torch.float32, budget_elems=budget)
                self.assertLess(rel_err(got, want), 1e-6, (B, Sq, Skv, Hq, Hkv, D, causal, budget))
                got = reference(q, k, v, causal, out_dtype=torch.float64, budget_elems=budget)
                self.assertLess(rel_err(got, want), 1e-12)

    def test_window_against_naive(self):
        from bench.harness import reference, rel_err
        g = torch.Generator().manual_seed(1)
        for (B, Sq, Skv, Hq, Hkv, D, W) in [(1, 40, 40, 8, 2, 16, 5), (2, 4, 50, 8, 4, 16, 7),
                                             (1, 33, 70, 6, 2, 8, 0), (1, 20, 20, 4, 1, 16, 30)]:
            q = torch.randn((B, Sq, Hq, D), generator=g).to(torch.bfloat16)
            k = torch.randn((B, Skv, Hkv, D), generator=g).to(torch.bfloat16)
            v = torch.randn((B, Skv, Hkv, D), generator=g).to(torch.bfloat16)
            want = naive(q, k, v, True, window=W)
            if W + 1 < Skv:  # the window hides keys of the last row: plain causal would not pass
                self.assertGreater(rel_err(naive(q, k, v, True), want), 1e-2)
            else:  # a window as wide as the keys is plain causal
                self.assertLess(rel_err(naive(q, k, v, True), want), 1e-12)
            for budget in (1 << 28, 97):
                got = reference(q, k, v, True, out_dtype=torch.float64, budget_elems=budget, window=W)
                self.assertLess(rel_err(got, want), 1e-12, (B, Sq, Skv, Hq, Hkv, D, W, budget))
        with self.assertRaises(ValueError):
            reference(q, k, v, False, window=4)

    def test_rel_err_nan(self):
        from bench.harness import rel_err
        a = torch.ones(4)
        b = a.clone()
        b[1] = float("nan")
        self.assertEqual(rel_err(b, a), float("inf"))
        self.assertEqual(rel_err(a, a), 0.0)


if __name__ == "__main__":
    unittest.main()
