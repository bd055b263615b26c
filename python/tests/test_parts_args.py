"""mla_decode(), parts_decode() and vLLM's combined paged cache: the checks made in Python before any C call,
and the kf_parts_desc / kf_parts_tensors (views, strides, paging) that reach C, read back through the stub
library. No torch, no GPU."""
import re
import unittest

import _util
from _util import FakeArray, Untouchable
import kforge

BF16 = [("bfloat16", "<V2")]


def arr(shape, typestr="<V2", ptr=0x100000, strides=None):
    descr = BF16 if typestr == "<V2" else None
    return FakeArray(shape, typestr, ptr=ptr, strides=strides, descr=descr)


def mla_args(b=2, sq=1, hq=16, pages=10, max_pages=4, page=64):
    q = arr((b, sq, hq, 576), ptr=0x10000)
    cache = arr((pages, page, 1, 576), ptr=0x200000)
    bt = arr((b, max_pages), "<i4", ptr=0x7000)
    lens = arr((b,), "<i4", ptr=0x6000)
    out = arr((b, sq, hq, 512), ptr=0x400000)
    return q, cache, bt, lens, out


def e4m3(shape, ptr):
    return FakeArray(shape, "<V1", ptr=ptr, descr=[("e4m3", "<V1")])


def views(msg):
    """{"q[0][1]": (ptr, (s0, s1, s2)), ...} from the stub's run message."""
    return {m.group(1): (int(m.group(2), 16), tuple(int(x) for x in m.group(3).split(",")))
            for m in re.finditer(r" ([qkvo]\[\d\](?:\[\d\])?)=(0x[0-9a-f]+)/([-\d,]+)", msg)}


def field(msg, name):
    m = re.search(rf"\b{re.escape(name)}=(\S+)", msg)
    return m.group(1) if m else None


