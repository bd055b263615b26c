"""The torch.library ops of kforge.ops on the CPU (torch needed; skipped with a line saying so without it):
their schemas and mutation annotations, the fake (meta) implementations' shapes and dtypes, a
torch.compile(fullgraph=True) trace of a small decoder layer through them, and the refusal of a plan miss
inside a CUDA graph capture (through the stub library). The real kernels run in test_gpu_engine.py."""
import os
import unittest
from unittest import mock

import _util
from _util import FakeArray
import kforge

try:
    import torch
    import kforge.ops as ops
except ImportError:
    torch = None

needs_torch = unittest.skipIf(torch is None, "skipped: torch is not installed (the ops are registered with torch)")


def meta(*shape, dtype=None):
    return torch.empty(*shape, device="meta", dtype=dtype or torch.bfloat16)


@needs_torch
class TestSchemas(unittest.TestCase):
    def schema(self, name):
        return str(getattr(torch.ops.kforge, name).default._schema)

    def test_attention(self):
        self.assertEqual(self.schema("attention"),
                         "kforge::attention(Tensor q, Tensor k, Tensor? v, Tensor? kv_len, Tensor? block_table, "
                         "Tensor? cu_seqlens_q, SymInt max_seqlen_q, bool causal, float? scale, bool return_lse, "
                         "SymInt window_left=-1, float softcap=0., Tensor? sinks=None, Tensor? k_scale=None, "
                         "Tensor? v_scale=None) -> (Tensor, Tensor)")

    def test_mla(self):
        self.assertEqual(self.schema("mla_decode"),
                         "kforge::mla_decode(Tensor q, Tensor kv_cache, Tensor block_table, Tensor cache_seqlens, "
                         "float? softmax_scale, bool causal, bool return_lse) -> (Tensor, Tensor)")

    def test_kda_functional_and_inplace(self):
        s = self.schema("kda")
        self.assertTrue(s.startswith("kforge::kda(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, "
                                     "Tensor? initial_state, Tensor? cu_seqlens"), s)
        self.assertNotIn("!", s)   # functional: nothing mutated
        s = self.schema("kda_inplace")
        self.assertRegex(s, r"Tensor\(a\d*!\) state")   # the state is written in place
        self.assertTrue(s.endswith("-> Tensor"), s)
        for name in ("attention", "mla_decode"):
            self.assertNotIn("!", self.schema(name))


@needs_torch
class TestFake(unittest.TestCase):
    def test_attention_shapes(self):
        q, k = meta(3, 2, 24, 128), meta(3, 100, 8, 128)
        o, lse = torch.ops.kforge.attention(q, k, k, None, None, None, 0, True, None, True)
        self.assertEqual((o.shape, o.dtype, lse.shape, lse.dtype),
                         (q.shape, torch.bfloat16, (3, 24, 2), torch.float32))
        o, lse = torch.ops.kforge.attention(q, k, k, None, None, None, 0, True, None, False)
        self.assertEqual(lse.shape, (0,))
        qp = meta(10, 24, 128, dtype=torch.float16)   # packed: lse [Hq, total]
        o, lse = torch.ops.kforge.attention(qp, meta(3, 50, 8, 128, dtype=torch.float16), None, None, None,
                                            meta(4, dtype=torch.int32), 5, False, None, True)
        self.assertEqual((o.shape, o.dtype, lse.shape), ((10, 24, 128), torch.float16, (24, 10)))

    def test_mla_shapes(self):
        o, lse = torch.ops.kforge.mla_decode(meta(4, 2, 128, 576), meta(50, 64, 1, 576), meta(4, 8, dtype=torch.int32),
                                             meta(4, dtype=torch.int32), None, True, True)
        self.assertEqual((o.shape, o.dtype, lse.shape, lse.dtype), ((4, 2, 128, 512), torch.bfloat16, (4, 128, 2),
                                                                    torch.float32))

    def test_kda_shapes(self):
        q, v = meta(1, 40, 4, 128), meta(1, 40, 8, 128)
        g, beta = meta(1, 40, 8, 128, dtype=torch.float32), meta(1, 40, 8, dtype=torch.float32)
        cu = meta(3, dtype=torch.int32)
        o, s = ops.kda(q, q, v, g, beta, cu_seqlens=cu, output_final_state=True, state_layout="vk")
        self.assertEqual((o.shape, o.dtype, s.shape, s.dtype), ((1, 40, 8, 128), torch.bfloat16, (2, 8, 128, 128),
                                                                torch.float32))
        st = meta(2, 8, 128, 128, dtype=torch.float32)
        o = ops.kda_inplace(q, q, v, g, beta, st, cu_seqlens=cu)
        self.assertEqual(o.shape, v.shape)


