"""The ctypes structs mirror runtime/kforge.h: sizes and offsets on x86-64 (LP64), and the
layout a C compiler gives the header (through the stub library) when one is present."""
import ctypes
import platform
import unittest

import _util  # noqa: F401  (puts python/ on sys.path)
import kforge
from kforge import _lib

# x86-64 SysV (LP64): int 4, pointers 8, long long 8 aligned to 8, enums int-sized.
EXPECTED = {
    "kf_config": (40, {"device": 0, "db_path": 8, "bundles": 16, "n_bundles": 24, "jit": 28,
                       "template_dir": 32}),
    "kf_attn_desc": (168, {"kind": 0, "dtype": 4, "hq": 8, "hkv": 12, "d": 16, "causal": 20,
                           "scale": 24, "max_batch": 28, "max_q": 32, "max_kv": 36, "packed_q": 40,
                           "q_strides": 48, "k_strides": 72, "v_strides": 96, "o_strides": 120,
                           "page_size": 144, "window": 148, "window_left": 152, "softcap": 156,
                           "sinks": 160, "kv_dtype": 164}),
    "kf_attn_tensors": (120, {"q": 0, "k": 8, "v": 16, "o": 24, "lse": 32, "cu_seqlens_q": 40,
                             "kv_len": 48, "batch": 56, "q_len": 60, "kv_len_all": 64, "total_q": 68,
                             "workspace": 72, "block_table": 80, "bt_stride": 88, "sinks": 96, "k_scale": 104,
                             "v_scale": 112}),
    "kf_kda_desc": (232, {"mode": 0, "max_seqs": 4, "max_tokens": 8, "h": 12, "hv": 16, "dk": 20, "dv": 24,
                          "gate": 28, "lower_bound": 32, "l2norm": 36, "beta_sigmoid": 40, "state_layout": 44,
                          "has_initial_state": 48, "wants_final_state": 52, "scale": 56, "q_strides": 64,
                          "k_strides": 88, "v_strides": 112, "g_strides": 136, "beta_strides": 160,
                          "o_strides": 184, "state_strides": 208}),
    "kf_kda_tensors": (112, {"q": 0, "k": 8, "v": 16, "g": 24, "beta": 32, "a_log": 40, "dt_bias": 48,
                             "initial_state": 56, "final_state": 64, "o": 72, "cu_seqlens": 80,
                             "cu_seqlens64": 88, "n": 96, "total": 100, "workspace": 104}),
    "kf_parts_desc": (64, {"dtype": 0, "parts": 8, "value": 16, "dv": 20, "hq": 24, "hkv": 28, "layers": 32,
                           "page_size": 36, "causal": 40, "scale": 44, "max_batch": 48, "max_q": 52, "max_kv": 56,
                           "kv_dtype": 60}),
    "kf_parts_view": (32, {"ptr": 0, "strides": 8}),
    # 3 x 16 views of 32 bytes, 4 views, 4 lse pointers, then the scalars
    "kf_parts_tensors": (1776, {"q": 0, "k": 512, "v": 1024, "o": 1536, "lse": 1664, "kv_len": 1696,
                                "kv_len_all": 1704, "block_table": 1712, "bt_stride": 1720, "batch": 1724,
                                "q_len": 1728, "workspace": 1736, "kv_scale": 1744}),
}
STRUCTS = {"kf_config": _lib.kf_config, "kf_attn_desc": _lib.kf_attn_desc,
           "kf_attn_tensors": _lib.kf_attn_tensors, "kf_kda_desc": _lib.kf_kda_desc,
           "kf_kda_tensors": _lib.kf_kda_tensors, "kf_parts_desc": _lib.kf_parts_desc,
           "kf_parts_view": _lib.kf_parts_view, "kf_parts_tensors": _lib.kf_parts_tensors}


