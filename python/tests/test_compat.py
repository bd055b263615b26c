"""kforge.compat on the CPU: the refusals of what kforge does not serve (no torch needed), and, with torch,
the arguments each entry point hands kforge's op, checked by running that op as the fp64 reference of
kforge's semantics (tests/_ref.py): SDPA's top-left causal mask served exactly, flash-attn's layouts, the
in-place KV append, varlen keys gathered, views passed without copies. The GPU half (the real kernels,
bit for bit against the native calls) is test_gpu_engine.py."""
import unittest
from unittest import mock

import _util  # noqa: F401  (puts python/ on sys.path)
import kforge
import kforge.compat as compat

try:
    import torch
    import torch.nn.functional as F
    import _ref
except ImportError:
    torch = None


class TestRefusals(unittest.TestCase):
    """Refused before any tensor is read: plain objects stand in for the tensors."""

    def refused(self, pattern, fn, *args, **kw):
        with self.assertRaises(kforge.ArgumentError) as cm:
            fn(*args, **kw)
        self.assertRegex(str(cm.exception), pattern)

    def test_flash_attn_func(self):
        x = object()
        f = compat.flash_attn_func
        # a left window on causal attention is served ((L, 0); (L, -1) with causal): a window reaching right is not
        self.refused(r"flash_attn_func: window_size=\(4, 4\) \(kforge serves a left window on causal attention",
                     f, x, x, x, window_size=(4, 4))
        self.refused(r"window_size=\(128, -1\) \(kforge serves a left window", f, x, x, x, window_size=(128, -1))
        self.refused(r"window_size=\(-2, 0\) \(each side >= 0, or -1", f, x, x, x, window_size=(-2, 0))
        self.refused(r"window_size=5 \(a pair", f, x, x, x, window_size=5)
        self.refused(r"softcap=-1.0 \(0 for none, or a cap > 0\)", f, x, x, x, softcap=-1.0)
        self.refused(r"k_scale and v_scale go together", f, x, x, x, k_scale=x)
        self.refused(r"alibi_slopes \(ALiBi is not served", f, x, x, x, alibi_slopes=x)
        self.refused(r"dropout_p=0.1 \(inference only", f, x, x, x, dropout_p=0.1)
        # every unserved argument is named at once
        self.refused(r"dropout_p=0.1.*alibi_slopes", f, x, x, x, dropout_p=0.1, window_size=(4, 4), alibi_slopes=x)

    def test_varlen_and_kvcache(self):
        x = object()
        self.refused(r"flash_attn_varlen_func: window_size=\(2, -1\)", compat.flash_attn_varlen_func, x, x, x, x, x,
                     4, 4, window_size=(2, -1))
        self.refused(r"flash_attn_with_kvcache: rotary_cos \(not served: None\); rotary_sin", compat.flash_attn_with_kvcache,
                     x, x, x, rotary_cos=x, rotary_sin=x)
        self.refused(r"cache_batch_idx \(not served", compat.flash_attn_with_kvcache, x, x, x, cache_batch_idx=x)
        self.refused(r"cache_leftpad \(not served", compat.flash_attn_with_kvcache, x, x, x, cache_leftpad=x)
        self.refused(r"softcap=nan", compat.flash_attn_with_kvcache, x, x, x, softcap=float("nan"))
        self.refused(r"flash_attn_with_kvcache: window_size=\(8, 1\)", compat.flash_attn_with_kvcache, x, x, x,
                     window_size=(8, 1), causal=True)

    def test_window_mapping(self):
        w = compat._window
        self.assertEqual(w((-1, -1), False), (False, None, None))
        self.assertEqual(w((-1, -1), True), (True, None, None))
        self.assertEqual(w((128, 0), False), (True, 128, None))   # flash-attn: right 0 is causal
        self.assertEqual(w((128, 0), True), (True, 128, None))
        self.assertEqual(w((128, -1), True), (True, 128, None))
        self.assertEqual(w((-1, 0), False), (True, None, None))
        self.assertEqual(w((0, 0), True), (True, 0, None))
        self.assertEqual(w(None, True), (True, None, None))
        self.assertIsNotNone(w((128, -1), False)[2])
        self.assertIsNotNone(w((3, 2), True)[2])
        self.assertEqual(compat._features("f", (64, 0), False, 30.0, "sinks", "ks", "vs"),
                         (True, {"window_left": 64, "softcap": 30.0, "sinks": "sinks", "k_scale": "ks",
                                 "v_scale": "vs"}))
        self.assertEqual(compat._features("f", (-1, -1), False, 0.0, None, None, None), (False, {}))

    def test_sdpa(self):
        x = object()
        self.refused(r"sdpa: attn_mask \(not served: None\)", compat.sdpa, x, x, x, attn_mask=x)
        self.refused(r"sdpa: dropout_p=0.5", compat.sdpa, x, x, x, dropout_p=0.5)

    def test_import_needs_no_torch(self):
        import subprocess
        import sys
        code = ("import sys; sys.modules['torch'] = None\n"   # an import of torch would fail
                "import kforge, kforge.compat\n"
                "print('ok')")
        out = subprocess.run([sys.executable, "-c", code], cwd=_util.PYDIR, capture_output=True, text=True)
        self.assertEqual(out.stdout.strip(), "ok", out.stderr)


