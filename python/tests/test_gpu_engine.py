"""kforge in a PyTorch engine, on a GPU (skipped without torch, CUDA or libkforge): mla_decode, parts_decode,
the torch ops, kforge.compat and vLLM's cache layout against fp64 references on awkward cases (Hq 24,
lengths 0/1/4097, shuffled pages with NaN in the unused ones); the ops and compat equal the native calls
bit for bit; torch.compile(fullgraph=True) of a small decoder layer equals eager; a CUDA graph of one
decode step through the ops replays 100 times with changing inputs, each step equal to eager.

    cd python/tests && KFORGE_LIB=../../build/libkforge.so python3 -m unittest -v test_gpu_engine
"""
import os
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
    from test_gpu import ref_kda

DEV = "cuda"
BF = torch.bfloat16 if torch is not None else None
NAN = float("nan")


def same(a, b):
    """Bit for bit (NaN patterns included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    w = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(w), b.contiguous().view(w))


def paged(lens, page, hkv, d, dtype=None, extra_pages=7, gen=None):
    """A page pool with shuffled pages: NaN in every page no sequence uses and in the rows past each length;
    returns (pool [pages, page, hkv, d], block_table int32 [B, max_pages], lens int32 [B])."""
    dtype = dtype or BF
    max_pages = max(1, max((n + page - 1) // page for n in lens))
    pages = len(lens) * max_pages + extra_pages
    pool = torch.full((pages, page, hkv, d), NAN, device=DEV, dtype=dtype)
    perm = torch.randperm(pages, device="cpu", generator=gen)
    bt = torch.zeros(len(lens), max_pages, dtype=torch.int32)
    i = 0
    for b, n in enumerate(lens):
        for p in range(max_pages):
            page_no = int(perm[i])
            bt[b, p] = page_no
            i += 1
            rows = min(page, max(0, n - p * page))
            if rows:
                pool[page_no, :rows] = torch.randn(rows, hkv, d, device=DEV, dtype=dtype)
    return pool, bt.to(DEV), torch.tensor(lens, dtype=torch.int32, device=DEV)


_CTX = []


def shared_context():
    """One context for every class here (its plans and loaded binaries are reused), made the default of
    device 0 so the ops and compat use it too."""
    if not _CTX:
        _CTX.append(kforge.Context(device=0, lib=_util.real_lib(), db=os.environ.get("KFORGE_DB") or None))
        kforge.set_default_context(_CTX[0])
    return _CTX[0]


@unittest.skipUnless(HAVE_CUDA, "skipped: needs torch with a CUDA device")
class EngineCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if _util.real_lib() is None:
            raise unittest.SkipTest("skipped: build/libkforge.so not built (or $KFORGE_LIB)")
        cls.ctx = shared_context()

    def setUp(self):
        torch.manual_seed(20)
        self.gen = torch.Generator().manual_seed(20)

    def close_to(self, o, lse, ro, rl, tol=1e-2, what=""):
        torch.cuda.synchronize()
        self.assertFalse(torch.isnan(o).any(), f"{what}: NaN in out")
        self.assertLess(_ref.rel(o, ro), tol, what)
        if lse is not None:
            fin = torch.isfinite(rl)
            self.assertTrue(torch.equal(torch.isfinite(lse), fin), f"{what}: lse -inf where the reference has no key")
            if fin.any():
                self.assertLess(float((lse.double()[fin] - rl[fin]).abs().max()), 1e-2, what)


class TestAttention(EngineCase):
    def test_paged_decode_hq24_native_op_compat_vllm(self):
        """Hq 24 / Hkv 8 (G 3), lengths 0/1/4097 in shuffled pages of 64: native, the op, flash_attn_with_kvcache
        and vLLM's combined cache all give the reference, and one another bit for bit."""
        lens, hkv, d = [0, 1, 4097], 8, 128
        kp, bt, kl = paged(lens, 64, hkv, d, gen=self.gen)
        vp = kp.clone()
        vp[~torch.isnan(vp)] = torch.randn(int((~torch.isnan(vp)).sum()), device=DEV, dtype=BF)
        q = torch.randn(3, 1, 24, d, device=DEV, dtype=BF)
        o, lse = kforge.attention(q, kp, vp, kv_len=kl, block_table=bt, lse=True)
        ro, rl = _ref.attention(q, kp, vp, kv_len=kl, block_table=bt)
        self.close_to(o, lse, ro, rl, what="native")
        self.assertTrue(torch.equal(o[0], torch.zeros_like(o[0])), "an empty sequence gives 0")
        o2, l2 = ops.attention(q, kp, vp, kv_len=kl, block_table=bt, return_lse=True)
        self.assertTrue(same(o, o2) and same(lse, l2), "op != native")
        o3, l3 = compat.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=kl, block_table=bt, return_softmax_lse=True)
        self.assertTrue(same(o, o3) and same(lse, l3), "flash_attn_with_kvcache != native")
        # vLLM: kv_cache [2, num_blocks, block_size, Hkv, D], split as views (no copy)
        kv = torch.stack([kp, vp])
        call = self.ctx.bind(q, kv, None, kv_len=kl, block_table=bt, lse=True)
        self.assertEqual(call.tensors.k, kv.data_ptr())
        self.assertEqual(call.tensors.v, kv[1].data_ptr())
        self.assertEqual(call.tensors.v - call.tensors.k, kv.stride(0) * kv.element_size())
        o4, l4 = call.run()
        torch.cuda.synchronize()
        self.assertTrue(same(o, o4) and same(lse, l4), "vLLM layout != native")
        o5 = ops.attention(q, kv, None, kv_len=kl, block_table=bt)
        self.assertTrue(same(o, o5), "op on vLLM layout != native")

    def test_kvcache_append_and_prefill_compat(self):
        """flash_attn_func (causal prefill, Sq 300) and flash_attn_with_kvcache appending 2 new keys to a
        contiguous cache: against the reference and bit for bit against native calls."""
        q = torch.randn(2, 300, 24, 128, device=DEV, dtype=BF)
        k = torch.randn(2, 300, 8, 128, device=DEV, dtype=BF)
        v = torch.randn(2, 300, 8, 128, device=DEV, dtype=BF)
        o, lse, _ = compat.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        ro, rl = _ref.attention(q, k, v, causal=True)
        self.close_to(o, lse, ro, rl, what="flash_attn_func")
        on, ln = kforge.attention(q, k, v, causal=True, lse=True)
        self.assertTrue(same(o, on) and same(lse, ln), "flash_attn_func != native")
        # decode with an in-place append: 2 new keys at cache_seqlens
        kc = torch.full((3, 4160, 8, 128), NAN, device=DEV, dtype=BF)
        vc = torch.full((3, 4160, 8, 128), NAN, device=DEV, dtype=BF)
        lens = torch.tensor([0, 1, 4095], dtype=torch.int32, device=DEV)
        for b, n in enumerate(lens.tolist()):
            kc[b, :n] = torch.randn(n, 8, 128, device=DEV, dtype=BF)
            vc[b, :n] = torch.randn(n, 8, 128, device=DEV, dtype=BF)
        qd = torch.randn(3, 2, 24, 128, device=DEV, dtype=BF)
        kn = torch.randn(3, 2, 8, 128, device=DEV, dtype=BF)
        vn = torch.randn(3, 2, 8, 128, device=DEV, dtype=BF)
        o, lse = compat.flash_attn_with_kvcache(qd, kc, vc, k=kn, v=vn, cache_seqlens=lens, causal=True,
                                                return_softmax_lse=True)
        nl = lens + 2   # 2, 3, 4097
        ro, rl = _ref.attention(qd, kc, vc, causal=True, kv_len=nl)
        self.close_to(o, lse, ro, rl, what="flash_attn_with_kvcache append")
        self.assertTrue(torch.equal(kc[2, 4095:4097], kn[2]))
        on, ln = kforge.attention(qd, kc, vc, causal=True, kv_len=nl, lse=True)
        self.assertTrue(same(o, on) and same(lse, ln), "flash_attn_with_kvcache != native")

    def test_varlen_compat(self):
        """flash_attn_varlen_func: packed q [total, Hq, D] with lengths 37/1/300 over keys 100/1/300 (and an
        empty key set), lse [Hq, total]; equal to native over the same padded keys."""
        lq, lk = [37, 1, 300, 4], [100, 1, 300, 0]
        cq = torch.tensor([0] + torch.tensor(lq).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
        ck = torch.tensor([0] + torch.tensor(lk).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
        q = torch.randn(sum(lq), 24, 128, device=DEV, dtype=BF)
        k = torch.randn(sum(lk), 8, 128, device=DEV, dtype=BF)
        v = torch.randn(sum(lk), 8, 128, device=DEV, dtype=BF)
        o, lse, _ = compat.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=True,
                                                   return_attn_probs=True)
        torch.cuda.synchronize()
        for b in range(len(lq)):
            sq, sk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
            ro, rl = _ref.attention(q[None, sq], k[None, sk], v[None, sk], causal=True)
            self.close_to(o[sq], lse[:, sq], ro[0], rl[0], what=f"varlen sequence {b}")
        pos = (ck[:-1, None].long() + torch.arange(max(lk), device=DEV)[None]).clamp(max=k.shape[0] - 1)
        on, ln = kforge.attention(q, k[pos], v[pos], causal=True, kv_len=(ck[1:] - ck[:-1]).int(), cu_seqlens_q=cq,
                                  max_seqlen_q=max(lq), lse=True)
        self.assertTrue(same(o, on) and same(lse, ln), "flash_attn_varlen_func != native")

    def test_sdpa(self):
        """compat.sdpa in [B, H, S, D]: SDPA's top-left causal mask for Sq < Skv and Sq > Skv (against torch's
        own SDPA in fp32), GQA; bottom_right equals native on the transposed views bit for bit."""
        for sq, skv in ((5, 300), (300, 300), (300, 40)):
            q = torch.randn(2, 24, sq, 128, device=DEV, dtype=BF)
            k = torch.randn(2, 8, skv, 128, device=DEV, dtype=BF)
            v = torch.randn(2, 8, skv, 128, device=DEV, dtype=BF)
            got = compat.sdpa(q, k, v, is_causal=True, enable_gqa=True)
            want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                                                     enable_gqa=True)
            torch.cuda.synchronize()
            self.assertLess(_ref.rel(got, want), 1e-2, f"sdpa top-left sq {sq} skv {skv}")
        q = torch.randn(2, 24, 5, 128, device=DEV, dtype=BF)
        k = torch.randn(2, 8, 300, 128, device=DEV, dtype=BF)
        v = torch.randn(2, 8, 300, 128, device=DEV, dtype=BF)
        got = compat.sdpa(q, k, v, is_causal=True, enable_gqa=True, causal_align="bottom_right")
        nat = kforge.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        self.assertTrue(same(got, nat.transpose(1, 2)), "sdpa bottom_right != native")