class TestRefusedBeforeC(_util.NoLibrary):
    def refused(self, pattern, fn, *args, **kw):
        for ctx in (Untouchable(), None):
            with self.assertRaises(kforge.ArgumentError) as cm:
                fn(*args, ctx=ctx, **kw)
            self.assertRegex(str(cm.exception), pattern)
            self.assertIsNone(cm.exception.call)

    def test_mla_refusals(self):
        q, cache, bt, lens, out = mla_args()
        mla = kforge.mla_decode
        self.refused(r"kv_scale: for FP8 \(e4m3\) caches; the caches are bf16", mla, q, cache, bt, lens, out=out,
                     kv_scale=arr((10, 64), "<f4"))
        c8 = e4m3((10, 64, 1, 576), 0x200000)
        self.refused(r"kv_scale: required with FP8 \(e4m3\) caches", mla, q, c8, bt, lens, out=out)
        self.refused(r"kv_scale: expected fp32 \[10, 64\]", mla, q, c8, bt, lens, out=out, kv_scale=arr((10, 32), "<f4"))
        self.refused(r"kv_scale: expected fp32 \[10, 64\]", mla, q, c8, bt, lens, out=out,
                     kv_scale=arr((10, 64), "<f2"))
        self.refused(r"q\[0\]\[0\]: dtype e4m3 is not supported", mla, e4m3((2, 1, 16, 576), 0x10000), c8, bt, lens,
                     out=out, kv_scale=arr((10, 64), "<f4"))
        self.refused(r"q: expected \[B, Sq, Hq, 576\]", mla, arr((2, 1, 16, 512)), cache, bt, lens, out=out)
        self.refused(r"kv_cache: expected \[pages, page_size, 1, 576\]", mla, q, arr((10, 64, 576)), bt, lens, out=out)
        self.refused(r"kv_cache: absorbed MLA has one latent KV head", mla, q, arr((10, 64, 2, 576)), bt, lens, out=out)
        self.refused(r"block_table: required", mla, q, cache, None, lens, out=out)
        self.refused(r"block_table: expected int32", mla, q, cache, arr((2, 4), "<i8"), lens, out=out)
        self.refused(r"block_table: 3 rows, q has batch 2", mla, q, cache, arr((3, 4), "<i4"), lens, out=out)
        self.refused(r"cache_seqlens: expected a contiguous int32 \[2\]", mla, q, cache, bt, arr((3,), "<i4"), out=out)
        self.refused(r"cache_seqlens 257 is outside 0..256", mla, q, cache, bt, 257, out=out)
        self.refused(r"Sq = 17; split-score decode serves 1..16", mla, arr((2, 17, 16, 576)), cache, bt, lens,
                     out=arr((2, 17, 16, 512)))
        self.refused(r"out= is required", mla, q, cache, bt, lens)
        self.refused(r"out\[0\]: expected bf16 \[2, 1, 16, 512\]", mla, q, cache, bt, lens, out=arr((2, 1, 16, 576)))
        self.refused(r"lse\[0\]: expected a contiguous fp32 \[2, 16, 1\]", mla, q, cache, bt, lens, out=out,
                     lse=arr((2, 1, 16), "<f4"))
        self.refused(r"lse=True needs torch|lse", mla, q, cache, bt, lens, out=out, return_lse=True)
        self.refused(r"dtype fp16 differs", mla, q, arr((10, 64, 1, 576), "<f2"), bt, lens, out=out)
        self.refused(r"head_dim_v: absorbed MLA returns the 512 latent columns", mla, q, cache, bt, lens, out=out,
                     head_dim_v=576)

    def test_parts_refusals(self):
        b, sq, hq, hkv = 2, 1, 8, 2
        qb, qd = arr((b, sq, hq, 128)), arr((b, sq, hq, 32))
        kb, kd = arr((b, 100, hkv, 128)), arr((b, 100, hkv, 32))
        o = arr((b, sq, hq, 128))
        pd = kforge.parts_decode
        self.refused(r"parts: 'base128_delta64' says delta is 64 wide; its tensors are 32", pd, [qb, qd], [kb, kd],
                     parts="base128_delta64", out=o)
        self.refused(r"parts: expected 2 lower-case names", pd, [qb, qd], [kb, kd], parts=["Base", "delta"], out=o)
        self.refused(r"k: expected 1 layer\(s\) of 2 parts", pd, [qb, qd], [kb], parts="base128_delta32", out=o)
        self.refused(r"k\[1\]\[0\]: key part 0 is shared", pd, [[qb, qd], [qb, qd]], [[kb, kd], [arr((b, 100, hkv, 128)), kd]],
                     parts="base128_delta32", out=[o, o])
        self.refused(r"out: expected 2 output\(s\), one per layer", pd, [[qb, qd], [qb, qd]], [[kb, kd], [None, kd]],
                     parts="base128_delta32", out=o)
        self.refused(r"k\[0\]\[1\]: expected \[2, 100, 2, 32\]", pd, [qb, qd], [kb, arr((b, 99, hkv, 32))],
                     parts="base128_delta32", out=o)
        self.refused(r"multiple of Hkv", pd, [arr((b, sq, 6, 128)), arr((b, sq, 6, 32))],
                     [arr((b, 100, 4, 128)), arr((b, 100, 4, 32))], parts="base128_delta32", out=arr((b, sq, 6, 128)))
        self.refused(r"dv: the values alias the first dv columns of key part 0 \(128 wide\)", pd, [qb, qd], [kb, kd],
                     parts="base128_delta32", out=o, dv=160)
        self.refused(r"dv: with separate values o is the 160 columns", pd, [qb, qd], [kb, kd], [kb, kd],
                     parts="base128_delta32", out=o, dv=128)
        self.refused(r"q: expected a list of parts", pd, qb, [kb, kd], parts="base128_delta32", out=o)
        self.refused(r"1..4 layers of 1..4 parts", pd, [[qb, qd]] * 5, [[kb, kd]] + [[None, kd]] * 4,
                     parts="base128_delta32", out=[o] * 5)
        kb8, kd8 = e4m3((b, 100, hkv, 128), 0x100000), e4m3((b, 100, hkv, 32), 0x110000)
        self.refused(r"k\[0\]\[1\]: dtype bf16; an FP8 cache is e4m3 in every part", pd, [qb, qd], [kb8, kd],
                     parts="base128_delta32", out=o, kv_scale=arr((b, 100, hkv), "<f4"))
        self.refused(r"FP8 \(e4m3\) caches serve the absorbed-MLA form only.*separate values", pd, [qb, qd], [kb8, kd8],
                     [kb8, kd8], parts="base128_delta32", out=arr((b, sq, hq, 160)), kv_scale=arr((b, 100, hkv), "<f4"))
        self.refused(r"FP8 \(e4m3\) caches serve the absorbed-MLA form only.*2 layers", pd, [[qb, qd], [qb, qd]],
                     [[kb8, kd8], [None, kd8]], parts="base128_delta32", out=[o, o], kv_scale=arr((b, 100, hkv), "<f4"))

    def test_vllm_cache_refusals(self):
        q = arr((2, 1, 8, 128))
        self.refused(r"kv_cache: with v=None, k is a combined cache \[2, num_blocks", kforge.attention, q,
                     arr((3, 10, 16, 2, 128)), None, block_table=arr((2, 4), "<i4"), out=arr((2, 1, 8, 128)))


