"""Argument checks of kforge.kda(): refused in Python before any call into libkforge; the
kf_kda_desc / kf_kda_tensors it builds; and what reaches C (through the stub library when a C
compiler is present). No torch, no GPU."""
import re
import unittest

import _util
from _util import FakeArray, Untouchable, contiguous_bytes
import kforge

BF16 = dict(typestr="<V2", descr=[("bfloat16", "<V2")])


def bf(shape, ptr, strides=None):
    return FakeArray(shape, ptr=ptr, strides=strides, **BF16)


def f32(shape, ptr, strides=None):
    return FakeArray(shape, "<f4", ptr=ptr, strides=strides)


def problem(b=2, t=5, h=2, hv=4, d=64, packed=False):
    """q, k, v, g, beta, out as fake device arrays: [B, T, ...] or packed [T, ...]."""
    lead = () if packed else (b,)
    return dict(q=bf(lead + (t, h, d), 0x10000), k=bf(lead + (t, h, d), 0x20000), v=bf(lead + (t, hv, d), 0x30000),
                g=f32(lead + (t, hv, d), 0x40000), beta=f32(lead + (t, hv), 0x50000),
                out=bf(lead + (t, hv, d), 0x60000))


def call(p, **kw):
    args = dict(p)
    args.update(kw)
    q, k, v, g, beta = (args.pop(n) for n in ("q", "k", "v", "g", "beta"))
    return q, k, v, g, beta, args


