"""The binding on a GPU (skipped without torch, CUDA or libkforge): kforge.attention against
an fp64 reference, for decode and prefill, strided views, kv_len, lse, and the plan cache."""
import ctypes
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

    def direct_c(self, q, k, v, o, lse, causal, kv_len, kind):
        """The same problem through the C API called by hand (ctypes, every field written out
        here): a caller that does not use the binding's argument logic."""
        from kforge import _lib
        lib = self.ctx._lib
        B, Sq, Hq, D = q.shape
        Skv, Hkv = k.shape[1], k.shape[2]
        d = _lib.desc_init()  # KF_ATTN_DESC_INIT, as a C caller starts
        d.kind, d.causal, d.scale = kind, int(causal), 0.0
        d.dtype = _lib.KF_BF16 if q.dtype == torch.bfloat16 else _lib.KF_FP16
        d.hq, d.hkv, d.d = Hq, Hkv, D
        d.max_batch, d.max_q, d.max_kv, d.packed_q = B, Sq, Skv, 0
        for name, t in (("q_strides", q), ("k_strides", k), ("v_strides", v), ("o_strides", o)):
            setattr(d, name, _lib.Strides3(t.stride(0), t.stride(1), t.stride(2)))
        plan = ctypes.c_void_p()
        st = lib.kf_attn_plan(self.ctx.handle, ctypes.byref(d), ctypes.byref(plan))
        self.assertEqual(st, 0, lib.kf_errmsg(self.ctx.handle))
        t = _lib.kf_attn_tensors()
        t.q, t.k, t.v, t.o, t.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
        t.kv_len = kv_len.data_ptr() if kv_len is not None else None
        t.batch, t.q_len, t.kv_len_all = B, Sq, Skv
        st = lib.kf_attn_run(plan, ctypes.byref(t), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        self.assertEqual(st, 0, lib.kf_errmsg(self.ctx.handle))
        torch.cuda.synchronize()
        lib.kf_plan_free(plan)

    def test_binding_equals_direct_c_bitwise(self):
        """#7: the binding's results equal the C API's bit for bit (decode 8/2 with kv_len on a
        strided [B, H, S, D] cache view, causal prefill 8/4)."""
        from kforge import _lib
        torch.manual_seed(7)
        cases = []
        kc = torch.randn(3, 2, 700, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # [B, S, H, D] view
        vc = torch.randn(3, 2, 700, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        qd = torch.randn(3, 2, 8, 128, device="cuda", dtype=torch.bfloat16)
        kvl = torch.tensor([700, 1, 333], dtype=torch.int32, device="cuda")
        cases.append((qd, kc, vc, True, kvl, _lib.KF_ATTN_DECODE))
        qp = torch.randn(1, 300, 8, 64, device="cuda", dtype=torch.float16)
        kp = torch.randn(1, 300, 4, 64, device="cuda", dtype=torch.float16)
        vp = torch.randn(1, 300, 4, 64, device="cuda", dtype=torch.float16)
        cases.append((qp, kp, vp, True, None, _lib.KF_ATTN_PREFILL))
        for q, k, v, causal, kv_len, kind in cases:
            o, lse = kforge.attention(q, k, v, causal=causal, kv_len=kv_len, lse=True, ctx=self.ctx)
            torch.cuda.synchronize()
            o2 = torch.full_like(o, float("nan"))
            lse2 = torch.full_like(lse, float("nan"))
            self.direct_c(q, k, v, o2, lse2, causal, kv_len, kind)
            self.assertTrue(torch.equal(o.view(torch.int16), o2.view(torch.int16)), "o differs")
            self.assertTrue(torch.equal(lse.view(torch.int32), lse2.view(torch.int32)), "lse differs")

    def test_non_contiguous_refused(self):
        q = torch.randn(1, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 64, 2, 256, device="cuda", dtype=torch.bfloat16)[..., ::2]
        with self.assertRaises(kforge.ArgumentError):
            kforge.attention(q, k, k, ctx=self.ctx)


def ref_kda(q, k, v, g, beta, cu, h0, scale, l2norm):
    """fp64 token recurrence; q, k [T, H, K], v [T, HV, V], g [T, HV, K] log space, beta [T, HV],
    h0 [N, HV, K, V]. Returns o [T, HV, V] and the final state."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    HV, G = v.shape[1], v.shape[1] // q.shape[1]
    q = q.repeat_interleave(G, dim=1) * scale
    k = k.repeat_interleave(G, dim=1)
    o = torch.zeros_like(v)
    S = h0.double().clone()
    for n in range(len(cu) - 1):
        for t in range(cu[n], cu[n + 1]):
            S[n] = S[n] * torch.exp(g[t])[:, :, None]
            u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S[n], k[t]))
            S[n] = S[n] + k[t][:, :, None] * u[:, None, :]
            o[t] = torch.einsum("hkv,hk->hv", S[n], q[t])
    return o, S


@unittest.skipUnless(HAVE_CUDA, "skipped: needs torch with a CUDA device")
class TestKdaGpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if _util.real_lib() is None:
            raise unittest.SkipTest("skipped: build/libkforge.so not built")
        cls.ctx = kforge.Context(device=0, lib=_util.real_lib())

    def test_packed_prefill_and_decode(self):
        lens, H, HV, K = [17, 0, 16], 2, 4, 128
        T, N = sum(lens), len(lens)
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        dev = "cuda"
        q = torch.randn(T, H, K, device=dev, dtype=torch.bfloat16)
        k = torch.randn(T, H, K, device=dev, dtype=torch.bfloat16)
        v = torch.rand(T, HV, K, device=dev, dtype=torch.bfloat16) * 2 - 1
        g_raw = torch.randn(T, HV, K, device=dev)
        beta_raw = torch.randn(T, HV, device=dev)
        A_log = torch.rand(HV, device=dev) * 2 - 1
        dt_bias = torch.rand(HV, K, device=dev) * 2.5 + 1.5
        h0 = torch.rand(N, HV, K, K, device=dev) * 2 - 1
        cu_t = torch.tensor(cu, dtype=torch.int32, device=dev)
        g = -5.0 * torch.sigmoid(torch.exp(A_log)[None, :, None] * (g_raw + dt_bias[None]))
        ro, rs = ref_kda(q, k, v, g, torch.sigmoid(beta_raw), cu, h0, K ** -0.5, True)
        for mode in ("prefill", "decode"):
            o, s = kforge.kda(q, k, v, g_raw, beta_raw, initial_state=h0, final_state=True, cu_seqlens=cu_t,
                              gate="sigmoid", A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0, l2norm=True,
                              beta_sigmoid=True, mode=mode, ctx=self.ctx)
            torch.cuda.synchronize()
            self.assertLess(rel(o, ro), 1e-2, mode)
            self.assertLess(rel(s, rs), 5e-3, mode)
        # log-space gate, state updated in place, V-first
        s = h0.transpose(-1, -2).contiguous()
        o = kforge.kda(q, k, v, g, torch.sigmoid(beta_raw), initial_state=s, final_state=s, cu_seqlens=cu_t,
                       l2norm=True, state_layout="vk", ctx=self.ctx)[0]
        torch.cuda.synchronize()
        self.assertLess(rel(o, ro), 1e-2)
        self.assertLess(rel(s.transpose(-1, -2), rs), 5e-3)


if __name__ == "__main__":
    unittest.main()