class RefOps:
    """Stands in for kforge.ops: runs kforge's semantics in fp64 on the CPU and records each call."""

    def __init__(self):
        self.calls = []

    def attention(self, q, k, v=None, causal=False, kv_len=None, block_table=None, cu_seqlens_q=None,
                  max_seqlen_q=0, scale=None, return_lse=False, **feat):
        self.calls.append(dict(q=q, k=k, v=v, causal=causal, kv_len=kv_len, block_table=block_table,
                               cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, scale=scale, **feat))
        if v is None:
            k, v = k[0], k[1]
        o, lse = _ref.attention(q, k, v, causal=causal, kv_len=kv_len, block_table=block_table,
                                cu_seqlens_q=cu_seqlens_q, scale=scale, **feat)
        o = o.to(q.dtype)
        return (o, lse.float()) if return_lse else o


@unittest.skipIf(torch is None, "skipped: torch is not installed (the compat layer's argument mapping needs it)")
class TestMapping(unittest.TestCase):
    def setUp(self):
        self.ops = RefOps()
        p = mock.patch.object(compat, "_ops", return_value=self.ops)
        p.start()
        self.addCleanup(p.stop)
        torch.manual_seed(0)

    def close(self, a, b, tol=1e-6):
        self.assertLess(_ref.rel(a, b), tol)

    def test_sdpa_top_left_equals_sdpa(self):
        # SDPA's is_causal is top-left: compat.sdpa serves it exactly for Sq < Skv, Sq == Skv, Sq > Skv
        for sq, skv in ((3, 10), (7, 7), (10, 4), (1, 5)):
            q = torch.randn(2, 6, sq, 16, dtype=torch.float64)
            k = torch.randn(2, 2, skv, 16, dtype=torch.float64)
            v = torch.randn(2, 2, skv, 16, dtype=torch.float64)
            want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            got = compat.sdpa(q, k, v, is_causal=True, enable_gqa=True)
            self.assertEqual(got.shape, want.shape)
            self.close(got, want)
            got = compat.sdpa(q, k, v, is_causal=False, enable_gqa=True, scale=0.3)
            self.close(got, F.scaled_dot_product_attention(q, k, v, scale=0.3, enable_gqa=True))

    def test_sdpa_bottom_right_and_views(self):
        q = torch.randn(1, 4, 3, 16, dtype=torch.float64)
        k = torch.randn(1, 4, 9, 16, dtype=torch.float64)
        v = torch.randn(1, 4, 9, 16, dtype=torch.float64)
        got = compat.sdpa(q, k, v, is_causal=True, causal_align="bottom_right")
        want, _ = _ref.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        self.close(got, want.transpose(1, 2))
        c = self.ops.calls[-1]   # [B, H, S, D] read in place as [B, S, H, D] views
        self.assertEqual((c["q"].data_ptr(), c["k"].data_ptr(), c["v"].data_ptr()),
                         (q.data_ptr(), k.data_ptr(), v.data_ptr()))
        self.assertEqual(c["q"].stride(), q.transpose(1, 2).stride())
        with self.assertRaises(kforge.ArgumentError) as cm:
            compat.sdpa(q, k[:, :2], v[:, :2])
        self.assertIn("enable_gqa=True", str(cm.exception))
        with self.assertRaises(kforge.ArgumentError):
            compat.sdpa(q, k, v, is_causal=True, causal_align="middle")

    def test_flash_attn_func_layout(self):
        q = torch.randn(2, 3, 8, 16, dtype=torch.float64)
        k = torch.randn(2, 11, 2, 16, dtype=torch.float64)
        v = torch.randn(2, 11, 2, 16, dtype=torch.float64)
        out, lse, probs = compat.flash_attn_func(q, k, v, causal=True, softmax_scale=0.25, return_attn_probs=True)
        want, wl = _ref.attention(q, k, v, causal=True, scale=0.25)
        self.close(out, want)
        self.assertEqual(lse.shape, (2, 8, 3))   # flash-attn's softmax_lse [B, Hq, Sq]
        self.assertIsNone(probs)
        self.assertIs(self.ops.calls[-1]["q"], q)
        self.close(compat.flash_attn_func(q, k, v), _ref.attention(q, k, v)[0])

    def test_varlen_gathers_packed_keys(self):
        lq, lk = [3, 1, 5], [4, 9, 5]
        cq = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32)
        ck = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32)
        q = torch.randn(sum(lq), 4, 16, dtype=torch.float64)
        k = torch.randn(sum(lk), 2, 16, dtype=torch.float64)
        v = torch.randn(sum(lk), 2, 16, dtype=torch.float64)
        out, lse, _ = compat.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=True,
                                                     return_attn_probs=True)
        self.assertEqual(lse.shape, (4, sum(lq)))   # [Hq, total_q]
        for b in range(3):   # each sequence on its own, bottom-right causal
            want, wl = _ref.attention(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]],
                                      causal=True)
            self.close(out[cq[b]:cq[b + 1]], want[0])
            self.close(lse[:, cq[b]:cq[b + 1]], wl[0])
        c = self.ops.calls[-1]
        self.assertEqual(tuple(c["k"].shape), (3, 9, 2, 16))
        self.assertEqual(c["kv_len"].tolist(), lk)
        self.assertEqual(c["max_seqlen_q"], 5)

    def test_varlen_paged_reads_pool_in_place(self):
        pool = torch.randn(12, 4, 2, 16, dtype=torch.float64)
        vpool = torch.randn(12, 4, 2, 16, dtype=torch.float64)
        bt = torch.tensor([[5, 2, 9], [0, 11, 3]], dtype=torch.int32)
        q = torch.randn(2, 4, 16, dtype=torch.float64)
        cq = torch.tensor([0, 1, 2], dtype=torch.int32)
        used = torch.tensor([10, 3], dtype=torch.int32)
        out = compat.flash_attn_varlen_func(q, pool, vpool, cq, None, 1, 12, block_table=bt, seqused_k=used)
        c = self.ops.calls[-1]
        self.assertIs(c["k"], pool)
        self.assertIs(c["block_table"], bt)
        want, _ = _ref.attention(q[:, None], pool, vpool, kv_len=used, block_table=bt)
        self.close(out, want[:, 0])
        # past 16 query rows: the paged prefill (chunked prefill over the pool), bottom-right per sequence
        q = torch.randn(20, 4, 16, dtype=torch.float64)
        cq = torch.tensor([0, 3, 20], dtype=torch.int32)
        used = torch.tensor([10, 12], dtype=torch.int32)
        out = compat.flash_attn_varlen_func(q, pool, vpool, cq, None, 17, 12, block_table=bt, seqused_k=used,
                                            causal=True)
        self.assertIs(self.ops.calls[-1]["block_table"], bt)
        for b in range(2):
            want, _ = _ref.attention(q[None, cq[b]:cq[b + 1]], pool[bt[b].long()].reshape(1, -1, 2, 16),
                                     vpool[bt[b].long()].reshape(1, -1, 2, 16), kv_len=int(used[b]), causal=True)
            self.close(out[cq[b]:cq[b + 1]], want[0])

    def test_kvcache_appends_in_place(self):
        b, cap, hkv, d = 3, 20, 2, 16
        kc = torch.randn(b, cap, hkv, d, dtype=torch.float64)
        vc = torch.randn(b, cap, hkv, d, dtype=torch.float64)
        k0, v0 = kc.clone(), vc.clone()
        lens = torch.tensor([4, 0, 17], dtype=torch.int32)
        q = torch.randn(b, 2, 4, d, dtype=torch.float64)
        kn = torch.randn(b, 2, hkv, d, dtype=torch.float64)
        vn = torch.randn(b, 2, hkv, d, dtype=torch.float64)
        out, lse = compat.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, causal=True,
                                                  return_softmax_lse=True)
        for i, n in enumerate(lens.tolist()):
            self.assertTrue(torch.equal(kc[i, n:n + 2], kn[i]))
            self.assertTrue(torch.equal(vc[i, n:n + 2], vn[i]))
            self.assertTrue(torch.equal(kc[i, :n], k0[i, :n]))
            self.assertTrue(torch.equal(kc[i, n + 2:], k0[i, n + 2:]))
            self.assertTrue(torch.equal(vc[i, n + 2:], v0[i, n + 2:]))
        want, wl = _ref.attention(q, kc, vc, causal=True, kv_len=lens + 2)
        self.close(out, want)
        self.close(lse, wl)
        self.assertEqual(self.ops.calls[-1]["kv_len"].tolist(), [6, 2, 19])
        self.assertIs(self.ops.calls[-1]["k"], kc)   # the cache itself, not a copy

    def test_kvcache_paged_append_and_int_lengths(self):
        pages, ps, hkv, d = 10, 4, 1, 16
        kc = torch.randn(pages, ps, hkv, d, dtype=torch.float64)
        vc = torch.randn(pages, ps, hkv, d, dtype=torch.float64)
        bt = torch.tensor([[7, 1, 4], [2, 9, 0]], dtype=torch.int32)
        q = torch.randn(2, 1, 8, d, dtype=torch.float64)
        kn = torch.randn(2, 1, hkv, d, dtype=torch.float64)
        vn = torch.randn(2, 1, hkv, d, dtype=torch.float64)
        out = compat.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=5, block_table=bt)
        # position 5 is row 1 of the second page of each sequence
        self.assertTrue(torch.equal(kc[1, 1], kn[0, 0]))
        self.assertTrue(torch.equal(kc[9, 1], kn[1, 0]))
        want, _ = _ref.attention(q, kc, vc, kv_len=6, block_table=bt)
        self.close(out, want)
        out = compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=3, block_table=bt)
        self.assertEqual(self.ops.calls[-1]["kv_len"].tolist(), [3, 3])   # an int: one plan for every length
        with self.assertRaises(kforge.ArgumentError):
            compat.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=13, block_table=bt)


