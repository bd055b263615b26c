"""Context, plans and attention(): the Python face of runtime/kforge.h."""
import ctypes
import operator
import os
import threading

from . import _lib
from ._lib import (KF_OK, KF_ERR_ARG, KF_BF16, KF_FP16, KF_ATTN_PREFILL, KF_ATTN_DECODE,
                   KF_JIT_ALLOW, KF_JIT_FORBID, KF_KV_SAME, KF_KV_E4M3, STATUS_NAMES)
from ._tensor import describe, torch_module, InterfaceError, TensorInfo, view

DECODE_MAX_Q = 16  # kf_attn_kind: decode serves Sq 1..16


class Error(RuntimeError):
    """A kforge call failed. .status is the kf_status (an int, None when the library could
    not be loaded), .status_name its name, .message kforge's text (kf_errmsg), .call the C
    function that failed (None for checks made in Python before any C call)."""

    def __init__(self, status, message, call=None):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, f"status {status}") if status is not None else "no library"
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{self.status_name}: {message}")


class ArgumentError(Error, ValueError):
    """An argument was refused in Python, before any call into libkforge (status KF_ERR_ARG)."""

    def __init__(self, message):
        super().__init__(KF_ERR_ARG, message, None)


class LibraryNotFound(Error, OSError):
    def __init__(self, message):
        Error.__init__(self, None, message, None)


def _load(path=None):
    try:
        return _lib.load(path)
    except _lib.LibraryNotFound as e:
        raise LibraryNotFound(str(e)) from None
    except OSError as e:  # dlopen failed
        raise LibraryNotFound(f"could not load libkforge: {e}") from None


def version():
    """kf_version() of the library that would be loaded, e.g. "0.1.0"."""
    return _load().kf_version().decode()


def version_number():
    return int(_load().kf_version_number())


def status_str(status):
    st = _checked_int("status", status, ctypes.c_int)
    return _load().kf_status_str(st).decode()


def library_path():
    return _load()._kforge_path


# ---- checked struct fields -----------------------------------------------------------
# ctypes truncates an int that does not fit its field (B = 2**32 + 2 reaches C as 2): every integer
# that goes into a struct field is range-checked first, and refused naming the field.
_PREFIX = {"kf_config": "config", "kf_attn_desc": "desc", "kf_attn_tensors": "tensors",
           "kf_kda_desc": "desc", "kf_kda_tensors": "tensors", "kf_parts_desc": "desc",
           "kf_parts_tensors": "tensors"}