class TestKdaRefusedBeforeC(_util.NoLibrary):
    def refused(self, pattern, p, **kw):
        q, k, v, g, beta, rest = call(p, **kw)
        for ctx in (Untouchable(), None):
            with self.assertRaises(kforge.ArgumentError) as cm:
                kforge.kda(q, k, v, g, beta, ctx=ctx, **rest)
            e = cm.exception
            self.assertIsInstance(e, kforge.Error)
            self.assertIsInstance(e, ValueError)
            self.assertEqual(e.status, kforge.KF_ERR_ARG)
            self.assertIsNone(e.call)
            self.assertRegex(str(e), pattern)

    def test_dtypes(self):
        p = problem()
        self.refused(r"q: dtype fp16 is not supported \(KDA takes bf16 q, k, v\)", p, q=FakeArray((2, 5, 2, 64)))
        self.refused(r"v: dtype fp32 is not supported", p, v=f32((2, 5, 4, 64), 0x30000))
        self.refused(r"g: dtype bf16 is not supported \(the gate g is fp32\)", p, g=bf((2, 5, 4, 64), 0x40000))
        self.refused(r"beta: dtype fp16 is not supported \(beta is fp32\)", p, beta=FakeArray((2, 5, 4)))
        self.refused(r"out: expected bf16", p, out=f32((2, 5, 4, 64), 0x60000))
        self.refused(r"expected a CUDA tensor", p, g=[1.0])

    def test_shapes(self):
        p = problem()
        self.refused(r"q: expected \[B, T, H, K\]; got shape \(5, 2, 64\)", p, q=bf((5, 2, 64), 0x10000))
        self.refused(r"k and q shapes differ", p, k=bf((2, 5, 2, 128), 0x20000))
        self.refused(r"v has 6 tokens, q has 5", p, v=bf((2, 6, 4, 64), 0x30000))
        self.refused(r"g: expected \[\.\., 5, 4, 64\]", p, g=f32((2, 5, 4, 128), 0x40000))
        self.refused(r"beta: expected \[\.\., 5, 4\]", p, beta=f32((2, 5, 2), 0x50000))
        self.refused(r"HV \(3\) must be a multiple of H \(2\)", problem(hv=3))
        self.refused(r"v: batch 3 differs from the batch of q \(2\)", p, v=bf((3, 5, 4, 64), 0x30000),
                     g=f32((3, 5, 4, 64), 0x40000), beta=f32((3, 5, 4), 0x50000), out=bf((3, 5, 4, 64), 0x60000))
        self.refused(r"out: expected bf16 \(2, 5, 4, 64\)", p, out=bf((2, 5, 4, 32), 0x60000))
        self.refused(r"out= is required", p, out=None)
        self.refused(r"empty problem", problem(b=0))

    def test_non_contiguous_last_dim(self):
        p = problem()
        shape = (2, 5, 2, 64)
        st = tuple(s * 2 for s in contiguous_bytes(shape, 2)[:-1]) + (4,)
        self.refused(r"k: the last dimension must be contiguous", p, k=bf(shape, 0x20000, strides=st))
        gshape = (2, 5, 4, 64)
        gst = tuple(s * 2 for s in contiguous_bytes(gshape, 4)[:-1]) + (8,)
        self.refused(r"g: the last dimension must be contiguous", p, g=f32(gshape, 0x40000, strides=gst))

    def test_packed(self):
        p = problem(t=9, packed=True)
        self.refused(r"cu_seqlens: expected int32 or int64 \[N \+ 1\]", p, cu_seqlens=FakeArray((3,), "<f4"))
        self.refused(r"cu_seqlens: expected int32 or int64", p, cu_seqlens=FakeArray((1,), "<i4"))
        self.refused(r"cu_seqlens: must be contiguous", p, cu_seqlens=FakeArray((3,), "<i4", strides=(8,)))
        self.refused(r"q: with cu_seqlens, q is packed \[T, H, K\] \(or \[1, \.\.\.\]\); got shape \(2, 9, 2, 64\)",
                     problem(b=2, t=9), cu_seqlens=FakeArray((3,), "<i4"))

    def test_gate_and_options(self):
        p = problem()
        self.refused(r"gate: 'log' or 'sigmoid', got 'exp'", p, gate="exp")
        self.refused(r"A_log is required with gate='sigmoid'", p, gate="sigmoid")
        self.refused(r"A_log: expected a contiguous fp32 \[4\]", p, gate="sigmoid", A_log=f32((2,), 0x70000))
        self.refused(r"A_log: dtype fp16 is not supported", p, gate="sigmoid", A_log=FakeArray((4,)))
        self.refused(r"dt_bias: expected a contiguous fp32 \[4, 64\]", p, gate="sigmoid", A_log=f32((4,), 0x70000),
                     dt_bias=f32((4, 32), 0x71000))
        self.refused(r"A_log and dt_bias are only for gate='sigmoid'", p, A_log=f32((4,), 0x70000))
        self.refused(r"A_log and dt_bias are only for gate='sigmoid'", p, dt_bias=f32((4, 64), 0x71000))
        self.refused(r"state_layout: 'kv' \(\[N, HV, K, V\]\) or 'vk'", p, state_layout="kvk")
        self.refused(r"mode: 'prefill' or 'decode', got 'chunk'", p, mode="chunk")
        self.refused(r"lower_bound and scale must be numbers", p, lower_bound="low")

    def test_states(self):
        p = problem()
        self.refused(r"initial_state: expected fp32 \[2, 4, 64, 64\] \(state_layout 'kv'\); got shape \(2, 4, 64\)",
                     p, initial_state=f32((2, 4, 64), 0x80000))
        self.refused(r"initial_state: dtype bf16 is not supported \(the state is fp32\)", p,
                     initial_state=bf((2, 4, 64, 64), 0x80000))
        self.refused(r"final_state=True needs torch", p, final_state=True)
        self.refused(r"final_state: expected fp32 \[2, 4, 64, 64\]", p, final_state=f32((1, 4, 64, 64), 0x90000))
        h0 = f32((2, 4, 64, 64), 0x80000)
        padded = tuple(s * 4 for s in (4 * 64 * 68, 64 * 68, 68, 1))
        self.refused(r"final_state: strides .* differ from initial_state's", p, initial_state=h0,
                     final_state=f32((2, 4, 64, 64), 0x90000, strides=padded))