@needs_torch
class TestCompile(unittest.TestCase):
    def test_decoder_layer_traces_fullgraph(self):
        """torch.compile(fullgraph=True) of a small decoder layer calling the three ops: one graph, each op
        in it once, shapes from the fake implementations (meta tensors: no kernel runs)."""
        hq, hkv, d = 8, 2, 64

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.wq = torch.nn.Linear(256, hq * d, bias=False, device="meta", dtype=torch.bfloat16)
                self.wo = torch.nn.Linear(hq * d, 256, bias=False, device="meta", dtype=torch.bfloat16)

            def forward(self, x, k, v, lens, q_mla, cache, bt, clens, kq, kv, g, beta, state):
                b, s, _ = x.shape
                q = self.wq(x).view(b, s, hq, d)
                a = ops.attention(q, k, v, causal=True, kv_len=lens)
                m = ops.mla_decode(q_mla, cache, bt, clens)
                o = ops.kda_inplace(kq, kq, kv, g, beta, state)
                return self.wo(a.reshape(b, s, hq * d)) + m.sum() + o.float().sum()

        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        layer = Layer()
        args = (meta(2, 1, 256), meta(2, 64, hkv, d), meta(2, 64, hkv, d), meta(2, dtype=torch.int32),
                meta(2, 1, 16, 576), meta(8, 64, 1, 576), meta(2, 4, dtype=torch.int32), meta(2, dtype=torch.int32),
                meta(2, 1, 2, 128), meta(2, 1, 4, 128), meta(2, 1, 4, 128, dtype=torch.float32),
                meta(2, 1, 4, dtype=torch.float32), meta(2, 4, 128, 128, dtype=torch.float32))
        torch._dynamo.reset()
        out = torch.compile(layer, fullgraph=True, backend=backend)(*args)
        self.assertEqual(out.shape, (2, 1, 256))
        self.assertEqual(len(graphs), 1)
        code = graphs[0].code
        for op in ("torch.ops.kforge.attention", "torch.ops.kforge.mla_decode", "torch.ops.kforge.kda_inplace"):
            self.assertEqual(code.count(op), 1, f"{op} in\n{code}")


    def test_inplace_op_functionalizes(self):
        """The mutating op through AOT autograd's functionalization (what inductor runs; the custom backend
        above skips it): a schema argument named like one of auto_functionalized's own ('mode') made it
        fail there ("auto_functionalized_v2_fake() got multiple values for argument 'mode'")."""
        def f(kq, kv, g, beta, state):
            return ops.kda_inplace(kq, kq, kv, g, beta, state).float().sum()

        args = (meta(2, 1, 2, 128), meta(2, 1, 4, 128), meta(2, 1, 4, 128, dtype=torch.float32),
                meta(2, 1, 4, dtype=torch.float32), meta(2, 4, 128, 128, dtype=torch.float32))
        torch._dynamo.reset()
        out = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
        self.assertEqual(out.shape, ())


@needs_torch
class TestCapture(unittest.TestCase):
    """Inside a capture the op refuses a call whose plan does not exist yet; a warmed plan runs."""

    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def setUp(self):
        from kforge import api
        self.saved = dict(api._defaults)
        self.addCleanup(lambda: (api._defaults.clear(), api._defaults.update(self.saved)))
        self.env = mock.patch.dict(os.environ, {"KFORGE_LIB": self.stub, "KFORGE_DB": "stub-ok"})
        self.env.start()
        self.addCleanup(self.env.stop)
        api._defaults.clear()

    def call(self, hq=7777):
        q = FakeArray((2, 1, hq, 64), "<f2", ptr=0x10000)
        k = FakeArray((2, 100, 1, 64), "<f2", ptr=0x20000)
        c = kforge.prepare(q, k, k, out=FakeArray((2, 1, hq, 64), "<f2", ptr=0x30000))
        c.device = 0
        return c

    def test_plan_miss_inside_capture_refused(self):
        with mock.patch.object(ops, "_capturing", return_value=True):
            with self.assertRaises(kforge.Error) as cm:   # no context yet: none is opened inside a capture
                ops._run("kforge::attention", self.call())
            self.assertIn("kforge::attention: no plan for this call exists and a CUDA graph is being captured",
                          str(cm.exception))
            self.assertIn("kforge.warmup", str(cm.exception))
            ctx = kforge.Context(db="stub-ok")
            kforge.set_default_context(ctx)
            with self.assertRaises(kforge.Error) as cm:   # a context, but not this plan
                ops._run("kforge::attention", self.call())
            self.assertIn("no plan for this call exists", str(cm.exception))
            self.assertIn("hq=7777", str(cm.exception))
            self.assertEqual(ctx.plans, [])   # nothing was planned inside the capture
        # warm outside the capture; then the captured call reaches kf_attn_run (the stub refuses it there)
        call = self.call()
        kforge.warmup("attention", call._keep[0], call._keep[1], call._keep[2], out=call.out, ctx=ctx)
        self.assertEqual(len(ctx.plans), 1)
        with mock.patch.object(ops, "_capturing", return_value=True):
            with self.assertRaises(kforge.Error) as cm:
                ops._run("kforge::attention", self.call())
            self.assertEqual(cm.exception.call, "kf_attn_run")

    def test_warmup_names(self):
        with self.assertRaises(kforge.ArgumentError) as cm:
            kforge.warmup("flash", 1, 2)
        self.assertIn("warmup: call must be one of ['attention', 'kda', 'mla_decode', 'parts_decode']", str(cm.exception))