def _int_range(ctype):
    bits = 8 * ctypes.sizeof(ctype)
    if ctype is ctypes.c_void_p or ctype(-1).value > 0:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _checked_int(name, value, ctype):
    if isinstance(value, float) or value is None:
        raise ArgumentError(f"{name} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise ArgumentError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    lo, hi = _int_range(ctype)
    if not lo <= v <= hi:
        raise ArgumentError(f"{name} = {v} is outside the range of its C field ({lo}..{hi})")
    return v


_INT_TYPES = (ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong,
              ctypes.c_ulonglong, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t)


def _put(obj, field, value):
    """obj.field = value, with integers (also in arrays and pointers) checked against the C type."""
    ctype = dict(type(obj)._fields_)[field]
    name = f"{_PREFIX.get(type(obj).__name__, type(obj).__name__)}.{field}"
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        vals = tuple(value)
        if len(vals) != ctype._length_:
            raise ArgumentError(f"{name} takes {ctype._length_} values, got {len(vals)}")
        getattr(obj, field)[:] = [_checked_int(f"{name}[{i}]", v, ctype._type_) for i, v in enumerate(vals)]
    elif ctype is ctypes.c_void_p:
        setattr(obj, field, None if value is None else (_checked_int(name, value, ctype) or None))
    elif ctype in _INT_TYPES:
        setattr(obj, field, _checked_int(name, value, ctype))
    else:
        setattr(obj, field, value)


def _fill(obj, **fields):
    for k, v in fields.items():
        _put(obj, k, v)
    return obj


def _b(s):
    if s is None:
        return None
    return os.fsencode(s)


class Plan:
    """One kf_plan. Made by Context.plan(); freed by Context.close() (or free())."""

    def __init__(self, ctx, handle, key):
        self._ctx = ctx
        self._h = handle
        self.key = key
        lib = ctx._lib
        self.variant = (lib.kf_plan_variant(handle) or b"").decode(errors="replace")
        self.source = (lib.kf_plan_source(handle) or b"").decode(errors="replace")
        self.workspace_bytes = int(lib.kf_plan_workspace(handle))

    @property
    def handle(self):
        if self._h is None:
            raise Error(KF_ERR_ARG, "the plan has been freed", None)
        return self._h

    def run(self, tensors, stream=None):
        """kf_attn_run with a kf_attn_tensors struct (kf_kda_run with a kf_kda_tensors, kf_parts_run with
        a kf_parts_tensors); stream a CUstream handle (int) or None."""
        name = _RUN.get(type(tensors), "kf_attn_run")
        st = getattr(self._ctx._lib, name)(self.handle, ctypes.byref(tensors), stream)
        if st != KF_OK:
            self._ctx._raise(st, name)

    def free(self):
        if self._h is not None:
            self._ctx._lib.kf_plan_free(self._h)
            self._h = None

    def __repr__(self):
        return f"Plan({self.variant!r}, source={self.source!r}, workspace={self.workspace_bytes})"


# the C calls of each description / tensors struct
_RUN = {_lib.kf_attn_tensors: "kf_attn_run", _lib.kf_kda_tensors: "kf_kda_run", _lib.kf_parts_tensors: "kf_parts_run"}
_PLAN = {_lib.kf_attn_desc: ("kf_attn_supported", "kf_attn_plan"), _lib.kf_kda_desc: ("kf_kda_supported", "kf_kda_plan"),
         _lib.kf_parts_desc: ("kf_parts_supported", "kf_parts_plan")}


def _desc_key(d):
    if isinstance(d, _lib.kf_parts_desc):
        return ("parts",) + tuple(getattr(d, f) for f, _ in d._fields_)   # parts: the bytes of the string
    if isinstance(d, _lib.kf_kda_desc):
        vals = (getattr(d, f) for f, _ in d._fields_)
        return ("kda",) + tuple(tuple(v) if isinstance(v, ctypes.Array) else v for v in vals)
    return (d.kind, d.dtype, d.hq, d.hkv, d.d, d.causal, float(d.scale), d.max_batch, d.max_q,
            d.max_kv, d.packed_q, tuple(d.q_strides), tuple(d.k_strides), tuple(d.v_strides),
            tuple(d.o_strides), d.page_size, d.window, d.window_left, float(d.softcap), d.sinks, d.kv_dtype)


class Context:
    """A kf_ctx on one CUDA device.

    Context(device=0, db=None, bundles=(), jit=True, template_dir=None, lib=None)
    db: path of the database of binaries and tuned winners (None: none, so plans use the
    template defaults). bundles: bundle files to serve from. jit: allow NVRTC compiles.
    lib: path of libkforge (default: $KFORGE_LIB, next to the package, ../build/libkforge.so).
    Raises Error (status and kforge's message) when kf_open fails.
    """

    def __init__(self, device=0, db=None, bundles=(), jit=True, template_dir=None, lib=None):
        self._h = None
        self._plans = {}
        self._lock = threading.RLock()
        self._lib = _load(lib)
        self.device = int(device)
        self.db = db
        self.bundles = tuple(bundles or ())
        self.jit = bool(jit)
        cfg = _lib.config_init()
        _put(cfg, "device", self.device)
        keep = [_b(db), _b(template_dir)] + [_b(p) for p in self.bundles]
        cfg.db_path = keep[0]
        cfg.template_dir = keep[1]
        if self.bundles:
            arr = (ctypes.c_char_p * len(self.bundles))(*keep[2:])
            keep.append(arr)
            cfg.bundles = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))
            _put(cfg, "n_bundles", len(self.bundles))
        cfg.jit = KF_JIT_ALLOW if jit else KF_JIT_FORBID
        h = ctypes.c_void_p()
        st = self._lib.kf_open(ctypes.byref(h), ctypes.byref(cfg))
        if st != KF_OK:
            # *out is always set, also on failure, so kf_errmsg can say why
            msg = (self._lib.kf_errmsg(h) or b"").decode(errors="replace")
            self._lib.kf_close(h)
            raise Error(int(st), msg, "kf_open")
        self._h = h

    # -- life ------------------------------------------------------------------------
    def close(self):
        with self._lock:
            for p in self._plans.values():
                p.free()
            self._plans.clear()
            if self._h is not None:
                self._lib.kf_close(self._h)
                self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self):
        if self._h is None:
            raise Error(KF_ERR_ARG, "the context is closed", None)
        return self._h

    def errmsg(self):
        return (self._lib.kf_errmsg(self._h) or b"").decode(errors="replace")

    def _raise(self, st, call):
        raise Error(int(st), self.errmsg(), call)

    # -- plans -----------------------------------------------------------------------
    def supported(self, desc):
        """(True, "") or (False, message) for a kf_attn_desc, kf_kda_desc or kf_parts_desc. Never compiles."""
        fn = getattr(self._lib, _PLAN[type(desc)][0])
        st = fn(self.handle, ctypes.byref(desc))
        return (True, "") if st == KF_OK else (False, f"{STATUS_NAMES.get(st, st)}: {self.errmsg()}")

    def plan(self, desc):
        """The cached Plan for a kf_attn_desc, kf_kda_desc or kf_parts_desc (kf_attn_plan /
        kf_kda_plan / kf_parts_plan on first use; may compile)."""
        key = _desc_key(desc)
        with self._lock:
            p = self._plans.get(key)
            if p is None:
                h = ctypes.c_void_p()
                name = _PLAN[type(desc)][1]
                st = getattr(self._lib, name)(self.handle, ctypes.byref(desc), ctypes.byref(h))
                if st != KF_OK:
                    self._raise(st, name)
                p = Plan(self, h, key)
                self._plans[key] = p
            return p

    def has_plan(self, desc):
        """Whether plan(desc) would answer from the cache (no kf_*_plan call, no compile, no
        allocation): what an op checks before running inside a CUDA graph capture."""
        with self._lock:
            return _desc_key(desc) in self._plans

    @property
    def plans(self):
        return list(self._plans.values())

    def bind(self, q, k, v, **kw):
        """A Call: the arguments checked, the plan made and the kf_attn_tensors struct built
        once; call.run() then only enqueues (what a benchmark times). Same keywords as
        attention() except ctx."""
        call = prepare(q, k, v, **kw)
        call.attach(self)
        return call

    def attention(self, q, k, v, **kw):
        return attention(q, k, v, ctx=self, **kw)

    def bind_kda(self, q, k, v, g, beta, **kw):
        """A checked KDA call with its plan made (see kforge.kda); call.run() only enqueues."""
        from ._kda import prepare_kda
        call = prepare_kda(q, k, v, g, beta, **kw)
        call.attach(self)
        return call

    def kda(self, q, k, v, g, beta, **kw):
        from ._kda import kda
        return kda(q, k, v, g, beta, ctx=self, **kw)

    def bind_mla(self, q, kv_cache, block_table, cache_seqlens, **kw):
        """A checked MLA decode call with its plan made (see kforge.mla_decode); call.run() only enqueues."""
        from ._parts import prepare_mla
        return prepare_mla(q, kv_cache, block_table, cache_seqlens, **kw).attach(self)

    def mla_decode(self, q, kv_cache, block_table, cache_seqlens, **kw):
        from ._parts import mla_decode
        return mla_decode(q, kv_cache, block_table, cache_seqlens, ctx=self, **kw)

    def bind_parts(self, q, k, v=None, **kw):
        """A checked split-score call with its plan made (see kforge.parts_decode); call.run() only enqueues."""
        from ._parts import prepare_parts
        return prepare_parts(q, k, v, **kw).attach(self)

    def parts_decode(self, q, k, v=None, **kw):
        from ._parts import parts_decode
        return parts_decode(q, k, v, ctx=self, **kw)

    def __repr__(self):
        return f"Context(device={self.device}, db={self.db!r}, jit={self.jit})"


