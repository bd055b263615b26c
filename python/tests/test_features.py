"""The model features in the binding (issue 21): sliding window, softcap, sinks, FP8 (e4m3) K/V with per-head
scales, paged prefill: the desc / tensors fields prepare() builds, what it refuses before any C call, and the
fields reaching C (the stub library). No torch, no GPU."""
import re
import unittest

import _util
from _util import FakeArray, Untouchable
import kforge
from kforge import api


def arr(shape, typestr="<f2", ptr=0x100000, strides=None, **kw):
    return FakeArray(shape, typestr, ptr=ptr, strides=strides, **kw)


def e4m3(shape, ptr):
    return FakeArray(shape, "<V1", ptr=ptr, descr=[("e4m3", "<V1")])


def qkvo(b=2, sq=1, hq=8, hkv=2, d=128, skv=256):
    return (arr((b, sq, hq, d), ptr=0x10000), arr((b, skv, hkv, d), ptr=0x20000),
            arr((b, skv, hkv, d), ptr=0x30000), arr((b, sq, hq, d), ptr=0x40000))


class TestFeatureFields(unittest.TestCase):
    def test_plain_desc_has_no_feature(self):
        q, k, v, o = qkvo()
        d = kforge.prepare(q, k, v, out=o).desc
        self.assertEqual((d.window, d.window_left, d.softcap, d.sinks, d.kv_dtype), (0, 0, 0.0, 0, kforge.KF_KV_SAME))

    def test_window_softcap_sinks(self):
        q, k, v, o = qkvo()
        sinks = arr((8,), "<f4", ptr=0x50000)
        c = kforge.prepare(q, k, v, out=o, causal=True, window_left=128, softcap=50.0, sinks=sinks)
        d, t = c.desc, c.tensors
        self.assertEqual((d.window, d.window_left, d.sinks), (1, 128, 1))
        self.assertAlmostEqual(d.softcap, 50.0)
        self.assertEqual(t.sinks, 0x50000)
        self.assertIsNone(t.k_scale)
        c0 = kforge.prepare(q, k, v, out=o, causal=True, window_left=0)   # W = 0: each query sees its own key
        self.assertEqual((c0.desc.window, c0.desc.window_left), (1, 0))

    def test_fp8_kv(self):
        q, o = arr((2, 1, 8, 128), ptr=0x10000), arr((2, 1, 8, 128), ptr=0x40000)
        k, v = e4m3((2, 256, 2, 128), 0x20000), e4m3((2, 256, 2, 128), 0x30000)
        ks, vs = arr((2,), "<f4", ptr=0x60000), arr((2,), "<f4", ptr=0x61000)
        c = kforge.prepare(q, k, v, out=o, k_scale=ks, v_scale=vs)
        self.assertEqual((c.desc.kv_dtype, c.desc.dtype), (kforge.KF_KV_E4M3, kforge.KF_FP16))
        self.assertEqual(list(c.desc.k_strides), [256 * 2 * 128, 2 * 128, 128])   # bytes: one byte an element
        self.assertEqual((c.tensors.k_scale, c.tensors.v_scale), (0x60000, 0x61000))
        self.assertIsNone(c.tensors.sinks)

    def test_paged_prefill(self):
        q, o = arr((3, 100, 8, 128)), arr((3, 100, 8, 128))
        pool = arr((40, 16, 2, 128))
        bt = arr((3, 20), "<i4", ptr=0x7000)
        c = kforge.prepare(q, pool, pool, out=o, causal=True, block_table=bt, window_left=64)
        self.assertEqual((c.desc.kind, c.desc.page_size, c.desc.max_kv, c.desc.window), (kforge.KF_ATTN_PREFILL, 16,
                                                                                          320, 1))

    def test_plans_keyed_on_features(self):
        q, k, v, o = qkvo()
        sinks = arr((8,), "<f4", ptr=0x50000)
        keys = {api._desc_key(kforge.prepare(q, k, v, out=o, causal=True, **kw).desc)
                for kw in ({}, {"window_left": 128}, {"window_left": 64}, {"softcap": 30.0}, {"softcap": 50.0},
                           {"sinks": sinks})}
        self.assertEqual(len(keys), 6)


