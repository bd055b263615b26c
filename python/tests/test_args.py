"""Argument checks of the binding: refused in Python, before any call into libkforge; and the
description/tensors structs it builds (read back through the stub library when a C compiler
is present). No torch, no GPU."""
import re
import unittest

import _util
from _util import FakeArray, Untouchable, contiguous_bytes
import kforge


def arr(shape, typestr="<f2", ptr=0x100000, strides=None, **kw):
    return FakeArray(shape, typestr, ptr=ptr, strides=strides, **kw)


def qkv(b=2, sq=1, hq=8, hkv=2, d=64, skv=100, typestr="<f2"):
    return (arr((b, sq, hq, d), typestr, 0x10000), arr((b, skv, hkv, d), typestr, 0x20000),
            arr((b, skv, hkv, d), typestr, 0x30000), arr((b, sq, hq, d), typestr, 0x40000))


class TestRefusedBeforeC(_util.NoLibrary):
    def refused(self, pattern, *args, **kw):
        for ctx in (Untouchable(), None):
            with self.assertRaises(kforge.ArgumentError) as cm:
                kforge.attention(*args, ctx=ctx, **kw)
            e = cm.exception
            self.assertIsInstance(e, kforge.Error)
            self.assertIsInstance(e, ValueError)
            self.assertEqual(e.status, kforge.KF_ERR_ARG)
            self.assertIsNone(e.call)
            self.assertRegex(str(e), pattern)
        return e

    def test_non_contiguous_last_dim(self):
        q, k, v, o = qkv()
        # k with element stride 2 on the head dim (every other element)
        shape = (2, 100, 2, 64)
        st = list(contiguous_bytes(shape, 2))
        st = [s * 2 for s in st[:-1]] + [4]
        k_bad = arr(shape, strides=tuple(st))
        self.refused(r"k: the last dimension must be contiguous", q, k_bad, v, out=o)
        q_bad = arr((2, 1, 8, 64), strides=(2 * 8 * 64 * 2 * 2, 8 * 64 * 2 * 2, 64 * 2 * 2, 4))
        self.refused(r"q: the last dimension must be contiguous", q_bad, k, v, out=o)
        o_bad = arr((2, 1, 8, 64), strides=(2 * 8 * 64 * 2 * 2, 8 * 64 * 2 * 2, 64 * 2 * 2, 4))
        self.refused(r"out: the last dimension must be contiguous", q, k, v, out=o_bad)

    def test_wrong_dtype(self):
        q, k, v, o = qkv(typestr="<f4")
        self.refused(r"q: dtype fp32 is not supported \(bf16 or fp16\)", q, k, v, out=o)
        q, k, v, o = qkv()
        self.refused(r"dtype typestr <f8", q, arr((2, 100, 2, 64), "<f8"), v, out=o)
        self.refused(r"one dtype", q, k, arr((2, 100, 2, 64), "<V2",
                                              descr=[("bfloat16", "<V2")]), out=o)
        self.refused(r"out: expected fp16", q, k, v, out=arr((2, 1, 8, 64), "<f4"))

    def test_shapes(self):
        q, k, v, o = qkv()
        self.refused(r"q: expected \[B, Sq, Hq, D\]", arr((1, 8, 64)), k, v, out=o)
        self.refused(r"k and v shapes differ", q, k, arr((2, 99, 2, 64)), out=o)
        self.refused(r"head dim", q, arr((2, 100, 2, 128)), arr((2, 100, 2, 128)), out=o)
        self.refused(r"multiple of Hkv", q, arr((2, 100, 3, 64)), arr((2, 100, 3, 64)), out=o)
        self.refused(r"batch of k/v", q, arr((3, 100, 2, 64)), arr((3, 100, 2, 64)), out=o)
        self.refused(r"kv_len 101 is outside", q, k, v, out=o, kv_len=101)
        self.refused(r"kv_len: expected a contiguous int32 \[2\]", q, k, v, out=o, kv_len=arr((3,), "<i4"))
        self.refused(r"out= is required", q, k, v)
        self.refused(r"expected a CUDA tensor", [1, 2], k, v, out=o)
        self.refused(r"kind: 'decode' or 'prefill'", q, k, v, out=o, kind="mla")
        self.refused(r"lse=True needs torch|lse: ", q, k, v, out=o, lse=True)
        self.refused(r"lse: expected a contiguous fp32", q, k, v, out=o, lse=arr((2, 8, 1), "<f2"))
        self.refused(r"cu_seqlens_q: expected int32", arr((10, 8, 64)), k, v, out=arr((10, 8, 64)),
                     cu_seqlens_q=arr((3,), "<i8"), max_seqlen_q=5)
        self.refused(r"max_seqlen_q is required", arr((10, 8, 64)), k, v, out=arr((10, 8, 64)),
                     cu_seqlens_q=arr((3,), "<i4"))
        # packed q: lse is [Hq, total_q] (kforge.h), not [B, Hq, Sq]
        self.refused(r"lse: expected a contiguous fp32 \(8, 10\)", arr((10, 8, 64)), k, v, out=arr((10, 8, 64)),
                     cu_seqlens_q=arr((3,), "<i4"), max_seqlen_q=5, lse=arr((2, 8, 5), "<f4"))

    def test_byte_strides_not_multiple(self):
        q, k, v, o = qkv()
        self.refused(r"not multiples of the element size", q, arr((2, 100, 2, 64), strides=(25601, 256, 128, 2)),
                     v, out=o)