@needs_torch
class TestRealBodiesThroughStub(unittest.TestCase):
    """The ops' real implementations (not the fake ones) reach kf_*_run through the stub library with the
    tensors' own pointers: CPU tensors stand in for CUDA ones (the binding's CUDA check is patched), hq / h
    7777 makes the stub plan, and its run reports what it got."""

    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def setUp(self):
        from kforge import api, _tensor
        self.saved = dict(api._defaults)
        self.addCleanup(lambda: (api._defaults.clear(), api._defaults.update(self.saved)))
        api._defaults.clear()
        self.ctx = kforge.Context(db="stub-ok", lib=self.stub)
        kforge.set_default_context(self.ctx)
        real = _tensor._from_torch

        def cpu_as_cuda(name, x):
            if x.device.type == "cpu":
                dtype = str(x.dtype).replace("torch.", "")
                return _tensor.TensorInfo(name, x.data_ptr(), x.shape, x.stride(),
                                          _tensor._TORCH_DTYPES.get(dtype, dtype), 0, x, True)
            return real(name, x)
        for p in (mock.patch.object(_tensor, "_from_torch", cpu_as_cuda),
                  mock.patch.object(torch.cuda, "current_device", return_value=0),
                  mock.patch.object(torch.cuda, "current_stream", return_value=mock.Mock(cuda_stream=0x5150))):
            p.start()
            self.addCleanup(p.stop)

    def run_msg(self, fn, call):
        with self.assertRaises(kforge.Error) as cm:
            fn()
        self.assertEqual(cm.exception.call, call, str(cm.exception))
        return cm.exception.message

    def test_attention_op(self):
        q = torch.randn(2, 1, 7777, 64, dtype=torch.float16)
        kv = torch.randn(2, 6, 16, 1, 64, dtype=torch.float16)   # vLLM's layout, read as views
        bt = torch.zeros(2, 3, dtype=torch.int32)
        lens = torch.tensor([5, 40], dtype=torch.int32)
        m = self.run_msg(lambda: ops.attention(q, kv, None, kv_len=lens, block_table=bt), "kf_attn_run")
        for f, t in (("q", q), ("k", kv[0]), ("v", kv[1]), ("kv_len", lens)):
            self.assertIn(f"{f}={hex(t.data_ptr())} ", m + " ")
        self.assertIn("stream=0x5150", m)

    def test_mla_op_and_compat(self):
        q = torch.randn(1, 1, 7777, 576, dtype=torch.bfloat16)
        cache = torch.randn(4, 64, 1, 576, dtype=torch.bfloat16)
        bt = torch.zeros(1, 4, dtype=torch.int32)
        lens = torch.tensor([100], dtype=torch.int32)
        m = self.run_msg(lambda: ops.mla_decode(q, cache, bt, lens, return_lse=True), "kf_parts_run")
        self.assertIn(f"q[0][1]={hex(q.data_ptr() + 1024)}/", m)
        self.assertIn(f"k[0][0]={hex(cache.data_ptr())}/36864,576,576", m)
        self.assertIn("lse[0]=0x", m)
        import kforge.compat as compat
        kc = torch.randn(1, 64, 1, 64, dtype=torch.float16)
        qq = torch.randn(1, 1, 7777, 64, dtype=torch.float16)
        m = self.run_msg(lambda: compat.flash_attn_with_kvcache(qq, kc, kc, cache_seqlens=7), "kf_attn_run")
        self.assertIn(f"k={hex(kc.data_ptr())} ", m)
        m = self.run_msg(lambda: compat.sdpa(qq.transpose(1, 2), kc.transpose(1, 2), kc.transpose(1, 2),
                                             enable_gqa=True), "kf_attn_run")
        self.assertIn(f"q={hex(qq.data_ptr())} ", m)

    def test_kda_ops(self):
        q = torch.randn(2, 1, 77, 64, dtype=torch.bfloat16)   # h 77: the stub plans it
        v = torch.randn(2, 1, 77, 64, dtype=torch.bfloat16)
        g = torch.randn(2, 1, 77, 64)
        beta = torch.randn(2, 1, 77)
        state = torch.randn(2, 77, 64, 64)
        m = self.run_msg(lambda: ops.kda_inplace(q, q, v, g, beta, state), "kf_kda_run")
        self.assertIn(f"h0={hex(state.data_ptr())} ht={hex(state.data_ptr())} ", m)
        m = self.run_msg(lambda: ops.kda(q, q, v, g, beta, output_final_state=True), "kf_kda_run")
        self.assertIn("h0=(nil) ht=0x", m)


if __name__ == "__main__":
    unittest.main()
