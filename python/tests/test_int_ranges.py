"""Integers that go into a ctypes struct field are range-checked: ctypes would truncate them (B = 2**32 + 2
reached C as 2); the binding raises ArgumentError (a ValueError) naming the field. No torch, no GPU."""
import ctypes
import unittest

import _util
from _util import FakeArray
import kforge
from kforge import _lib
from kforge.api import _put

BF16 = dict(typestr="<V2", descr=[("bfloat16", "<V2")])


def arr(shape, typestr="<f2", ptr=0x100000, strides=None, **kw):
    return FakeArray(shape, typestr, ptr=ptr, strides=strides, **kw)


class TestIntRanges(_util.NoLibrary):
    def refused(self, pattern, fn, *args, **kw):
        with self.assertRaises(kforge.ArgumentError) as cm:
            fn(*args, **kw)
        self.assertIsInstance(cm.exception, ValueError)
        self.assertRegex(str(cm.exception), pattern)

    def test_batch_past_an_int_is_refused_not_truncated(self):
        b = 2 ** 32 + 2
        q, o = arr((b, 1, 8, 64), ptr=0x10000), arr((b, 1, 8, 64), ptr=0x40000)
        k, v = arr((b, 100, 2, 64), ptr=0x20000), arr((b, 100, 2, 64), ptr=0x30000)
        self.refused(r"desc\.max_batch = 4294967298 is outside the range of its C field \(-2147483648\.\.2147483647\)",
                     kforge.prepare, q, k, v, out=o)

    def test_lengths_and_heads_past_an_int(self):
        q, o = arr((1, 2 ** 31, 8, 64), ptr=0x10000), arr((1, 2 ** 31, 8, 64), ptr=0x40000)
        k, v = arr((1, 100, 2, 64), ptr=0x20000), arr((1, 100, 2, 64), ptr=0x30000)
        self.refused(r"desc\.max_q = 2147483648 is outside", kforge.prepare, q, k, v, out=o)
        q, o = arr((1, 1, 8, 64), ptr=0x10000), arr((1, 1, 8, 64), ptr=0x40000)
        k, v = arr((1, 2 ** 33, 2, 64), ptr=0x20000), arr((1, 2 ** 33, 2, 64), ptr=0x30000)
        self.refused(r"desc\.max_kv = 8589934592 is outside", kforge.prepare, q, k, v, out=o)

    def test_strides_past_64_bits(self):
        q, o = arr((2, 1, 8, 64), ptr=0x10000), arr((2, 1, 8, 64), ptr=0x40000)
        k = arr((2, 100, 2, 64), ptr=0x20000, strides=(2 ** 64, 256, 128, 2))   # byte strides
        v = arr((2, 100, 2, 64), ptr=0x30000)
        self.refused(r"desc\.k_strides\[0\] = 9223372036854775808 is outside", kforge.prepare, q, k, v, out=o)

    def test_pointer_past_64_bits(self):
        q, o = arr((2, 1, 8, 64), ptr=2 ** 64 + 0x10000), arr((2, 1, 8, 64), ptr=0x40000)
        k, v = arr((2, 100, 2, 64), ptr=0x20000), arr((2, 100, 2, 64), ptr=0x30000)
        self.refused(r"tensors\.q = 18446744073709617152 is outside the range of its C field \(0\.\.",
                     kforge.prepare, q, k, v, out=o)

    def test_kda_tokens_past_an_int(self):
        t = 2 ** 31
        shape = lambda hh: (1, t, hh, 64)
        q, k = FakeArray(shape(2), ptr=0x10000, **BF16), FakeArray(shape(2), ptr=0x20000, **BF16)
        v, out = FakeArray(shape(4), ptr=0x30000, **BF16), FakeArray(shape(4), ptr=0x60000, **BF16)
        g, beta = FakeArray(shape(4), "<f4", ptr=0x40000), FakeArray((1, t, 4), "<f4", ptr=0x50000)
        self.refused(r"desc\.max_tokens = 2147483648 is outside", kforge.prepare_kda, q, k, v, g, beta, out=out)

    def test_every_field_kind(self):
        d = _lib.desc_init()
        _put(d, "hq", 2 ** 31 - 1)
        self.assertEqual(d.hq, 2 ** 31 - 1)
        self.refused(r"desc\.hq = -2147483649 is outside", _put, d, "hq", -2 ** 31 - 1)
        self.refused(r"desc\.hq must be an integer, got 1\.5", _put, d, "hq", 1.5)
        self.refused(r"desc\.q_strides takes 3 values, got 2", _put, d, "q_strides", (1, 2))
        self.refused(r"desc\.o_strides\[2\] = -9223372036854775809", _put, d, "o_strides", (0, 0, -2 ** 63 - 1))
        cfg = _lib.config_init()
        self.refused(r"config\.device = 4294967296 is outside", _put, cfg, "device", 2 ** 32)
        t = _lib.kf_kda_tensors()
        _put(t, "q", 0)
        self.assertIsNone(t.q)
        self.refused(r"tensors\.q = -1 is outside", _put, t, "q", -1)

    def test_stream_handles_and_statuses(self):
        q, o = arr((2, 1, 8, 64), ptr=0x10000), arr((2, 1, 8, 64), ptr=0x40000)
        k, v = arr((2, 100, 2, 64), ptr=0x20000), arr((2, 100, 2, 64), ptr=0x30000)
        self.refused(r"stream = 18446744073709551621 is outside", kforge.prepare, q, k, v, out=o, stream=2 ** 64 + 5)
        self.refused(r"stream = -1 is outside", kforge.prepare, q, k, v, out=o, stream=-1)

        class S:
            cuda_stream = 2 ** 70
        self.refused(r"stream\.cuda_stream = 1180591620717411303424 is outside", kforge.prepare, q, k, v, out=o,
                     stream=S())
        self.assertEqual(kforge.prepare(q, k, v, out=o, stream=2 ** 64 - 1)._stream, 2 ** 64 - 1)
        self.refused(r"status = 4294967296 is outside", kforge.status_str, 2 ** 32)

    def test_context_device_past_an_int(self):
        stub = _util.build_stub()
        if not stub:
            self.skipTest("no C compiler for the stub library")
        self.refused(r"config\.device = 4294967296 is outside", kforge.Context, device=2 ** 32, lib=stub)


if __name__ == "__main__":
    unittest.main()