class TestPrepare(unittest.TestCase):
    """kforge.prepare builds the desc and tensors without any library."""

    def test_decode_desc(self):
        q, k, v, o = qkv(b=2, sq=4, hq=8, hkv=2, d=64, skv=100)
        c = kforge.prepare(q, k, v, out=o, kv_len=77, causal=True)
        d, t = c.desc, c.tensors
        self.assertEqual((d.kind, d.dtype, d.hq, d.hkv, d.d, d.causal, d.max_batch, d.max_q, d.max_kv),
                         (kforge.KF_ATTN_DECODE, kforge.KF_FP16, 8, 2, 64, 1, 2, 4, 100))
        self.assertEqual(list(d.q_strides), [4 * 8 * 64, 8 * 64, 64])
        self.assertEqual(list(d.k_strides), [100 * 2 * 64, 2 * 64, 64])
        self.assertEqual((t.q, t.k, t.v, t.o), (0x10000, 0x20000, 0x30000, 0x40000))
        self.assertEqual((t.batch, t.q_len, t.kv_len_all, t.kv_len, t.lse), (2, 4, 77, None, None))

    def test_kind_default_and_strided_views(self):
        # q viewed out of a fused [B, S, 3, H, D] buffer: strides of a transpose-free slice
        b, s, h, dd = 1, 32, 4, 128
        fused = (s * 3 * h * dd, 3 * h * dd, dd, 1)
        q = arr((b, s, h, dd), "<V2", strides=tuple(x * 2 for x in fused), descr=[("bfloat16", "<V2")])
        k = arr((b, s, h, dd), "<V2", ptr=0x100000 + h * dd * 2, strides=tuple(x * 2 for x in fused),
                descr=[("bfloat16", "<V2")])
        v = arr((b, s, h, dd), "<V2", ptr=0x100000 + 2 * h * dd * 2, strides=tuple(x * 2 for x in fused),
                descr=[("bfloat16", "<V2")])
        o = arr((b, s, h, dd), "<V2", descr=[("bfloat16", "<V2")])
        c = kforge.prepare(q, k, v, out=o, scale=0.5)
        self.assertEqual(c.desc.kind, kforge.KF_ATTN_PREFILL)  # Sq 32 > 16
        self.assertEqual(c.desc.dtype, kforge.KF_BF16)
        self.assertEqual(list(c.desc.k_strides), list(fused[:3]))
        self.assertEqual(c.desc.scale, 0.5)
        c = kforge.prepare(q, k, v, out=o, kind="decode")
        self.assertEqual(c.desc.kind, kforge.KF_ATTN_DECODE)

    def test_packed(self):
        q = arr((10, 8, 64))
        k = arr((2, 100, 2, 64))
        cu = arr((3,), "<i4", ptr=0x5000)
        c = kforge.prepare(q, k, k, out=arr((10, 8, 64)), cu_seqlens_q=cu, max_seqlen_q=6)
        self.assertEqual((c.desc.packed_q, c.desc.max_batch, c.desc.max_q), (1, 2, 6))
        self.assertEqual(list(c.desc.q_strides)[1:], [8 * 64, 64])
        self.assertEqual((c.tensors.cu_seqlens_q, c.tensors.batch, c.tensors.q_len), (0x5000, 2, 6))
        self.assertEqual(c.tensors.total_q, 10)  # the rows of packed q: kf_attn_run's lse row stride
        c = kforge.prepare(q, k, k, out=arr((10, 8, 64)), cu_seqlens_q=cu, max_seqlen_q=6,
                           lse=arr((8, 10), "<f4", ptr=0x9000))
        self.assertEqual(c.tensors.lse, 0x9000)
        self.assertEqual(kforge.prepare(*qkv()[:3], out=qkv()[3]).tensors.total_q, 0)

    def test_paged(self):
        q = arr((3, 1, 8, 128))
        pool = arr((20, 64, 2, 128))                      # 20 pages of 64 keys
        bt = arr((3, 5), "<i4", ptr=0x7000)               # 5 pages per sequence
        c = kforge.prepare(q, pool, pool, out=arr((3, 1, 8, 128)), block_table=bt)
        self.assertEqual((c.desc.page_size, c.desc.max_batch, c.desc.max_kv, c.desc.kind),
                         (64, 3, 320, kforge.KF_ATTN_DECODE))
        self.assertEqual(list(c.desc.k_strides), [64 * 2 * 128, 2 * 128, 128])
        self.assertEqual((c.tensors.block_table, c.tensors.bt_stride, c.tensors.kv_len_all), (0x7000, 5, 320))
        with self.assertRaises(kforge.ArgumentError) as cm:
            kforge.prepare(q, pool, pool, out=arr((3, 1, 8, 128)), block_table=arr((3, 5), "<i8"))
        self.assertIn("block_table: expected int32", str(cm.exception))
        # paged prefill (chunked prefill over a paged cache): kind prefill, the default past Sq 16
        c = kforge.prepare(q, pool, pool, out=arr((3, 1, 8, 128)), block_table=bt, kind="prefill")
        self.assertEqual((c.desc.kind, c.desc.page_size), (kforge.KF_ATTN_PREFILL, 64))
        c = kforge.prepare(arr((3, 40, 8, 128)), pool, pool, out=arr((3, 40, 8, 128)), block_table=bt, causal=True)
        self.assertEqual((c.desc.kind, c.desc.page_size, c.desc.max_q), (kforge.KF_ATTN_PREFILL, 64, 40))
        with self.assertRaises(kforge.ArgumentError) as cm:
            kforge.prepare(arr((2, 1, 8, 128)), pool, pool, out=arr((2, 1, 8, 128)), block_table=bt)
        self.assertIn("batch of k/v (3) differs from the batch of q (2)", str(cm.exception))

    def test_cai_stream_passed_through(self):
        q, k, v, o = qkv()
        q.__cuda_array_interface__["stream"] = 0xabc0
        self.assertEqual(kforge.prepare(q, k, v, out=o).stream(), 0xabc0)
        self.assertEqual(kforge.prepare(q, k, v, out=o, stream=0x1230).stream(), 0x1230)