class TestMlaParts(EngineCase):
    def mla_case(self, b_lens, sq, hq, causal):
        kv, bt, kl = paged(b_lens, 64, 1, 576, gen=self.gen)
        q = torch.randn(len(b_lens), sq, hq, 576, device=DEV, dtype=BF)
        o, lse = kforge.mla_decode(q, kv, bt, kl, causal=causal, return_lse=True)
        ro, rl = _ref.mla(q, kv, bt, kl, causal=causal)
        self.close_to(o, lse, ro, rl, what=f"mla hq {hq} sq {sq}")
        self.assertEqual(o.shape, (len(b_lens), sq, hq, 512))
        # bind: run() only enqueues, and gives the same bits; the op too
        call = self.ctx.bind_mla(q, kv, bt, kl, causal=causal, return_lse=True)
        o2, l2 = call.run()
        o3, l3 = ops.mla_decode(q, kv, bt, kl, causal=causal, return_lse=True)
        torch.cuda.synchronize()
        self.assertTrue(same(o, o2) and same(lse, l2), "bind != call")
        self.assertTrue(same(o, o3) and same(lse, l3), "op != native")

    def test_mla_hq24_lengths_0_1_4097(self):
        self.mla_case([0, 1, 4097], 1, 24, False)

    def test_mla_fp8_latent_cache(self):
        # e4m3 rows with one fp32 scale per token (amax / 448: the largest value of each row at e4m3's limit)
        # against the fp64 reference on the same dequantised values; NaN pages and tails stay NaN (never read)
        for hq, sq, causal in ((16, 1, False), (128, 2, True)):
            kv, bt, kl = paged([0, 1, 63, 4097], 64, 1, 576, gen=self.gen)
            sc = kv.float().abs().amax(dim=(2, 3)) / 448.0                  # [pages, 64]
            kv8 = (kv.float() / sc[:, :, None, None]).to(torch.float8_e4m3fn)
            q = torch.randn(4, sq, hq, 576, device=DEV, dtype=BF)
            o, lse = kforge.mla_decode(q, kv8, bt, kl, kv_scale=sc, causal=causal, return_lse=True)
            ro, rl = _ref.mla(q, kv8.double() * sc.double()[:, :, None, None], bt, kl, causal=causal)
            self.close_to(o, lse, ro, rl, what=f"mla fp8 hq {hq} sq {sq}")

    def test_mla_hq128_sq2_causal(self):
        self.mla_case([1, 4097, 64], 2, 128, True)

    def test_parts_base_delta_two_layers(self):
        """parts_decode: base 128 shared by 2 layers + delta 32 per layer, separate values, Hq 24 / Hkv 8,
        lengths 0/1/4097 with NaN past them; each layer against the fp64 reference."""
        lens, b, hq, hkv, cap = [0, 1, 4097], 3, 24, 8, 4104
        kl = torch.tensor(lens, dtype=torch.int32, device=DEV)

        def cache(dim):
            c = torch.full((b, cap, hkv, dim), NAN, device=DEV, dtype=BF)
            for i, n in enumerate(lens):
                c[i, :n] = torch.randn(n, hkv, dim, device=DEV, dtype=BF)
            return c
        kb, vb = cache(128), cache(128)
        kd, vd = [cache(32), cache(32)], [cache(32), cache(32)]
        q = [[torch.randn(b, 1, hq, 128, device=DEV, dtype=BF), torch.randn(b, 1, hq, 32, device=DEV, dtype=BF)]
             for _ in range(2)]
        outs, lses = kforge.parts_decode(q, [[kb, kd[0]], [None, kd[1]]], [[vb, vd[0]], [None, vd[1]]],
                                         parts="base128_delta32", cache_seqlens=kl, lse=True, softmax_scale=0.08)
        for l in range(2):
            ro, rl = _ref.parts(q[l], [kb, kd[l]], [vb, vd[l]], kv_len=kl, scale=0.08)
            self.close_to(outs[l], lses[l], ro, rl, what=f"parts layer {l}")
        self.assertEqual(outs[0].shape, (b, 1, hq, 160))