class TestPrepare(unittest.TestCase):
    def test_mla_desc_and_views(self):
        q, cache, bt, lens, out = mla_args(b=2, sq=2, hq=16, pages=10, max_pages=4)
        c = kforge.prepare_mla(q, cache, bt, lens, out=out, causal=True)
        d, t = c.desc, c.tensors
        self.assertEqual((d.parts, d.value, d.dv, d.hq, d.hkv, d.layers, d.page_size, d.causal, d.max_batch,
                          d.max_q, d.max_kv, d.dtype),
                         (b"latent512_rope64", kforge.KF_PARTS_VALUE_ALIAS, 512, 16, 1, 1, 64, 1, 2, 2, 256,
                          kforge.KF_BF16))
        self.assertAlmostEqual(d.scale, 576 ** -0.5, places=6)
        qs = (2 * 16 * 576, 16 * 576, 576)
        cs = (64 * 576, 576, 576)
        self.assertEqual((t.q[0][0].ptr, tuple(t.q[0][0].strides)), (0x10000, qs))
        self.assertEqual((t.q[0][1].ptr, tuple(t.q[0][1].strides)), (0x10000 + 512 * 2, qs))
        self.assertEqual((t.k[0][0].ptr, tuple(t.k[0][0].strides)), (0x200000, cs))
        self.assertEqual((t.k[0][1].ptr, tuple(t.k[0][1].strides)), (0x200000 + 512 * 2, cs))
        self.assertEqual((t.o[0].ptr, tuple(t.o[0].strides)), (0x400000, (2 * 16 * 512, 16 * 512, 512)))
        self.assertEqual((t.kv_len, t.block_table, t.bt_stride, t.batch, t.q_len), (0x6000, 0x7000, 4, 2, 2))
        self.assertEqual([t.v[0][p].ptr for p in range(4)], [None] * 4)   # values alias the latent
        self.assertEqual([t.k[1][p].ptr for p in range(4)], [None] * 4)
        self.assertEqual(kforge.prepare_mla(q, cache, bt, 100, out=out, softmax_scale=0.1).tensors.kv_len_all, 100)

    def test_mla_fp8_desc_and_views(self):
        # the FP8 latent cache: e4m3 rows (strides and the rope's offset in bytes), per-token scales [pages, 64]
        q, _, bt, lens, out = mla_args(b=2, sq=1, hq=16, pages=10, max_pages=4)
        cache = e4m3((10, 64, 1, 576), 0x200000)
        sc = arr((10, 64), "<f4", ptr=0x300000)
        c = kforge.prepare_mla(q, cache, bt, lens, out=out, kv_scale=sc)
        d, t = c.desc, c.tensors
        self.assertEqual((d.kv_dtype, d.dtype, d.page_size, d.value, d.layers), (kforge.KF_KV_E4M3, kforge.KF_BF16, 64,
                                                                                  kforge.KF_PARTS_VALUE_ALIAS, 1))
        cs = (64 * 576, 576, 576)
        self.assertEqual((t.k[0][0].ptr, tuple(t.k[0][0].strides)), (0x200000, cs))
        self.assertEqual((t.k[0][1].ptr, tuple(t.k[0][1].strides)), (0x200000 + 512, cs))
        self.assertEqual((t.kv_scale.ptr, tuple(t.kv_scale.strides)), (0x300000, (64, 1, 1)))
        # [pages, page_size, 1] scales too; a 16-bit call leaves kv_dtype and kv_scale unset
        c3 = kforge.prepare_mla(q, cache, bt, lens, out=out, kv_scale=arr((10, 64, 1), "<f4", ptr=0x300000))
        self.assertEqual(tuple(c3.tensors.kv_scale.strides), (64, 1, 1))
        c16 = kforge.prepare_mla(q, arr((10, 64, 1, 576), ptr=0x200000), bt, lens, out=out)
        self.assertEqual((c16.desc.kv_dtype, c16.tensors.kv_scale.ptr), (kforge.KF_KV_SAME, None))

    def test_mla_strided_q(self):
        # q a view of a wider buffer ([B, Sq, Hq, 640] rows, the first 576 columns): strides pass as they are
        b, sq, hq = 1, 1, 16
        st = tuple(x * 2 for x in (sq * hq * 640, hq * 640, 640, 1))
        q = arr((b, sq, hq, 576), ptr=0x10000, strides=st)
        _, cache, bt, lens, out = mla_args(b=1, sq=1, hq=16)
        c = kforge.prepare_mla(q, cache, arr((1, 4), "<i4"), arr((1,), "<i4"), out=arr((1, 1, 16, 512)))
        self.assertEqual(tuple(c.tensors.q[0][1].strides), (sq * hq * 640, hq * 640, 640))
        self.assertEqual(c.tensors.q[0][1].ptr, 0x10000 + 1024)

    def test_parts_two_layers_separate(self):
        b, sq, hq, hkv, skv = 3, 2, 8, 2, 100
        q = [[arr((b, sq, hq, 128), ptr=0x10000 * (1 + l * 2 + p)) if p == 0 else
              arr((b, sq, hq, 32), ptr=0x10000 * (1 + l * 2 + p)) for p in range(2)] for l in range(2)]
        kb, kd0, kd1 = arr((b, skv, hkv, 128), ptr=0x100000), arr((b, skv, hkv, 32), ptr=0x110000), \
            arr((b, skv, hkv, 32), ptr=0x120000)
        vb, vd0, vd1 = arr((b, skv, hkv, 128), ptr=0x200000), arr((b, skv, hkv, 32), ptr=0x210000), \
            arr((b, skv, hkv, 32), ptr=0x220000)
        outs = [arr((b, sq, hq, 160), ptr=0x300000), arr((b, sq, hq, 160), ptr=0x310000)]
        c = kforge.prepare_parts(q, [[kb, kd0], [None, kd1]], [[vb, vd0], [vb, vd1]], parts=["base", "delta"],
                                 out=outs, softmax_scale=0.125, cache_seqlens=77)
        d, t = c.desc, c.tensors
        self.assertEqual((d.parts, d.value, d.dv, d.layers, d.page_size, d.max_kv, d.scale),
                         (b"base128_delta32", kforge.KF_PARTS_VALUE_SEPARATE, 160, 2, 0, skv, 0.125))
        self.assertEqual((t.k[0][0].ptr, t.k[0][1].ptr, t.k[1][0].ptr, t.k[1][1].ptr), (0x100000, 0x110000, None, 0x120000))
        self.assertEqual((t.v[0][0].ptr, t.v[0][1].ptr, t.v[1][0].ptr, t.v[1][1].ptr), (0x200000, 0x210000, None, 0x220000))
        self.assertEqual(tuple(t.k[0][1].strides), (skv * hkv * 32, hkv * 32, 32))
        self.assertEqual((t.o[0].ptr, t.o[1].ptr), (0x300000, 0x310000))
        self.assertEqual((t.kv_len, t.kv_len_all, t.batch, t.q_len), (None, 77, 3, 2))
        self.assertTrue(c.layered)

    def test_vllm_split_is_views(self):
        # [2, num_blocks, block_size, Hkv, D]: k at the cache's pointer, v one stride(0) further; no copy
        nb, bs, hkv, dd = 50, 16, 2, 128
        kv = arr((2, nb, bs, hkv, dd), "<f2", ptr=0x1000000)
        k, v = kforge.split_kv_cache(kv)
        self.assertEqual((k.ptr, v.ptr), (0x1000000, 0x1000000 + nb * bs * hkv * dd * 2))
        self.assertEqual((k.shape, k.strides), ((nb, bs, hkv, dd), (bs * hkv * dd, hkv * dd, dd, 1)))
        q = arr((3, 1, 8, 128), "<f2")
        c = kforge.prepare(q, kv, None, block_table=arr((3, 7), "<i4", ptr=0x7000), out=arr((3, 1, 8, 128), "<f2"),
                           kv_len=arr((3,), "<i4", ptr=0x6000))
        self.assertEqual((c.tensors.k, c.tensors.v), (k.ptr, v.ptr))
        self.assertEqual((c.desc.page_size, c.desc.max_kv, list(c.desc.k_strides), list(c.desc.v_strides)),
                         (16, 7 * 16, [bs * hkv * dd, hkv * dd, dd], [bs * hkv * dd, hkv * dd, dd]))