class TestThroughStub(unittest.TestCase):
    """The structs reach C as laid out: the stub library prints what it received."""

    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def test_desc_reaches_c(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub)
        q, k, v, o = qkv(b=3, sq=2, hq=8, hkv=2, d=64, skv=100)
        with self.assertRaises(kforge.Error) as cm:
            kforge.attention(q, k, v, out=o, causal=True, scale=0.25, ctx=ctx)
        e = cm.exception
        self.assertNotIsInstance(e, kforge.ArgumentError)
        self.assertEqual((e.status, e.call), (kforge.KF_ERR_UNSUPPORTED, "kf_attn_plan"))
        self.assertEqual(e.message,
                         "plan: kind=2 dtype=2 hq=8 hkv=2 d=64 causal=1 scale=0.25 max_batch=3 max_q=2 "
                         "max_kv=100 packed_q=0 q=1024,512,64 k=12800,128,64 v=12800,128,64 o=1024,512,64")
        self.assertIn(e.message, str(e))
        self.assertIn("KF_ERR_UNSUPPORTED", str(e))
        ctx.close()

    def test_tensors_and_stream_reach_c(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub)
        q, k, v, o = qkv(b=2, sq=1, hq=7777, hkv=1, d=64, skv=100)
        lens = arr((2,), "<i4", ptr=0x6000)
        lse = arr((2, 7777, 1), "<f4", ptr=0x7000)
        call = ctx.bind(q, k, v, out=o, kv_len=lens, lse=lse, stream=0xbeef0)
        self.assertEqual((call.plan.variant, call.plan.source, call.plan.workspace_bytes),
                         ("attn_decode.stub", "cache", 4096))
        with self.assertRaises(kforge.Error) as cm:
            call.run()
        m = cm.exception.message
        self.assertEqual(cm.exception.call, "kf_attn_run")
        for field, val in (("q", 0x10000), ("k", 0x20000), ("v", 0x30000), ("o", 0x40000),
                           ("lse", 0x7000), ("kv_len", 0x6000), ("stream", 0xbeef0)):
            got = re.search(rf"\b{field}=(0x[0-9a-f]+)", m)
            self.assertIsNotNone(got, f"{field} in {m!r}")
            self.assertEqual(int(got.group(1), 16), val, field)
        self.assertIn("cu=(nil)", m)
        self.assertIn("batch=2 q_len=1 kv_len_all=100 ws=(nil)", m)
        # the plan is cached per description
        self.assertIs(ctx.bind(q, k, v, out=o).plan, call.plan)
        self.assertEqual(len(ctx.plans), 1)
        ctx.close()
        ctx.close()  # idempotent

    def test_supported(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub)
        q, k, v, o = qkv()
        ok, msg = ctx.supported(kforge.prepare(q, k, v, out=o).desc)
        self.assertFalse(ok)
        self.assertTrue(msg.startswith("KF_ERR_UNSUPPORTED: supported: kind=2"), msg)

    def test_device_mismatch_refused(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub, device=0)
        q, k, v, o = qkv()
        call = kforge.prepare(q, k, v, out=o)
        call.device = 1
        with self.assertRaises(kforge.ArgumentError):
            call.attach(ctx)


if __name__ == "__main__":
    unittest.main()