class TestKdaPrepare(unittest.TestCase):
    """prepare_kda builds the desc and tensors without any library."""

    def test_padded_defaults(self):
        p = problem(b=2, t=5, h=2, hv=4, d=64)
        q, k, v, g, beta, rest = call(p)
        c = kforge.prepare_kda(q, k, v, g, beta, **rest)
        d, t = c.desc, c.tensors
        self.assertEqual((d.mode, d.max_seqs, d.max_tokens, d.h, d.hv, d.dk, d.dv),
                         (kforge.KF_KDA_PREFILL, 2, 10, 2, 4, 64, 64))
        self.assertEqual((d.gate, d.l2norm, d.beta_sigmoid, d.state_layout, d.has_initial_state,
                          d.wants_final_state, d.scale, d.lower_bound),
                         (kforge.KF_KDA_GATE_LOG, 0, 0, kforge.KF_KDA_STATE_KV, 0, 0, 0.0, -5.0))
        self.assertEqual(list(d.q_strides), [5 * 2 * 64, 2 * 64, 64])
        self.assertEqual(list(d.v_strides), [5 * 4 * 64, 4 * 64, 64])
        self.assertEqual(list(d.g_strides), [5 * 4 * 64, 4 * 64, 64])
        self.assertEqual(list(d.beta_strides), [5 * 4, 4, 1])
        self.assertEqual(list(d.o_strides), [5 * 4 * 64, 4 * 64, 64])
        self.assertEqual((t.q, t.k, t.v, t.g, t.beta, t.o), (0x10000, 0x20000, 0x30000, 0x40000, 0x50000, 0x60000))
        self.assertEqual((t.a_log, t.dt_bias, t.initial_state, t.final_state, t.cu_seqlens, t.cu_seqlens64),
                         (None,) * 6)
        self.assertEqual((t.n, t.total), (2, 10))
        self.assertIsNone(c.final_state)

    def test_decode_packed_sigmoid_in_place_state(self):
        p = problem(t=3, h=2, hv=4, d=128, packed=True)
        cu = FakeArray((4,), "<i8", ptr=0xa0000)
        s = f32((3, 4, 128, 128), 0x80000)
        q, k, v, g, beta, rest = call(p, cu_seqlens=cu, gate="sigmoid", A_log=f32((4,), 0x70000),
                                      dt_bias=f32((4, 128), 0x71000), lower_bound=-3.0, l2norm=True,
                                      beta_sigmoid=True, initial_state=s, final_state=s, scale=0.125,
                                      state_layout="vk")
        c = kforge.prepare_kda(q, k, v, g, beta, **rest)
        d, t = c.desc, c.tensors
        self.assertEqual((d.mode, d.max_seqs, d.max_tokens), (kforge.KF_KDA_DECODE, 3, 3))  # one token each
        self.assertEqual((d.gate, d.lower_bound, d.l2norm, d.beta_sigmoid, d.scale, d.state_layout),
                         (kforge.KF_KDA_GATE_SIGMOID, -3.0, 1, 1, 0.125, kforge.KF_KDA_STATE_VK))
        self.assertEqual((d.has_initial_state, d.wants_final_state), (1, 1))
        self.assertEqual(list(d.q_strides), [0, 2 * 128, 128])  # packed: no sequence stride
        self.assertEqual(list(d.state_strides), [4 * 128 * 128, 128 * 128, 128])
        self.assertEqual((t.cu_seqlens, t.cu_seqlens64, t.n, t.total), (None, 0xa0000, 3, 3))
        self.assertEqual((t.a_log, t.dt_bias, t.initial_state, t.final_state),
                         (0x70000, 0x71000, 0x80000, 0x80000))
        self.assertIs(c.final_state, s)

    def test_packed_with_leading_one_and_views(self):
        # q and k sliced out of a fused [1, T, 2, H, K] projection: strides of the view reach the desc
        T, h, dd = 40, 2, 64
        fused = (T * 2 * h * dd, 2 * h * dd, dd, 1)
        q = bf((1, T, h, dd), 0x10000, strides=tuple(x * 2 for x in fused))
        k = bf((1, T, h, dd), 0x10000 + h * dd * 2, strides=tuple(x * 2 for x in fused))
        p = problem(t=T, h=h, hv=2, d=dd, packed=True)
        cu = FakeArray((3,), "<i4", ptr=0xa0000)
        c = kforge.prepare_kda(q, k, p["v"], p["g"], p["beta"], out=p["out"], cu_seqlens=cu, mode="decode")
        self.assertEqual(list(c.desc.q_strides), [0, 2 * h * dd, dd])
        self.assertEqual(list(c.desc.k_strides), [0, 2 * h * dd, dd])
        self.assertEqual((c.desc.mode, c.desc.max_seqs, c.desc.max_tokens), (kforge.KF_KDA_DECODE, 2, 40))
        self.assertEqual((c.tensors.cu_seqlens, c.tensors.cu_seqlens64), (0xa0000, None))