class TestThroughStub(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def setUp(self):
        self.ctx = kforge.Context(db="stub-ok", lib=self.stub)
        self.addCleanup(self.ctx.close)

    def test_mla_desc_reaches_c(self):
        q, cache, bt, lens, out = mla_args(b=2, sq=1, hq=16)
        with self.assertRaises(kforge.Error) as cm:
            kforge.mla_decode(q, cache, bt, lens, out=out, ctx=self.ctx, softmax_scale=0.5)
        e = cm.exception
        self.assertEqual((e.status, e.call), (kforge.KF_ERR_UNSUPPORTED, "kf_parts_plan"))
        self.assertEqual(e.message, "plan: dtype=1 parts=latent512_rope64 value=0 dv=512 hq=16 hkv=1 layers=1 "
                                    "page_size=64 causal=0 scale=0.5 max_batch=2 max_q=1 max_kv=256 kv_dtype=0")
        ok, msg = self.ctx.supported(kforge.prepare_mla(q, cache, bt, lens, out=out).desc)
        self.assertFalse(ok)
        self.assertTrue(msg.startswith("KF_ERR_UNSUPPORTED: supported: dtype=1 parts=latent512_rope64"), msg)

    def test_mla_tensors_reach_c(self):
        q, cache, bt, lens, out = mla_args(b=2, sq=2, hq=7777, max_pages=3)
        lse = arr((2, 7777, 2), "<f4", ptr=0x500000)
        call = self.ctx.bind_mla(q, cache, bt, lens, out=out, lse=lse, causal=True, stream=0xbeef0)
        self.assertEqual((call.plan.variant, call.plan.source), ("attn_decode.stub", "cache"))
        with self.assertRaises(kforge.Error) as cm:
            call.run()
        m = cm.exception.message
        self.assertEqual(cm.exception.call, "kf_parts_run")
        qs, cs = (2 * 7777 * 576, 7777 * 576, 576), (64 * 576, 576, 576)
        self.assertEqual(views(m), {"q[0][0]": (0x10000, qs), "q[0][1]": (0x10000 + 1024, qs),
                                    "k[0][0]": (0x200000, cs), "k[0][1]": (0x200000 + 1024, cs),
                                    "o[0]": (0x400000, (2 * 7777 * 512, 7777 * 512, 512))})
        self.assertEqual(int(field(m, "lse[0]"), 16), 0x500000)
        self.assertEqual(int(field(m, "kv_len"), 16), 0x6000)
        self.assertEqual(int(field(m, "block_table"), 16), 0x7000)
        self.assertEqual(int(field(m, "stream"), 16), 0xbeef0)
        self.assertIn("bt_stride=3 batch=2 q_len=2 ws=(nil)", m)
        # the plan is cached per description; a second bind makes no new plan
        self.assertIs(self.ctx.bind_mla(q, cache, bt, lens, out=out, causal=True).plan, call.plan)
        self.assertTrue(self.ctx.has_plan(call.desc))
        self.assertEqual(len(self.ctx.plans), 1)

    def test_mla_fp8_reaches_c(self):
        q, _, bt, lens, out = mla_args(b=2, sq=1, hq=7777, max_pages=3)
        cache, sc = e4m3((10, 64, 1, 576), 0x200000), arr((10, 64), "<f4", ptr=0x300000)
        call = self.ctx.bind_mla(q, cache, bt, lens, out=out, kv_scale=sc)
        with self.assertRaises(kforge.Error) as cm:
            call.run()
        m = cm.exception.message
        cs = (64 * 576, 576, 576)
        self.assertEqual({k: v for k, v in views(m).items() if k.startswith("k")},
                         {"k[0][0]": (0x200000, cs), "k[0][1]": (0x200000 + 512, cs)})
        self.assertEqual(field(m, "kv_scale"), "0x300000/64,1,1")
        ok, msg = self.ctx.supported(kforge.prepare_mla(arr((2, 1, 16, 576), ptr=0x10000), cache, bt, lens,
                                                        out=arr((2, 1, 16, 512)), kv_scale=sc).desc)
        self.assertFalse(ok)
        self.assertIn("kv_dtype=1", msg)

    def test_parts_joint_layers_reach_c(self):
        b, sq, hq, hkv, skv = 1, 1, 7777, 1, 64
        q = [[arr((b, sq, hq, 128), ptr=0x10000), arr((b, sq, hq, 32), ptr=0x20000)],
             [arr((b, sq, hq, 128), ptr=0x30000), arr((b, sq, hq, 32), ptr=0x40000)]]
        k = [[arr((b, skv, hkv, 128), ptr=0x100000), arr((b, skv, hkv, 32), ptr=0x110000)],
             [None, arr((b, skv, hkv, 32), ptr=0x120000)]]
        outs = [arr((b, sq, hq, 128), ptr=0x300000), arr((b, sq, hq, 128), ptr=0x310000)]
        call = self.ctx.bind_parts(q, k, parts="base128_delta32", out=outs, softmax_scale=0.1)
        with self.assertRaises(kforge.Error) as cm:
            call.run()
        got = views(cm.exception.message)
        self.assertEqual(sorted(got), ["k[0][0]", "k[0][1]", "k[1][1]", "o[0]", "o[1]", "q[0][0]", "q[0][1]",
                                       "q[1][0]", "q[1][1]"])   # k[1][0] and every v left zero
        self.assertEqual(got["k[1][1]"], (0x120000, (skv * hkv * 32, hkv * 32, 32)))
        self.assertEqual(got["q[1][0]"], (0x30000, (hq * 128, hq * 128, 128)))
        self.assertIn("kv_len=(nil) kv_len_all=64 block_table=(nil) bt_stride=0 batch=1 q_len=1", cm.exception.message)

    def test_vllm_cache_reaches_c_by_pointer(self):
        nb, bs, hkv, dd = 20, 16, 1, 128
        kv = arr((2, nb, bs, hkv, dd), "<f2", ptr=0x1000000)
        q, o = arr((2, 1, 7777, 128), "<f2", ptr=0x10000), arr((2, 1, 7777, 128), "<f2", ptr=0x40000)
        call = self.ctx.bind(q, kv, None, block_table=arr((2, 5), "<i4", ptr=0x7000), out=o)
        with self.assertRaises(kforge.Error) as cm:
            call.run()
        m = cm.exception.message
        self.assertEqual(int(field(m, "k"), 16), 0x1000000)
        self.assertEqual(int(field(m, "v"), 16), 0x1000000 + nb * bs * hkv * dd * 2)


if __name__ == "__main__":
    unittest.main()