class TestCompileAndGraphs(EngineCase):
    """torch.compile(fullgraph=True) and CUDA graphs through kforge.ops."""

    def decode_inputs(self):
        lens = [5, 1, 4000]
        kp, bt, kl = paged(lens, 64, 8, 128, gen=self.gen)
        kp = torch.randn_like(kp)   # no NaN: the graph's steps grow sequence 0 past its first length
        vp = torch.randn_like(kp)
        mkv, mbt, mkl = paged([700, 1, 4097], 64, 1, 576, gen=self.gen)
        n, h, hv, dk = 3, 2, 4, 128
        unit = torch.nn.functional.normalize   # |k| = 1 keeps the delta rule's state bounded over 100 steps
        kda = dict(q=torch.randn(n, 1, h, dk, device=DEV, dtype=BF),
                   k=unit(torch.randn(n, 1, h, dk, device=DEV), dim=-1).to(BF),
                   v=torch.randn(n, 1, hv, dk, device=DEV, dtype=BF) * 0.5,
                   g=-torch.rand(n, 1, hv, dk, device=DEV) * 0.2, beta=torch.rand(n, 1, hv, device=DEV),
                   state=torch.randn(n, hv, dk, dk, device=DEV) * 0.1)
        return kp, vp, bt, kl, mkv, mbt, mkl, kda

    def test_compile_fullgraph_decoder_layer(self):
        kp, vp, bt, kl, mkv, mbt, mkl, kd = self.decode_inputs()

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.wq = torch.nn.Linear(512, 24 * 128, bias=False, device=DEV, dtype=BF)
                self.wo = torch.nn.Linear(24 * 128, 512, bias=False, device=DEV, dtype=BF)
                self.wm = torch.nn.Linear(512, 16 * 576, bias=False, device=DEV, dtype=BF)

            def forward(self, x, state):
                b = x.shape[0]
                q = self.wq(x).view(b, 1, 24, 128)
                a = ops.attention(q, kp, vp, kv_len=kl, block_table=bt)
                m = ops.mla_decode(self.wm(x).view(b, 1, 16, 576), mkv, mbt, mkl)
                o = ops.kda_inplace(kd["q"], kd["k"], kd["v"], kd["g"], kd["beta"], state)
                return self.wo(a.view(b, 1, -1)) + m[..., :1].sum(-2).sum(-1, keepdim=True) + o.float().mean()

        layer = Layer()
        x = torch.randn(3, 1, 512, device=DEV, dtype=BF)
        s_eager, s_comp = kd["state"].clone(), kd["state"].clone()
        # serving runs without autograd (the ops are forward only): with the Linear weights requiring grad,
        # inductor would trace a backward the kernels do not have
        with torch.no_grad():
            want = layer(x, s_eager)    # eager first: also makes the plans
            torch._dynamo.reset()
            backend = os.environ.get("KFORGE_TEST_COMPILE_BACKEND", "inductor")
            got = torch.compile(layer, fullgraph=True, backend=backend)(x, s_comp)
        torch.cuda.synchronize()
        self.assertLess(_ref.rel(got, want), 2e-2)
        self.assertLess(_ref.rel(s_comp, s_eager), 1e-5, "kda_inplace's state under torch.compile")

    def test_cuda_graph_100_decode_steps(self):
        """One decode step (attention, MLA, KDA in place) captured once; replayed 100 times with new queries,
        new lengths and the carried state; each replay equals the eager ops on the same inputs bit for bit,
        and the first equals the fp64 reference."""
        kp, vp, bt, kl, mkv, mbt, mkl, kd = self.decode_inputs()
        q = torch.randn(3, 1, 24, 128, device=DEV, dtype=BF)
        mq = torch.randn(3, 1, 16, 576, device=DEV, dtype=BF)
        state = kd["state"].clone()

        def step():
            a = ops.attention(q, kp, vp, kv_len=kl, block_table=bt)
            m = ops.mla_decode(mq, mkv, mbt, mkl)
            o = ops.kda_inplace(kd["q"], kd["k"], kd["v"], kd["g"], kd["beta"], state)
            return a, m, o

        # plans outside the capture: kforge.warmup for one, an eager call for the others
        kforge.warmup("attention", q, kp, vp, kv_len=kl, block_table=bt)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            saved = state.clone()
            step()
            state.copy_(saved)
        torch.cuda.current_stream().wait_stream(s)
        # a plan miss inside a capture is refused, naming the way out
        g0 = torch.cuda.CUDAGraph()
        with self.assertRaises(Exception) as cm:
            with torch.cuda.graph(g0):
                ops.attention(q[:2], kp, vp, kv_len=kl[:2], block_table=bt[:2])
        msg = str(cm.exception) + str(cm.exception.__context__)
        self.assertIn("no plan for this call exists and a CUDA graph is being captured", msg)
        del g0

        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            ga, gm, go = step()
        torch.cuda.synchronize()
        state.copy_(kd["state"])
        eager_state = kd["state"].clone()
        for i in range(100):
            q.copy_(torch.randn_like(q))
            mq.copy_(torch.randn_like(mq))
            kl.copy_(torch.tensor([1 + i, 1, 4000 - 7 * i], dtype=torch.int32, device=DEV))
            mkl.copy_(torch.tensor([700 - i, 0 if i % 2 else 1, 4097 - i], dtype=torch.int32, device=DEV))
            kd["v"].copy_(torch.randn_like(kd["v"]) * 0.5)
            g.replay()
            ea = ops.attention(q, kp, vp, kv_len=kl, block_table=bt)
            em = ops.mla_decode(mq, mkv, mbt, mkl)
            eo = ops.kda_inplace(kd["q"], kd["k"], kd["v"], kd["g"], kd["beta"], eager_state)
            torch.cuda.synchronize()
            self.assertTrue(same(ga, ea), f"step {i}: attention replay != eager")
            self.assertTrue(same(gm, em), f"step {i}: mla replay != eager")
            self.assertTrue(same(go, eo), f"step {i}: kda replay != eager")
            self.assertTrue(same(state, eager_state), f"step {i}: kda state replay != eager")
            if i == 0:
                ro, _ = _ref.attention(q, kp, vp, kv_len=kl, block_table=bt)
                self.assertLess(_ref.rel(ga, ro), 1e-2)
                rm, _ = _ref.mla(mq, mkv, mbt, mkl)
                self.assertLess(_ref.rel(gm, rm), 1e-2)

    def test_opcheck(self):
        """torch.library.opcheck: the schemas (what is mutated, nothing aliased) and the fake implementations
        agree with what the real ops do."""
        kp, vp, bt, kl, mkv, mbt, mkl, kd = self.decode_inputs()
        q = torch.randn(3, 1, 24, 128, device=DEV, dtype=BF)
        mq = torch.randn(3, 1, 16, 576, device=DEV, dtype=BF)
        utils = ("test_schema", "test_faketensor")
        torch.library.opcheck(torch.ops.kforge.attention.default, (q, kp, vp, kl, bt, None, 0, False, None, True),
                              test_utils=utils)
        torch.library.opcheck(torch.ops.kforge.mla_decode.default, (mq, mkv, mbt, mkl, None, False, True),
                              test_utils=utils)
        torch.library.opcheck(torch.ops.kforge.kda_inplace.default,
                              (kd["q"], kd["k"], kd["v"], kd["g"], kd["beta"], kd["state"], None, None, None, None,
                               "log", -5.0, False, False, "kv", "auto"), test_utils=utils)

    def test_kda_op_equals_native_and_reference(self):
        n, h, hv, dk = 4, 2, 8, 128
        q = torch.randn(n, 1, h, dk, device=DEV, dtype=BF)
        k = torch.nn.functional.normalize(torch.randn(n, 1, h, dk, device=DEV), dim=-1).to(BF)
        v = torch.randn(n, 1, hv, dk, device=DEV, dtype=BF)
        g = -torch.rand(n, 1, hv, dk, device=DEV) * 0.5
        beta = torch.rand(n, 1, hv, device=DEV)
        h0 = torch.randn(n, hv, dk, dk, device=DEV) * 0.1
        o, s = ops.kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        on, sn = kforge.kda(q, k, v, g, beta, initial_state=h0, final_state=True)
        torch.cuda.synchronize()
        self.assertTrue(same(o, on) and same(s, sn), "kda op != native")
        cu = list(range(n + 1))
        ro, rs = ref_kda(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], cu, h0, dk ** -0.5, False)
        self.assertLess(_ref.rel(o[:, 0], ro), 1e-2)
        self.assertLess(_ref.rel(s, rs), 5e-3)


if __name__ == "__main__":
    unittest.main()
