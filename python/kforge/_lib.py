"""ctypes mirror of runtime/kforge.h and the loader of libkforge.

Everything here follows the header field by field; python/tests/test_structs.py
checks sizes and offsets (against a C compiler reading kforge.h when one is present).
"""
import ctypes
import ctypes.util
import os
import sys
import sysconfig
import threading

# ---- kf_status (append only in the header: never renumbered) -------------------
KF_OK = 0
KF_ERR_ARG = 1
KF_ERR_UNSUPPORTED = 2
KF_ERR_NOT_TUNED = 3
KF_ERR_CUDA = 4
KF_ERR_NVRTC = 5
KF_ERR_DB = 6
KF_ERR_BUNDLE = 7
KF_ERR_NOMEM = 8

STATUS_NAMES = {
    KF_OK: "KF_OK",
    KF_ERR_ARG: "KF_ERR_ARG",
    KF_ERR_UNSUPPORTED: "KF_ERR_UNSUPPORTED",
    KF_ERR_NOT_TUNED: "KF_ERR_NOT_TUNED",
    KF_ERR_CUDA: "KF_ERR_CUDA",
    KF_ERR_NVRTC: "KF_ERR_NVRTC",
    KF_ERR_DB: "KF_ERR_DB",
    KF_ERR_BUNDLE: "KF_ERR_BUNDLE",
    KF_ERR_NOMEM: "KF_ERR_NOMEM",
}

# ---- enums ----------------------------------------------------------------------
KF_BF16 = 1
KF_FP16 = 2
KF_KV_SAME = 0
KF_KV_E4M3 = 1
KF_JIT_ALLOW = 0
KF_JIT_FORBID = 1
KF_ATTN_PREFILL = 1
KF_ATTN_DECODE = 2
KF_KDA_PREFILL = 1
KF_KDA_DECODE = 2
KF_KDA_GATE_LOG = 0
KF_KDA_GATE_SIGMOID = 1
KF_KDA_STATE_KV = 0
KF_KDA_STATE_VK = 1
KF_PARTS_VALUE_ALIAS = 0
KF_PARTS_VALUE_SEPARATE = 1
KF_PARTS_MAXL = 4   # layers of a joint scan (kf_parts_tensors' first index)
KF_PARTS_MAXK = 4   # key parts (the second index)

# C enums are int-sized on every ABI kforge targets (x86-64 and aarch64 Linux).
c_enum = ctypes.c_int

Strides3 = ctypes.c_longlong * 3


class kf_config(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_int),
        ("db_path", ctypes.c_char_p),
        ("bundles", ctypes.POINTER(ctypes.c_char_p)),
        ("n_bundles", ctypes.c_int),
        ("jit", c_enum),
        ("template_dir", ctypes.c_char_p),
    ]