# ---- default contexts (ctx=None) -----------------------------------------------------
_default_lock = threading.Lock()
_defaults = {}


def default_context(device=0):
    """The context attention() uses when ctx is None: one per device, with the database
    $KFORGE_DB when set (else none)."""
    with _default_lock:
        c = _defaults.get(device)
        if c is None:
            c = Context(device=device, db=os.environ.get("KFORGE_DB") or None)
            _defaults[device] = c
        return c


def set_default_context(ctx):
    """Makes ctx the context of its device for every call given no ctx (attention(), kda(), mla_decode(),
    warmup(), the torch ops of kforge.ops, kforge.compat): e.g. one opened on a tuned database or bundle.
    Returns the context it replaces (or None); that one is not closed."""
    with _default_lock:
        old = _defaults.get(ctx.device)
        _defaults[ctx.device] = ctx
        return old


def existing_default_context(device):
    """The default context of device if one was made, else None (opens nothing)."""
    with _default_lock:
        return _defaults.get(device)


# ---- argument checks and the call ----------------------------------------------------
_DTYPES = {"bf16": KF_BF16, "fp16": KF_FP16}


def _info(name, x):
    if isinstance(x, TensorInfo):   # a view the binding made itself (a part of an MLA row, half a vLLM cache)
        return x
    try:
        return describe(name, x)
    except InterfaceError as e:
        raise ArgumentError(str(e)) from None


