"""The binding on a GPU (skipped without torch, CUDA or libkforge): kforge.attention against
an fp64 reference, for decode and prefill, strided views, kv_len, lse, and the plan cache."""
import math
import unittest

import _util

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:
    torch, HAVE_CUDA = None, False

import kforge


def ref(q, k, v, causal, kv_len=None):
    B, Sq, Hq, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    qd, kd, vd = (x.double() for x in (q, k, v))
    kd = kd.repeat_interleave(G, dim=2)
    vd = vd.repeat_interleave(G, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", qd, kd) / math.sqrt(D)
    n = torch.full((B,), Skv, device=q.device) if kv_len is None else kv_len.to(q.device)
    j = torch.arange(Skv, device=q.device)
    i = torch.arange(Sq, device=q.device)
    mask = j[None, None, :] >= n[:, None, None]  # [B, 1, Skv] keys past kv_len
    mask = mask[:, None, :, :].expand(B, 1, Sq, Skv)
    if causal:
        cm = j[None, :] > (i[:, None] + n[:, None, None] - Sq)  # [B, Sq, Skv]
        mask = mask | cm[:, None]
    s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), vd)
    return o, lse


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


@unittest.skipUnless(HAVE_CUDA, "skipped: needs torch with a CUDA device")
class TestGpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if _util.real_lib() is None:
            raise unittest.SkipTest("skipped: build/libkforge.so not built")
        cls.ctx = kforge.Context(device=0, lib=_util.real_lib())

    def run_case(self, B, Sq, Skv, Hq, Hkv, D, causal, dtype=None, kv_len=None):
        dtype = dtype or torch.bfloat16
        q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Skv, Hkv, D, device="cuda", dtype=dtype)
        v = torch.randn(B, Skv, Hkv, D, device="cuda", dtype=dtype)
        o, lse = kforge.attention(q, k, v, causal=causal, kv_len=kv_len, lse=True, ctx=self.ctx)
        torch.cuda.synchronize()
        ro, rl = ref(q, k, v, causal, kv_len)
        tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
        self.assertLess(rel(o, ro), tol)
        fin = torch.isfinite(rl)
        self.assertLess(float((lse.double()[fin] - rl[fin]).abs().max()), 1e-2)

    def test_decode(self):
        self.run_case(2, 1, 1000, 32, 8, 128, False)
        self.run_case(3, 4, 777, 8, 2, 64, True, torch.float16)
        self.run_case(2, 2, 900, 8, 4, 128, False, kv_len=torch.tensor([900, 5], dtype=torch.int32, device="cuda"))

    def test_prefill(self):
        self.run_case(1, 300, 300, 8, 2, 128, True)
        self.run_case(2, 129, 257, 6, 2, 64, True, torch.float16)

    def test_strided_view(self):
        B, S, H, D = 1, 64, 4, 128
        qkv = torch.randn(B, S, 3, H, D, device="cuda", dtype=torch.bfloat16)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        o = kforge.attention(q, k, v, causal=True, ctx=self.ctx)
        ro, _ = ref(q, k, v, True)
        self.assertLess(rel(o, ro), 1e-2)

    def test_non_contiguous_refused(self):
        q = torch.randn(1, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 64, 2, 256, device="cuda", dtype=torch.bfloat16)[..., ::2]
        with self.assertRaises(kforge.ArgumentError):
            kforge.attention(q, k, k, ctx=self.ctx)


if __name__ == "__main__":
    unittest.main()