class TestKdaThroughStub(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def test_desc_reaches_c(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub)
        q, k, v, g, beta, rest = call(problem(b=2, t=5, h=2, hv=4, d=64), scale=0.25, l2norm=True)
        with self.assertRaises(kforge.Error) as cm:
            kforge.kda(q, k, v, g, beta, ctx=ctx, **rest)
        e = cm.exception
        self.assertNotIsInstance(e, kforge.ArgumentError)
        self.assertEqual((e.status, e.call), (kforge.KF_ERR_UNSUPPORTED, "kf_kda_plan"))
        self.assertEqual(e.message,
                         "plan: mode=1 max_seqs=2 max_tokens=10 h=2 hv=4 dk=64 dv=64 gate=0 lower_bound=-5 l2norm=1 "
                         "beta_sigmoid=0 state_layout=0 h0=0 ht=0 scale=0.25 q=640,128,64 k=640,128,64 "
                         "v=1280,256,64 g=1280,256,64 beta=20,4,1 o=1280,256,64 state=0,0,0")
        ok, msg = ctx.supported(kforge.prepare_kda(q, k, v, g, beta, **rest).desc)
        self.assertFalse(ok)
        self.assertTrue(msg.startswith("KF_ERR_UNSUPPORTED: supported: mode=1"), msg)
        ctx.close()

    def test_tensors_and_stream_reach_c(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub)
        p = problem(t=6, h=7777, hv=7777, d=64, packed=True)
        s = f32((2, 7777, 64, 64), 0x80000)
        q, k, v, g, beta, rest = call(p, cu_seqlens=FakeArray((3,), "<i4", ptr=0xa0000), gate="sigmoid",
                                      A_log=f32((7777,), 0x70000), initial_state=s, final_state=s, stream=0xbeef0)
        c = ctx.bind_kda(q, k, v, g, beta, **rest)
        self.assertEqual(c.plan.variant, "attn_decode.stub")
        with self.assertRaises(kforge.Error) as cm:
            c.run()
        m = cm.exception.message
        self.assertEqual(cm.exception.call, "kf_kda_run")
        for field, val in (("q", 0x10000), ("k", 0x20000), ("v", 0x30000), ("g", 0x40000), ("beta", 0x50000),
                           ("a_log", 0x70000), ("h0", 0x80000), ("ht", 0x80000), ("o", 0x60000),
                           ("cu", 0xa0000), ("stream", 0xbeef0)):
            got = re.search(rf"\b{field}=(0x[0-9a-f]+)", m)
            self.assertIsNotNone(got, f"{field} in {m!r}")
            self.assertEqual(int(got.group(1), 16), val, field)
        self.assertIn("dt_bias=(nil) ", m)
        self.assertIn("cu64=(nil) n=2 total=6 ws=(nil)", m)
        # the plan is cached per description, apart from attention plans
        self.assertIs(ctx.bind_kda(q, k, v, g, beta, **rest).plan, c.plan)
        self.assertEqual(len(ctx.plans), 1)
        ctx.close()


if __name__ == "__main__":
    unittest.main()