class TestFeaturesRefusedBeforeC(_util.NoLibrary):
    def refused(self, pattern, *args, **kw):
        for ctx in (Untouchable(), None):
            with self.assertRaises(kforge.ArgumentError) as cm:
                kforge.attention(*args, ctx=ctx, **kw)
            self.assertRegex(str(cm.exception), pattern)

    def test_window(self):
        q, k, v, o = qkvo()
        self.refused(r"window_left=128: a sliding window needs causal=True", q, k, v, out=o, window_left=128)
        self.refused(r"window_left must be None \(no window\) or an int >= 0", q, k, v, out=o, causal=True,
                     window_left=-1)
        self.refused(r"window_left must be", q, k, v, out=o, causal=True, window_left=True)
        self.refused(r"window_left must be", q, k, v, out=o, causal=True, window_left=4.0)

    def test_softcap(self):
        q, k, v, o = qkvo()
        for bad in (-1.0, 1e-5, float("inf"), float("nan")):
            self.refused(r"softcap must be 0 \(none\) or a finite cap >= 0.001", q, k, v, out=o, softcap=bad)
        self.refused(r"softcap must be a number", q, k, v, out=o, softcap="50")

    def test_sinks(self):
        q, k, v, o = qkvo()
        self.refused(r"sinks: expected a contiguous fp32 \[8\]; got fp32 \(2,\)", q, k, v, out=o,
                     sinks=arr((2,), "<f4"))
        self.refused(r"sinks: expected a contiguous fp32 \[8\]; got fp16", q, k, v, out=o, sinks=arr((8,)))
        self.refused(r"sinks: expected a CUDA tensor", q, k, v, out=o, sinks=[0.0] * 8)

    def test_fp8(self):
        q, _, _, o = qkvo()
        k, v = e4m3((2, 256, 2, 128), 0x20000), e4m3((2, 256, 2, 128), 0x30000)
        ks = arr((2,), "<f4", ptr=0x60000)
        self.refused(r"k_scale and v_scale \(fp32 \[Hkv\], the per-head dequantisation scales\) are required", q, k, v,
                     out=o)
        self.refused(r"k_scale and v_scale .* are required", q, k, v, out=o, k_scale=ks)
        self.refused(r"k_scale: expected a contiguous fp32 \[2\]; got fp32 \(8,\)", q, k, v, out=o,
                     k_scale=arr((8,), "<f4"), v_scale=ks)
        self.refused(r"FP8 K/V are both e4m3; got e4m3, fp16", q, k, arr((2, 256, 2, 128)), out=o, k_scale=ks,
                     v_scale=ks)
        q2, k2, v2, o2 = qkvo()
        self.refused(r"k_scale / v_scale are for FP8 \(e4m3\) k and v; k and v are fp16", q2, k2, v2, out=o2,
                     k_scale=ks, v_scale=ks)
        self.refused(r"q: dtype e4m3 is not supported", e4m3((2, 1, 8, 128), 0x10000), k, v, out=o, k_scale=ks,
                     v_scale=ks)


class TestFeaturesThroughStub(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def test_desc_fields_reach_c(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub)
        q, o = arr((2, 1, 8, 128), ptr=0x10000), arr((2, 1, 8, 128), ptr=0x40000)
        k, v = e4m3((2, 256, 2, 128), 0x20000), e4m3((2, 256, 2, 128), 0x30000)
        ks, vs = arr((2,), "<f4", ptr=0x60000), arr((2,), "<f4", ptr=0x61000)
        with self.assertRaises(kforge.Error) as cm:
            kforge.attention(q, k, v, out=o, causal=True, window_left=4096, softcap=30.0, sinks=arr((8,), "<f4"),
                             k_scale=ks, v_scale=vs, ctx=ctx)
        self.assertTrue(cm.exception.message.endswith(
            " window=1 window_left=4096 softcap=30 sinks=1 kv_dtype=1"), cm.exception.message)
        ctx.close()

    def test_tensors_fields_reach_c(self):
        ctx = kforge.Context(db="stub-ok", lib=self.stub)
        q, o = arr((2, 1, 7777, 128), ptr=0x10000), arr((2, 1, 7777, 128), ptr=0x40000)
        k, v = e4m3((2, 256, 1, 128), 0x20000), e4m3((2, 256, 1, 128), 0x30000)
        call = ctx.bind(q, k, v, out=o, sinks=arr((7777,), "<f4", ptr=0x50000), k_scale=arr((1,), "<f4", ptr=0x60000),
                        v_scale=arr((1,), "<f4", ptr=0x61000))
        with self.assertRaises(kforge.Error) as cm:
            call.run()
        m = cm.exception.message
        for field, val in (("sinks", 0x50000), ("k_scale", 0x60000), ("v_scale", 0x61000)):
            got = re.search(rf"\b{field}=(0x[0-9a-f]+)", m)
            self.assertIsNotNone(got, f"{field} in {m!r}")
            self.assertEqual(int(got.group(1), 16), val, field)
        ctx.close()


if __name__ == "__main__":
    unittest.main()