class TestLayout(unittest.TestCase):
    @unittest.skipUnless(platform.machine() in ("x86_64", "AMD64") and ctypes.sizeof(ctypes.c_void_p) == 8,
                         "skipped: the expected offsets are written for x86-64")
    def test_x86_64_offsets(self):
        for name, (size, offs) in EXPECTED.items():
            st = STRUCTS[name]
            self.assertEqual(ctypes.sizeof(st), size, name)
            self.assertEqual([f[0] for f in st._fields_], list(offs), f"{name}: field order")
            for field, off in offs.items():
                self.assertEqual(getattr(st, field).offset, off, f"{name}.{field}")

    def test_against_c_compiler(self):
        stub = _util.build_stub()
        if stub is None:
            self.skipTest("skipped: no C compiler (or no runtime/kforge.h) to lay out the header")
        lib = ctypes.CDLL(stub)
        buf = ctypes.create_string_buffer(4096)
        lib.kfstub_layout(buf, ctypes.c_size_t(4096))
        seen = set()
        for line in buf.value.decode().splitlines():
            name, *nums = line.split()
            nums = [int(x) for x in nums]
            st = STRUCTS[name]
            self.assertEqual(ctypes.sizeof(st), nums[0], f"sizeof({name})")
            got = [getattr(st, f[0]).offset for f in st._fields_]
            self.assertEqual(got, nums[1:], f"offsets of {name}")
            seen.add(name)
        self.assertEqual(seen, set(STRUCTS), "every public struct is laid out by the compiler")

    def test_init_values(self):
        c = _lib.config_init()
        self.assertEqual((c.device, c.db_path, c.n_bundles, c.jit, c.template_dir),
                         (0, None, 0, kforge.KF_JIT_ALLOW, None))
        d = _lib.desc_init()
        self.assertEqual((d.kind, d.dtype, d.hq, d.scale, list(d.q_strides)),
                         (kforge.KF_ATTN_DECODE, kforge.KF_BF16, 0, 0.0, [0, 0, 0]))
        k = _lib.kda_desc_init()
        self.assertEqual((k.mode, k.max_seqs, k.gate, k.lower_bound, k.state_layout, k.scale,
                          list(k.state_strides)),
                         (kforge.KF_KDA_PREFILL, 0, kforge.KF_KDA_GATE_LOG, -5.0, kforge.KF_KDA_STATE_KV, 0.0,
                          [0, 0, 0]))

    def test_kda_desc_init_matches_header(self):
        stub = _util.build_stub()
        if stub is None:
            self.skipTest("skipped: no C compiler to read KF_KDA_DESC_INIT")
        lib = ctypes.CDLL(stub)
        c = _lib.kf_kda_desc()
        ctypes.memset(ctypes.byref(c), 0x5A, ctypes.sizeof(c))
        lib.kfstub_kda_desc_init(ctypes.byref(c))
        mine = _lib.kda_desc_init()
        for f, _ in _lib.kf_kda_desc._fields_:
            a, b = getattr(c, f), getattr(mine, f)
            if isinstance(a, ctypes.Array):
                a, b = list(a), list(b)
            self.assertEqual(a, b, f"KF_KDA_DESC_INIT.{f}")

    def test_parts_desc_init_matches_header(self):
        stub = _util.build_stub()
        if stub is None:
            self.skipTest("skipped: no C compiler to read KF_PARTS_DESC_INIT")
        lib = ctypes.CDLL(stub)
        c = _lib.kf_parts_desc()
        ctypes.memset(ctypes.byref(c), 0x5A, ctypes.sizeof(c))
        lib.kfstub_parts_desc_init(ctypes.byref(c))
        mine = _lib.parts_desc_init()
        for f, _ in _lib.kf_parts_desc._fields_:
            self.assertEqual(getattr(c, f), getattr(mine, f), f"KF_PARTS_DESC_INIT.{f}")

    def test_status_numbers(self):
        # kf_status is append-only in the header; these must never move
        self.assertEqual([kforge.KF_OK, kforge.KF_ERR_ARG, kforge.KF_ERR_UNSUPPORTED,
                          kforge.KF_ERR_NOT_TUNED, kforge.KF_ERR_CUDA, kforge.KF_ERR_NVRTC,
                          kforge.KF_ERR_DB, kforge.KF_ERR_BUNDLE, kforge.KF_ERR_NOMEM],
                         list(range(9)))

    def test_header_enums_match(self):
        """The numbers in the header text equal the binding's (cheap guard for header edits)."""
        import os
        import re
        h = os.path.join(_util.HEADER_DIR, "kforge.h")
        if not os.path.exists(h):
            self.skipTest("skipped: runtime/kforge.h not found")
        with open(h) as f:
            text = f.read()
        m = re.search(r"typedef enum \{(.*?)\} kf_status;", text, re.S)
        names = re.findall(r"\b(KF_[A-Z_]+)\b", re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S))
        self.assertEqual(names, [kforge.STATUS_NAMES[i] for i in range(len(names))])
        for name, val in (("KF_BF16", 1), ("KF_FP16", 2), ("KF_ATTN_PREFILL", 1), ("KF_ATTN_DECODE", 2),
                          ("KF_KDA_PREFILL", 1), ("KF_KDA_DECODE", 2), ("KF_KDA_GATE_LOG", 0),
                          ("KF_KDA_GATE_SIGMOID", 1), ("KF_KDA_STATE_KV", 0), ("KF_KDA_STATE_VK", 1)):
            self.assertRegex(text, rf"{name}\s*=\s*{val}\b")
            self.assertEqual(getattr(kforge, name), val)


if __name__ == "__main__":
    unittest.main()
