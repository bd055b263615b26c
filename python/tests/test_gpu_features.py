"""The model features through the binding, on a GPU (skipped without torch, CUDA or libkforge): sliding window,
softcap, sinks, FP8 (e4m3) K/V with per-head scales, paged prefill; kforge.attention, the torch op and
kforge.compat against the fp64 reference of tests/_ref.py, and the op / compat equal to the native call bit for bit.

    cd python/tests && KFORGE_LIB=../../build/libkforge.so python3 -m unittest -v test_gpu_features
"""
import unittest

import _util

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:
    torch, HAVE_CUDA = None, False

import kforge

if HAVE_CUDA:
    import _ref
    import kforge.compat as compat
    import kforge.ops as ops
    from test_gpu_engine import paged, same

DEV = "cuda"
BF = torch.bfloat16 if torch is not None else None
TOL = 2e-2


@unittest.skipUnless(HAVE_CUDA, "skipped: needs torch with CUDA")
@unittest.skipUnless(_util.real_lib(), "skipped: no libkforge built (build/libkforge.so or $KFORGE_LIB)")
class TestFeaturesGpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = kforge.Context(lib=_util.real_lib())
        kforge.set_default_context(cls.ctx)

    def setUp(self):
        torch.manual_seed(21)

    def close(self, got, want, tol=TOL, what=""):
        self.assertFalse(torch.isnan(got.float()).any(), f"{what}: NaN")
        self.assertLess(_ref.rel(got, want), tol, what)

    def test_window_softcap_sinks_decode_and_prefill(self):
        for sq, skv, lens in ((1, 700, [700, 0, 1]), (4, 600, [600, 5, 1]), (200, 500, [500, 200, 300])):
            b, hq, hkv, d = len(lens), 8, 2, 128
            q = torch.randn(b, sq, hq, d, device=DEV, dtype=BF)
            k = torch.randn(b, skv, hkv, d, device=DEV, dtype=BF)
            v = torch.randn(b, skv, hkv, d, device=DEV, dtype=BF)
            kv_len = torch.tensor(lens, dtype=torch.int32, device=DEV)
            sinks = torch.linspace(-2, 3, hq, device=DEV, dtype=torch.float32)
            for kw in ({"window_left": 64}, {"softcap": 5.0}, {"sinks": sinks},
                       {"window_left": 128, "sinks": sinks}, {"window_left": 32, "softcap": 30.0}):
                what = f"sq {sq} {sorted(kw)}"
                o, lse = kforge.attention(q, k, v, causal=True, kv_len=kv_len, lse=True, **kw)
                wo, wl = _ref.attention(q, k, v, causal=True, kv_len=kv_len, **kw)
                self.close(o, wo, what=what)
                fin = torch.isfinite(wl)
                self.assertTrue(torch.equal(fin, torch.isfinite(lse)), what)
                self.assertLess(float((lse[fin] - wl[fin]).abs().max()), 1e-3, what)
                oo = ops.attention(q, k, v, causal=True, kv_len=kv_len, **kw)
                self.assertTrue(same(oo, o), f"{what}: the op differs from the native call")

    def test_fp8_kv(self):
        if not hasattr(torch, "float8_e4m3fn"):
            self.skipTest("skipped: this torch has no float8_e4m3fn")
        for sq, lens, page in ((1, [900, 0, 1], 0), (4, [600, 333], 64), (130, [300, 130], 0)):
            b, hq, hkv, d = len(lens), 8, 4, 128
            skv = max(lens)
            q = torch.randn(b, sq, hq, d, device=DEV, dtype=BF)
            k8 = (torch.randn(b, skv, hkv, d, device=DEV) * 150).clamp(-448, 448).to(torch.float8_e4m3fn)
            v8 = (torch.rand(b, skv, hkv, d, device=DEV) * 800 - 400).to(torch.float8_e4m3fn)
            ks = torch.tensor([0.5, 0.75, 1.0, 1.25], device=DEV) / 150
            vs = torch.tensor([0.9, 1.1, 0.7, 1.3], device=DEV) / 400
            kv_len = torch.tensor(lens, dtype=torch.int32, device=DEV)
            o = kforge.attention(q, k8, v8, causal=True, kv_len=kv_len, k_scale=ks, v_scale=vs)
            wo, _ = _ref.attention(q, k8, v8, causal=True, kv_len=kv_len, k_scale=ks, v_scale=vs)
            self.close(o, wo, what=f"fp8 sq {sq}")
            wrong = _ref.attention(q, k8, v8, causal=True, kv_len=kv_len, k_scale=ks.roll(1), v_scale=vs.roll(1))[0]
            self.assertGreater(_ref.rel(o, wrong), 10 * TOL, "the scales of the wrong heads would pass")
            oc = compat.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=kv_len, causal=True, k_scale=ks, v_scale=vs)
            self.assertTrue(same(oc, o), f"fp8 sq {sq}: compat differs from the native call")

    def test_paged_prefill(self):
        for page, lens, sq in ((16, [700, 0, 1, 333], 200), (64, [600, 150], 150), (128, [1000, 129], 100)):
            b, hq, hkv, d = len(lens), 8, 2, 128
            kp, bt, kv_len = paged(lens, page, hkv, d)
            vp = torch.where(torch.isnan(kp), kp, torch.randn_like(kp))   # the same pages, NaN where k has NaN
            q = torch.randn(b, sq, hq, d, device=DEV, dtype=BF)
            o = kforge.attention(q, kp, vp, causal=True, kv_len=kv_len, block_table=bt)
            wo, _ = _ref.attention(q, kp, vp, causal=True, kv_len=kv_len, block_table=bt)
            self.close(o, wo, what=f"paged prefill page {page}")
            # the same problem on a contiguous cache
            kc = torch.stack([kp[bt[i].long()].reshape(-1, hkv, d) for i in range(b)])
            vc = torch.stack([vp[bt[i].long()].reshape(-1, hkv, d) for i in range(b)])
            oc = kforge.attention(q, kc, vc, causal=True, kv_len=kv_len)
            self.close(oc, wo, what=f"contiguous twin of page {page}")

    def test_compat_window_and_s_aux(self):
        b, sq, skv, hq, hkv, d = 2, 300, 300, 8, 2, 64
        q = torch.randn(b, sq, hq, d, device=DEV, dtype=BF)
        k = torch.randn(b, skv, hkv, d, device=DEV, dtype=BF)
        v = torch.randn(b, skv, hkv, d, device=DEV, dtype=BF)
        s_aux = torch.linspace(-1, 2, hq, device=DEV, dtype=torch.float32)
        o = compat.flash_attn_func(q, k, v, causal=True, window_size=(127, 0), s_aux=s_aux)
        n = kforge.attention(q, k, v, causal=True, window_left=127, sinks=s_aux)
        self.assertTrue(same(o, n), "compat differs from the native call")
        wo, _ = _ref.attention(q, k, v, causal=True, window_left=127, sinks=s_aux)
        self.close(o, wo, what="compat window + s_aux")


if __name__ == "__main__":
    unittest.main()