@unittest.skipIf(torch is None, "skipped: torch is not installed (the compat layer's argument mapping needs it)")
class TestFeatureMapping(unittest.TestCase):
    """window_size, softcap, s_aux, FP8 scales reach the op as kforge's arguments; the fp64 reference of the
    features (tests/_ref.py) against one written here from the definitions."""

    def setUp(self):
        self.ops = RefOps()
        p = mock.patch.object(compat, "_ops", return_value=self.ops)
        p.start()
        self.addCleanup(p.stop)
        torch.manual_seed(1)

    def test_window_softcap_sinks(self):
        b, sq, skv, hq, hkv, d = 2, 5, 40, 4, 2, 16
        q = torch.randn(b, sq, hq, d, dtype=torch.float64)
        k = torch.randn(b, skv, hkv, d, dtype=torch.float64) * 3
        v = torch.randn(b, skv, hkv, d, dtype=torch.float64)
        s_aux = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64)
        out, lse, _ = compat.flash_attn_func(q, k, v, window_size=(7, 0), softcap=2.5, s_aux=s_aux,
                                             return_attn_probs=True)
        c = self.ops.calls[-1]
        self.assertEqual((c["causal"], c["window_left"], c["softcap"]), (True, 7, 2.5))
        self.assertIs(c["sinks"], s_aux)
        # written out: query i at key position p = i + skv - sq sees keys p - 7 .. p
        for bi in range(b):
            for h in range(hq):
                for i in range(sq):
                    p = i + skv - sq
                    js = list(range(max(0, p - 7), p + 1))
                    sc = [2.5 * torch.tanh((q[bi, i, h] @ k[bi, j, h // 2]) / 4.0 / 2.5) for j in js]
                    sc = torch.stack(sc)
                    den = torch.exp(sc).sum() + torch.exp(s_aux[h])
                    o = sum(torch.exp(sc[n]) * v[bi, j, h // 2] for n, j in enumerate(js)) / den
                    self.assertLess(float((out[bi, i, h] - o).abs().max()), 1e-9)
                    # the lse comes back fp32, as the op's does (o stays in the inputs' fp64)
                    self.assertLess(abs(float(lse[bi, h, i] - torch.log(den))), 1e-6 * max(1.0, abs(float(torch.log(den)))))

    def test_fp8_scales_passed(self):
        if not hasattr(torch, "float8_e4m3fn"):
            self.skipTest("skipped: this torch has no float8_e4m3fn")
        q = torch.randn(1, 2, 4, 16, dtype=torch.float64)
        k8 = (torch.randn(1, 30, 2, 16) * 100).to(torch.float8_e4m3fn)
        v8 = (torch.randn(1, 30, 2, 16) * 100).to(torch.float8_e4m3fn)
        ks = torch.tensor([0.01, 0.02], dtype=torch.float32)
        vs = torch.tensor([0.03, 0.005], dtype=torch.float32)
        out = compat.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=20, k_scale=ks, v_scale=vs, causal=True)
        c = self.ops.calls[-1]
        self.assertIs(c["k_scale"], ks)
        self.assertIs(c["v_scale"], vs)
        kd = k8.double() * ks.double()[:, None]
        vd = v8.double() * vs.double()[:, None]
        want, _ = _ref.attention(q, kd, vd, kv_len=20, causal=True)
        self.assertLess(_ref.rel(out, want), 1e-9)


if __name__ == "__main__":
    unittest.main()