class kf_attn_desc(ctypes.Structure):
    _fields_ = [
        ("kind", c_enum),
        ("dtype", c_enum),
        ("hq", ctypes.c_int),
        ("hkv", ctypes.c_int),
        ("d", ctypes.c_int),
        ("causal", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("max_batch", ctypes.c_int),
        ("max_q", ctypes.c_int),
        ("max_kv", ctypes.c_int),
        ("packed_q", ctypes.c_int),
        ("q_strides", Strides3),
        ("k_strides", Strides3),
        ("v_strides", Strides3),
        ("o_strides", Strides3),
        ("page_size", ctypes.c_int),
        # model features (appended, issue 21); 0 is off
        ("window", ctypes.c_int),
        ("window_left", ctypes.c_int),
        ("softcap", ctypes.c_float),
        ("sinks", ctypes.c_int),
        ("kv_dtype", c_enum),
    ]


class kf_attn_tensors(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),           # float *
        ("cu_seqlens_q", ctypes.c_void_p),  # const int32_t *
        ("kv_len", ctypes.c_void_p),        # const int32_t *
        ("batch", ctypes.c_int),
        ("q_len", ctypes.c_int),
        ("kv_len_all", ctypes.c_int),
        ("total_q", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("block_table", ctypes.c_void_p),   # const int32_t *
        ("bt_stride", ctypes.c_int),
        ("sinks", ctypes.c_void_p),         # const float * [hq]
        ("k_scale", ctypes.c_void_p),       # const float * [hkv] (FP8 K/V)
        ("v_scale", ctypes.c_void_p),
    ]


class kf_kda_desc(ctypes.Structure):
    _fields_ = [
        ("mode", c_enum),
        ("max_seqs", ctypes.c_int),
        ("max_tokens", ctypes.c_int),
        ("h", ctypes.c_int),
        ("hv", ctypes.c_int),
        ("dk", ctypes.c_int),
        ("dv", ctypes.c_int),
        ("gate", c_enum),
        ("lower_bound", ctypes.c_float),
        ("l2norm", ctypes.c_int),
        ("beta_sigmoid", ctypes.c_int),
        ("state_layout", c_enum),
        ("has_initial_state", ctypes.c_int),
        ("wants_final_state", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("q_strides", Strides3),
        ("k_strides", Strides3),
        ("v_strides", Strides3),
        ("g_strides", Strides3),
        ("beta_strides", Strides3),
        ("o_strides", Strides3),
        ("state_strides", Strides3),
    ]


class kf_kda_tensors(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("g", ctypes.c_void_p),              # const float *
        ("beta", ctypes.c_void_p),           # const float *
        ("a_log", ctypes.c_void_p),          # const float *
        ("dt_bias", ctypes.c_void_p),        # const float *
        ("initial_state", ctypes.c_void_p),  # const float *
        ("final_state", ctypes.c_void_p),    # float *
        ("o", ctypes.c_void_p),
        ("cu_seqlens", ctypes.c_void_p),     # const int32_t *
        ("cu_seqlens64", ctypes.c_void_p),   # const int64_t *
        ("n", ctypes.c_int),
        ("total", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
    ]


class kf_parts_desc(ctypes.Structure):
    _fields_ = [
        ("dtype", c_enum),
        ("parts", ctypes.c_char_p),   # copied by kf_parts_plan; the binding keeps the bytes alive until then
        ("value", c_enum),
        ("dv", ctypes.c_int),
        ("hq", ctypes.c_int),
        ("hkv", ctypes.c_int),
        ("layers", ctypes.c_int),
        ("page_size", ctypes.c_int),
        ("causal", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("max_batch", ctypes.c_int),
        ("max_q", ctypes.c_int),
        ("max_kv", ctypes.c_int),
        ("kv_dtype", c_enum),         # appended: KF_KV_E4M3 for the FP8 latent cache
    ]


class kf_parts_view(ctypes.Structure):
    _fields_ = [
        ("ptr", ctypes.c_void_p),
        ("strides", Strides3),
    ]


PartsViews = (kf_parts_view * KF_PARTS_MAXK) * KF_PARTS_MAXL


class kf_parts_tensors(ctypes.Structure):
    _fields_ = [
        ("q", PartsViews),
        ("k", PartsViews),
        ("v", PartsViews),
        ("o", kf_parts_view * KF_PARTS_MAXL),
        ("lse", ctypes.c_void_p * KF_PARTS_MAXL),   # float *
        ("kv_len", ctypes.c_void_p),                 # const int32_t *
        ("kv_len_all", ctypes.c_int),
        ("block_table", ctypes.c_void_p),            # const int32_t *
        ("bt_stride", ctypes.c_int),
        ("batch", ctypes.c_int),
        ("q_len", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("kv_scale", kf_parts_view),                 # appended: per-token fp32 scales of an FP8 cache
    ]


def parts_desc_init():
    """KF_PARTS_DESC_INIT (ctypes zero-fills; dtype and layers are non-zero)."""
    d = kf_parts_desc()
    d.dtype = KF_BF16
    d.value = KF_PARTS_VALUE_ALIAS
    d.layers = 1
    return d


def config_init():
    """KF_CONFIG_INIT"""
    c = kf_config()
    c.device = 0
    c.db_path = None
    c.bundles = None
    c.n_bundles = 0
    c.jit = KF_JIT_ALLOW
    c.template_dir = None
    return c


def desc_init():
    """KF_ATTN_DESC_INIT (ctypes zero-fills; only kind and dtype are non-zero)."""
    d = kf_attn_desc()
    d.kind = KF_ATTN_DECODE
    d.dtype = KF_BF16
    return d


def kda_desc_init():
    """KF_KDA_DESC_INIT (ctypes zero-fills; mode and lower_bound are non-zero)."""
    d = kf_kda_desc()
    d.mode = KF_KDA_PREFILL
    d.gate = KF_KDA_GATE_LOG
    d.lower_bound = -5.0
    d.state_layout = KF_KDA_STATE_KV
    return d


# ---- prototypes --------------------------------------------------------------------
_ctx_p = ctypes.c_void_p
_plan_p = ctypes.c_void_p

_PROTOTYPES = {
    "kf_version": (ctypes.c_char_p, []),
    "kf_version_number": (ctypes.c_int, []),
    "kf_status_str": (ctypes.c_char_p, [c_enum]),
    "kf_open": (c_enum, [ctypes.POINTER(_ctx_p), ctypes.POINTER(kf_config)]),
    "kf_close": (None, [_ctx_p]),
    "kf_errmsg": (ctypes.c_char_p, [_ctx_p]),
    "kf_attn_supported": (c_enum, [_ctx_p, ctypes.POINTER(kf_attn_desc)]),
    "kf_attn_plan": (c_enum, [_ctx_p, ctypes.POINTER(kf_attn_desc), ctypes.POINTER(_plan_p)]),
    "kf_attn_run": (c_enum, [_plan_p, ctypes.POINTER(kf_attn_tensors), ctypes.c_void_p]),
    "kf_kda_supported": (c_enum, [_ctx_p, ctypes.POINTER(kf_kda_desc)]),
    "kf_kda_plan": (c_enum, [_ctx_p, ctypes.POINTER(kf_kda_desc), ctypes.POINTER(_plan_p)]),
    "kf_kda_run": (c_enum, [_plan_p, ctypes.POINTER(kf_kda_tensors), ctypes.c_void_p]),
    "kf_parts_supported": (c_enum, [_ctx_p, ctypes.POINTER(kf_parts_desc)]),
    "kf_parts_plan": (c_enum, [_ctx_p, ctypes.POINTER(kf_parts_desc), ctypes.POINTER(_plan_p)]),
    "kf_parts_run": (c_enum, [_plan_p, ctypes.POINTER(kf_parts_tensors), ctypes.c_void_p]),
    "kf_plan_workspace": (ctypes.c_size_t, [_plan_p]),
    "kf_plan_variant": (ctypes.c_char_p, [_plan_p]),
    "kf_plan_source": (ctypes.c_char_p, [_plan_p]),
    "kf_plan_free": (None, [_plan_p]),
}


class LibraryNotFound(OSError):
    pass


_SONAMES = ("libkforge.so", "libkforge.so.0")


def _lib_dirs(prefix):
    """The library folders of an install prefix: lib, lib64 and Debian's multiarch lib/<triplet>."""
    dirs = [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.append(os.path.join(prefix, "lib", multiarch))
    return dirs


def _site_prefix(here):
    """The prefix a package at here (P/lib/pythonX.Y/site-packages/kforge, or Debian's
    P/lib/python3/dist-packages/kforge) was installed under, or None."""
    parts = os.path.normpath(here).split(os.sep)
    for i in range(len(parts) - 1, 1, -1):
        if parts[i] in ("site-packages", "dist-packages") and parts[i - 2] in ("lib", "lib64"):
            return os.sep.join(parts[:i - 2]) or os.sep
    return None


def _find_library(name):
    """ctypes.util.find_library, which asks the system loader's cache (ldconfig -p) and the linker."""
    try:
        return ctypes.util.find_library(name)
    except (OSError, ValueError):    # no ldconfig, gcc or ld on the machine
        return None


def candidates():
    """Where libkforge is looked for, in order, as (where, path) pairs: $KFORGE_LIB; the package's own
    lib/libkforge.so (what pip install ./python ships); next to the package; ../build/libkforge.so of the repository the package sits in (an editable install);
    $KFORGE_PREFIX/lib; the prefix the package was installed under (pip install --prefix P and
    cmake --install --prefix P side by side), then sys.prefix; the folders of $LD_LIBRARY_PATH;
    the system loader (ctypes.util.find_library: ldconfig's cache); /usr/local/lib (cmake's default
    prefix, not in the loader's cache until ldconfig runs). A path without a folder is a name for
    the loader to resolve; None, a place that had nothing."""
    out = []
    env = os.environ.get("KFORGE_LIB")
    if env:
        out.append(("$KFORGE_LIB", env))
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(("the package's own (a wheel built by pip install ./python)", os.path.join(here, "lib", "libkforge.so")))
    out.append(("next to the package", os.path.join(here, "libkforge.so")))
    repo = os.path.dirname(os.path.dirname(here))  # python/kforge -> repo root
    out.append(("the repository's build", os.path.join(repo, "build", "libkforge.so")))
    prefixes = []
    if os.environ.get("KFORGE_PREFIX"):
        prefixes.append(("$KFORGE_PREFIX", os.environ["KFORGE_PREFIX"]))
    site = _site_prefix(here)
    if site:
        prefixes.append(("the package's install prefix", site))
    prefixes.append(("sys.prefix", sys.prefix))
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d:
            prefixes.append(("$LD_LIBRARY_PATH", d))
    seen = set()
    for where, p in prefixes:
        dirs = [p] if where == "$LD_LIBRARY_PATH" else _lib_dirs(p)
        for d in dirs:
            for so in _SONAMES:
                path = os.path.join(d, so)
                if path not in seen:
                    seen.add(path)
                    out.append((where, path))
    found = _find_library("kforge")
    out.append(("the system loader (ctypes.util.find_library)", found))
    for so in _SONAMES:
        out.append(("cmake's default prefix", os.path.join("/usr/local/lib", so)))
    return out


def candidate_paths():
    """The paths (or loader names) of candidates(), in order, without the places that had nothing."""
    return [p for _, p in candidates() if p is not None]


def bind(cdll):
    """Declare argument and result types on a loaded library; returns it."""
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(cdll, name)
        fn.restype = res
        fn.argtypes = args
    return cdll


_lock = threading.Lock()
_cached = {}


def _resolve():
    """The first candidate that exists (a loader name: that loads), or LibraryNotFound naming every
    place looked at. $KFORGE_LIB, when set, is the only candidate that counts."""
    env = os.environ.get("KFORGE_LIB")
    if env:
        if not os.path.exists(env):
            raise LibraryNotFound(f"KFORGE_LIB={env!r} does not exist")
        return env
    tried = []
    for where, p in candidates():
        if p is None:
            tried.append(f"{where}: no libkforge")
            continue
        if os.sep not in p:
            try:                    # a name the loader resolves (find_library's answer)
                return ctypes.CDLL(p)._name
            except OSError as e:
                tried.append(f"{p} ({where}: {e})")
                continue
        if os.path.exists(p):
            return p
        tried.append(f"{p} ({where})")
    raise LibraryNotFound("libkforge.so not found; looked in: " + "; ".join(tried)
                          + ". Build it (cmake), install it (cmake --install build --prefix P, then"
                          " KFORGE_PREFIX=P or ldconfig), or set KFORGE_LIB to its path")


def load(path=None):
    """The bound library (cached per path). With path None: the first candidate of
    candidate_paths() that exists; $KFORGE_LIB, when set, is the only candidate that counts."""
    with _lock:
        if path is None:
            path = _resolve()
        if os.sep in path:
            path = os.path.abspath(path)
        lib = _cached.get(path)
        if lib is None:
            lib = bind(ctypes.CDLL(path))
            lib._kforge_path = path
            _cached[path] = lib
        return lib