def _check_last_contiguous(t):
    if t.ndim and t.shape[-1] > 1 and t.strides[-1] != 1:
        raise ArgumentError(f"{t.name}: the last dimension must be contiguous (stride 1); "
                            f"shape {t.shape}, element strides {t.strides}")


def _stream_handle(stream):
    if stream is None:
        return None
    if isinstance(stream, int):
        return _checked_int("stream", stream, ctypes.c_void_p) or None
    for attr in ("cuda_stream", "handle", "ptr"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return _checked_int(f"stream.{attr}", h, ctypes.c_void_p) or None
    raise ArgumentError(f"stream: expected an int handle or an object with .cuda_stream, got "
                        f"{type(stream).__name__}")


class Call:
    """A checked attention call (see Context.bind)."""

    def __init__(self, desc, tensors, keep, out, lse, device, stream, torch_stream):
        self.desc = desc
        self.tensors = tensors
        self._keep = keep
        self.out = out
        self.lse = lse
        self.device = device
        self._stream = stream              # explicit handle, or None
        self._torch_stream = torch_stream  # read the current torch stream at run time
        self.ctx = None
        self.plan = None

    def attach(self, ctx):
        if self.device is not None and ctx.device != self.device:
            raise ArgumentError(f"the tensors are on device {self.device} but the context is on "
                                f"device {ctx.device}")
        self.ctx = ctx
        self.plan = ctx.plan(self.desc)
        return self

    def stream(self):
        if self._stream is not None:
            return self._stream
        if self._torch_stream:
            torch = torch_module()
            dev = self.device if self.device is not None else torch.cuda.current_device()
            return torch.cuda.current_stream(dev).cuda_stream or None
        return None

    def run(self, stream=None):
        s = _stream_handle(stream) if stream is not None else self.stream()
        self.plan.run(self.tensors, s)
        return (self.out, self.lse) if self.lse is not None else self.out

    __call__ = run


def kv_lengths(name, lens, b, capacity, keep):
    """(kv_len pointer, kv_len_all) of lens: None (every sequence capacity keys), an int (all that many), or
    a contiguous int32 [b] device array (kept alive in keep)."""
    if lens is None:
        return None, capacity
    if isinstance(lens, int) and not isinstance(lens, bool):
        if not 0 <= lens <= capacity:
            raise ArgumentError(f"{name} {lens} is outside 0..{capacity} (the cache capacity)")
        return None, lens
    tl = _info(name, lens)
    if tl.dtype != "int32" or tl.shape != (b,) or tl.strides[0] != 1:
        raise ArgumentError(f"{name}: expected a contiguous int32 [{b}]; got {tl.dtype} "
                            f"{tl.shape} strides {tl.strides}")
    keep.append(lens)
    return tl.ptr, capacity


def attach_default(call, ctx):
    """call attached to ctx, or (ctx None) to the default context of the tensors' device; returns call."""
    if ctx is None:
        dev = call.device
        if dev is None:
            torch = torch_module()
            dev = torch.cuda.current_device() if torch is not None else 0
        ctx = default_context(dev)
    return call.attach(ctx)


def split_kv_cache(kv_cache, name="kv_cache"):
    """(k, v) of vLLM's paged cache [2, num_blocks, block_size, Hkv, D] as views (TensorInfo; no copy:
    k starts at kv_cache's pointer, v at pointer + stride(0) elements), each [num_blocks, block_size, Hkv, D]
    with kv_cache's own strides. attention(q, kv_cache, None, block_table=...) takes the cache so."""
    t = _info(name, kv_cache)
    if t.ndim != 5 or t.shape[0] != 2:
        raise ArgumentError(f"{name}: with v=None, k is a combined cache [2, num_blocks, block_size, Hkv, D] "
                            f"(vLLM's layout); got shape {t.shape}")
    try:
        return (view(t, "k (kv_cache[0])", 0, t.shape[1:], t.strides[1:]),
                view(t, "v (kv_cache[1])", t.strides[0], t.shape[1:], t.strides[1:]))
    except InterfaceError as e:
        raise ArgumentError(str(e)) from None


def _feature_vector(name, x, n, keep):
    """Pointer of a contiguous fp32 [n] device array (sinks, k_scale, v_scale), kept alive in keep."""
    t = _info(name, x)
    if t.dtype != "fp32" or t.shape != (n,) or (n > 1 and t.strides[0] != 1):
        raise ArgumentError(f"{name}: expected a contiguous fp32 [{n}]; got {t.dtype} {t.shape} strides {t.strides}")
    keep.append(x)
    return t.ptr


def _check_features(window_left, softcap, causal):
    """(window on, window_left, softcap) checked as the C API checks them, refused in Python with the argument's name."""
    if window_left is not None:
        if isinstance(window_left, bool) or not isinstance(window_left, int) or window_left < 0:
            raise ArgumentError(f"window_left must be None (no window) or an int >= 0 (keys before the query's "
                                f"own), got {window_left!r}")
        if not causal:
            raise ArgumentError(f"window_left={window_left}: a sliding window needs causal=True (kforge serves the "
                                "left window of causal attention, not a two-sided one)")
    if softcap is None:
        softcap = 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise ArgumentError(f"softcap must be a number (0: none), got {softcap!r}")
    cap = float(softcap)
    if not (cap == 0.0 or 1e-3 <= cap < float("inf")):
        raise ArgumentError(f"softcap must be 0 (none) or a finite cap >= 0.001, got {softcap!r}")
    return (0, 0) if window_left is None else (1, window_left), cap


def prepare(q, k, v, causal=False, kv_len=None, cu_seqlens_q=None, scale=None, out=None,
            lse=False, kind=None, max_seqlen_q=None, stream=None, block_table=None, window_left=None,
            softcap=0.0, sinks=None, k_scale=None, v_scale=None):
    """Checks the arguments and builds the kf_attn_desc and kf_attn_tensors; makes no call
    into libkforge. Raises ArgumentError. With block_table (int32 [B, max_pages]) k and v are
    page pools [pages, page_size, Hkv, D] (decode and prefill). With v None, k is vLLM's combined paged
    cache [2, num_blocks, block_size, Hkv, D], read in place (split_kv_cache). Model features:
    window_left, softcap, sinks (fp32 [Hq]); k, v of dtype e4m3 (torch.float8_e4m3fn) with k_scale, v_scale
    (fp32 [Hkv]) -- see attention()."""
    tq = _info("q", q)
    tk, tv = split_kv_cache(k) if v is None else (_info("k", k), _info("v", v))
    fp8 = tk.dtype == "e4m3" or tv.dtype == "e4m3"
    for t in (tq,) if fp8 else (tq, tk, tv):
        if t.dtype not in _DTYPES:
            raise ArgumentError(f"{t.name}: dtype {t.dtype} is not supported (bf16 or fp16)")
    if fp8 and (tk.dtype != "e4m3" or tv.dtype != "e4m3"):
        raise ArgumentError(f"k and v: FP8 K/V are both e4m3; got {tk.dtype}, {tv.dtype}")
    if not fp8 and (tk.dtype != tq.dtype or tv.dtype != tq.dtype):
        raise ArgumentError(f"q, k, v must have one dtype; got {tq.dtype}, {tk.dtype}, {tv.dtype}")
    if fp8 and (k_scale is None or v_scale is None):
        raise ArgumentError("k and v are FP8 (e4m3): k_scale and v_scale (fp32 [Hkv], the per-head dequantisation "
                            "scales) are required")
    if not fp8 and (k_scale is not None or v_scale is not None):
        raise ArgumentError(f"k_scale / v_scale are for FP8 (e4m3) k and v; k and v are {tk.dtype}")
    (win, win_left), cap = _check_features(window_left, softcap, causal)
    for t in (tq, tk, tv):
        _check_last_contiguous(t)
    packed = cu_seqlens_q is not None
    if packed:
        if tq.ndim != 3:
            raise ArgumentError(f"q: with cu_seqlens_q, q is packed [total, Hq, D]; got shape {tq.shape}")
        total, hq, d = tq.shape
    else:
        if tq.ndim != 4:
            raise ArgumentError(f"q: expected [B, Sq, Hq, D]; got shape {tq.shape}")
        b, sq, hq, d = tq.shape
    paged = block_table is not None
    for t in (tk, tv):
        if t.ndim != 4:
            want = "[pages, page_size, Hkv, D] (block_table given)" if paged else "[B, Skv, Hkv, D]"
            raise ArgumentError(f"{t.name}: expected {want}; got shape {t.shape}")
    if tk.shape != tv.shape:
        raise ArgumentError(f"k and v shapes differ: {tk.shape} vs {tv.shape}")
    bk, skv, hkv, dk = tk.shape
    page_size, tbt = 0, None
    if paged:
        tbt = _info("block_table", block_table)
        if tbt.dtype != "int32" or tbt.ndim != 2 or tbt.strides[1] != 1:
            raise ArgumentError(f"block_table: expected int32 [B, max_pages] with contiguous rows; got "
                                f"{tbt.dtype} {tbt.shape} strides {tbt.strides}")
        page_size = skv
        bk, skv = tbt.shape[0], tbt.shape[1] * page_size  # capacity: max_pages pages per sequence
    if dk != d:
        raise ArgumentError(f"head dim of q ({d}) and k ({dk}) differ")
    if hkv <= 0 or hq % hkv:
        raise ArgumentError(f"Hq ({hq}) must be a multiple of Hkv ({hkv})")

    torch = None
    if tq.is_torch or tk.is_torch or tv.is_torch or packed or out is None or lse is True:
        torch = torch_module()
    keep = [q, k, v, tq.obj, tk.obj, tv.obj]

    tcu = None
    if packed:
        tcu = _info("cu_seqlens_q", cu_seqlens_q)
        if tcu.dtype != "int32" or tcu.ndim != 1 or tcu.shape[0] < 2:
            raise ArgumentError(f"cu_seqlens_q: expected int32 [B + 1]; got {tcu.dtype} {tcu.shape}")
        if tcu.strides[0] != 1:
            raise ArgumentError("cu_seqlens_q: must be contiguous")
        b = tcu.shape[0] - 1
        if max_seqlen_q is None:
            if not tcu.is_torch:
                raise ArgumentError("max_seqlen_q is required with a packed q that is not a torch tensor")
            cu = tcu.obj
            max_seqlen_q = int((cu[1:] - cu[:-1]).max().item())  # synchronises
        sq = int(max_seqlen_q)
        keep.append(cu_seqlens_q)
    elif max_seqlen_q is not None and int(max_seqlen_q) != sq:
        raise ArgumentError(f"max_seqlen_q ({max_seqlen_q}) is only for packed q; q has Sq {sq}")
    if bk != b:
        raise ArgumentError(f"batch of k/v ({bk}) differs from the batch of q ({b})")
    if b < 1 or sq < 1 or skv < 1:
        raise ArgumentError(f"empty problem: B={b} Sq={sq} Skv={skv}")

    devices = {t.device for t in (tq, tk, tv) if t.device is not None}
    if len(devices) > 1:
        raise ArgumentError(f"q, k, v are on different devices: {sorted(devices)}")
    device = devices.pop() if devices else None

    kv_ptr, kv_all = kv_lengths("kv_len", kv_len, b, skv, keep)

    # output
    if out is None:
        if torch is None or not tq.is_torch:
            raise ArgumentError("out= is required when q is not a torch tensor")
        src = tq.obj  # the torch tensor (also when q came through DLPack)
        out = torch.empty(src.shape, dtype=src.dtype, device=src.device)
    to = _info("out", out)
    if to.shape != tq.shape or to.dtype != tq.dtype:
        raise ArgumentError(f"out: expected {tq.dtype} {tq.shape}; got {to.dtype} {to.shape}")
    _check_last_contiguous(to)
    keep.append(out)

    lse_out, lse_ptr = None, None
    if lse is not False and lse is not None:
        # [B, Hq, Sq], or packed [Hq, total_q] (kforge.h; flash-attn's varlen softmax_lse layout)
        want = (hq, total) if packed else (b, hq, sq)
        if lse is True:
            if torch is None or not tq.is_torch:
                raise ArgumentError(f"lse=True needs torch; pass an fp32 {list(want)} array instead")
            lse_out = torch.empty(want, dtype=torch.float32, device=tq.obj.device)
        else:
            lse_out = lse
        tl = _info("lse", lse_out)
        cont = (total, 1) if packed else (hq * sq, sq, 1)
        if tl.dtype != "fp32" or tl.shape != want or any(
                st != c for st, c, n in zip(tl.strides, cont, want) if n > 1):
            raise ArgumentError(f"lse: expected a contiguous fp32 {want}; got {tl.dtype} {tl.shape} "
                                f"strides {tl.strides}")
        lse_ptr = tl.ptr
        keep.append(lse_out)

    if kind is None:
        kind = KF_ATTN_DECODE if sq <= DECODE_MAX_Q else KF_ATTN_PREFILL
    elif isinstance(kind, str):
        names = {"decode": KF_ATTN_DECODE, "prefill": KF_ATTN_PREFILL}
        if kind not in names:
            raise ArgumentError(f"kind: 'decode' or 'prefill', got {kind!r}")
        kind = names[kind]
    elif kind not in (KF_ATTN_DECODE, KF_ATTN_PREFILL):
        raise ArgumentError(f"kind: unknown value {kind!r}")

    d_ = _lib.desc_init()
    _fill(d_, kind=kind, dtype=_DTYPES[tq.dtype], hq=hq, hkv=hkv, d=d, causal=1 if causal else 0,
          max_batch=b, max_q=sq, max_kv=skv, packed_q=1 if packed else 0)
    d_.scale = 0.0 if scale is None else float(scale)
    _put(d_, "page_size", page_size)   # paged: decode and prefill (chunked prefill, prefix caching)
    _fill(d_, window=win, window_left=win_left, sinks=1 if sinks is not None else 0,
          kv_dtype=KF_KV_E4M3 if fp8 else KF_KV_SAME)
    d_.softcap = cap

    def strides3(t, packed_rows):
        if packed_rows:  # [total, H, D]: the batch stride is unused; give a plausible positive one
            s_seq, s_head = t.strides[0], t.strides[1]
            return (s_seq * sq, s_seq, s_head)
        return t.strides[0], t.strides[1], t.strides[2]

    _fill(d_, q_strides=strides3(tq, packed), o_strides=strides3(to, packed), k_strides=strides3(tk, False),
          v_strides=strides3(tv, False))

    ts = _lib.kf_attn_tensors()
    _fill(ts, q=tq.ptr, k=tk.ptr, v=tv.ptr, o=to.ptr, lse=lse_ptr,
          cu_seqlens_q=tcu.ptr if tcu is not None else None, kv_len=kv_ptr, batch=b, q_len=sq,
          kv_len_all=kv_all, total_q=total if packed else 0)  # packed: rows of q (the lse row stride, split rows)
    if paged:
        _fill(ts, block_table=tbt.ptr, bt_stride=tbt.strides[0])
        keep.append(block_table)
    if sinks is not None:
        _put(ts, "sinks", _feature_vector("sinks", sinks, hq, keep))
    if fp8:
        _fill(ts, k_scale=_feature_vector("k_scale", k_scale, hkv, keep),
              v_scale=_feature_vector("v_scale", v_scale, hkv, keep))
    ts.workspace = None

    s = _stream_handle(stream)
    torch_stream = s is None and torch is not None and tq.is_torch
    if s is None and not torch_stream and tq.stream is not None:
        s = tq.stream or None  # __cuda_array_interface__ v3: 1 legacy, 2 per-thread: the CUstream values
    return Call(d_, ts, keep, out, lse_out, device, s, torch_stream)


def attention(q, k, v, causal=False, kv_len=None, cu_seqlens_q=None, scale=None, out=None,
              lse=False, kind=None, ctx=None, max_seqlen_q=None, stream=None, block_table=None, window_left=None,
              softcap=0.0, sinks=None, k_scale=None, v_scale=None):
    """Attention of q [B, Sq, Hq, D] (or packed [total, Hq, D] with cu_seqlens_q and
    max_seqlen_q) over k, v [B, Skv, Hkv, D], bf16 or fp16, last dimension contiguous.

    causal: bottom-right aligned when Sq < Skv. kv_len: None (all Skv keys), an int (keys
    of every sequence), or an int32 device tensor [B] (Skv is then the cache capacity).
    scale: None for 1/sqrt(D). out: written in place (allocated like q when None). lse:
    True to also return an fp32 [B, Hq, Sq] log-sum-exp ([Hq, total] with a packed q), or such an
    array to fill. v: None when k is vLLM's combined paged cache [2, num_blocks, block_size, Hkv, D]
    (read in place as two views, see split_kv_cache; block_table required).
    kind: 'decode' / 'prefill' (default decode when Sq <= 16). ctx: a Context (default: one
    per device with $KFORGE_DB). stream: a CUstream handle or torch stream (default: the
    current torch stream). block_table: int32 [B, max_pages] page indices: k and v are then
    page pools [pages, page_size, Hkv, D] and key j of sequence b is row j % page_size of page
    block_table[b, j // page_size] (capacity max_pages * page_size; decode, and prefill over pages: each
    sequence's queries sit at the end of its kv_len keys).
    Model features (kf_attn_desc's; each a compile-time value of the kernel, so one plan per combination):
    window_left: None, or W >= 0: the query at key position p sees keys p - W .. p (causal only; flash-attn's
    window_size=(W, 0)). softcap: 0, or c > 0: score <- c * tanh(score / c) before the softmax (Gemma-2).
    sinks: fp32 [Hq] device array, one logit per query head joining each softmax denominator only (gpt-oss's
    s_aux); an empty sequence gives o = 0 and lse = sinks[h]. FP8 K/V: k and v of dtype e4m3
    (torch.float8_e4m3fn, rows 16-byte aligned) with k_scale and v_scale, fp32 [Hkv] per-head scales
    (value = scale[kv head] * e4m3); decode, and the mma.sync prefill.
    Returns out, or (out, lse). Raises kforge.Error.
    """
    call = prepare(q, k, v, causal=causal, kv_len=kv_len, cu_seqlens_q=cu_seqlens_q,
                   scale=scale, out=out, lse=lse, kind=kind, max_seqlen_q=max_seqlen_q,
                   stream=stream, block_table=block_table, window_left=window_left, softcap=softcap,
                   sinks=sinks, k_scale=k_scale, v_scale=v_scale)
    return attach_default(call, ctx).run()
