"""mla_decode() and parts_decode(): split-score decode through kf_parts_plan / kf_parts_run (runtime/kforge.h).

Layer l, query row i, head h: score_j = scale * sum_p q[l][p](i, h) . k_p(l)(j); o[l] = softmax(score) V,
with V the first dv columns of key part 0 (value="alias": MLA's latent, read once with the key) or one value
cache per key part, concatenated (value="separate"). Key part 0 is shared by the layers of a joint scan.
"""
import re

from . import _lib
from ._lib import KF_KV_E4M3, KF_KV_SAME, KF_PARTS_MAXK, KF_PARTS_MAXL, KF_PARTS_VALUE_ALIAS, KF_PARTS_VALUE_SEPARATE
from ._tensor import last_dim_slice, torch_module
from .api import (DECODE_MAX_Q, ArgumentError, Call, _DTYPES, _check_last_contiguous, _fill, _info, _put,
                  _stream_handle, attach_default, kv_lengths)

MLA_DIM, MLA_DV, MLA_PAGE = 576, 512, 64   # FlashMLA: 512 latent + 64 RoPE, pages of 64 keys
_VALUES = {"alias": KF_PARTS_VALUE_ALIAS, "separate": KF_PARTS_VALUE_SEPARATE}
_PART = re.compile(r"([a-z]+)([0-9]+)$")


class PartsCall(Call):
    """A checked split-score call (see Context.bind_parts / bind_mla): run() only enqueues and returns
    out (a list over layers when the call was given layers), or (out, lse)."""

    def __init__(self, desc, tensors, keep, out, lse, device, stream, torch_stream, layered):
        super().__init__(desc, tensors, keep, out, lse, device, stream, torch_stream)
        self.layered = layered

    def run(self, stream=None):
        s = _stream_handle(stream) if stream is not None else self.stream()
        self.plan.run(self.tensors, s)
        out = self.out if self.layered else self.out[0]
        if self.lse is None:
            return out
        return out, (self.lse if self.layered else self.lse[0])

    __call__ = run


def _part_names(parts, dims):
    """The desc.parts string for names (a "latent512_rope64" string, or a list of names) and the dims of
    the tensors; refuses a string whose dims disagree with the tensors."""
    if isinstance(parts, str):
        items = parts.split("_")
        got = [_PART.match(x) for x in items]
        if not all(got) or len(items) != len(dims):
            raise ArgumentError(f"parts: {parts!r} is not {len(dims)} parts <name><dim> joined by '_' "
                                f"(the queries have {len(dims)} parts of dims {dims})")
        for m, dim in zip(got, dims):
            if int(m.group(2)) != dim:
                raise ArgumentError(f"parts: {parts!r} says {m.group(1)} is {m.group(2)} wide; its tensors are {dim}")
        return parts
    names = list(parts)
    if len(names) != len(dims) or not all(isinstance(n, str) and re.fullmatch(r"[a-z]+", n) for n in names):
        raise ArgumentError(f"parts: expected {len(dims)} lower-case names (or a 'name<dim>_...' string), got {parts!r}")
    return "_".join(f"{n}{d}" for n, d in zip(names, dims))


def _nested(name, x, allow_none=False):
    """x as a list over layers of lists over parts; (lists, layered) where layered says x came with layers."""
    if not isinstance(x, (list, tuple)) or not x:
        raise ArgumentError(f"{name}: expected a list of parts (one layer) or a list of layers of parts, got "
                            f"{type(x).__name__}")
    layered = isinstance(x[0], (list, tuple))
    rows = [list(r) for r in x] if layered else [list(x)]
    for r in rows:
        if not isinstance(r, list) or not r:
            raise ArgumentError(f"{name}: every layer is a non-empty list of parts")
    return rows, layered


def _scale_view(kv_scale, nb, rows, hkv, keep):
    """The per-token fp32 scales of an FP8 cache: [nb, rows] (one kv head) or [nb, rows, hkv], element strides."""
    t = _info("kv_scale", kv_scale)
    want = [(nb, rows, hkv)] + ([(nb, rows)] if hkv == 1 else [])
    if t.dtype != "fp32" or t.shape not in want:
        raise ArgumentError(f"kv_scale: expected fp32 {list(want[-1])} (one scale per token of the cache, laid out as "
                            f"its rows); got {t.dtype} {list(t.shape)}")
    keep.append(kv_scale)
    return t, tuple(t.strides[:3]) if t.ndim == 3 else (t.strides[0], t.strides[1], 1)


def prepare_parts(q, k, v=None, parts=None, block_table=None, cache_seqlens=None, softmax_scale=None, causal=False,
                  out=None, lse=False, dv=None, stream=None, kv_scale=None):
    """Checks the arguments of parts_decode() and builds the kf_parts_desc and kf_parts_tensors; makes no call
    into libkforge. Raises ArgumentError."""
    qs, layered = _nested("q", q)
    ks, klay = _nested("k", k)
    L, P = len(qs), len(qs[0])
    if not 1 <= L <= KF_PARTS_MAXL or not 1 <= P <= KF_PARTS_MAXK:
        raise ArgumentError(f"q: {L} layers of {P} parts; kforge serves 1..{KF_PARTS_MAXL} layers of 1..{KF_PARTS_MAXK} parts")
    if any(len(r) != P for r in qs):
        raise ArgumentError(f"q: every layer needs the same {P} parts; got {[len(r) for r in qs]}")
    if len(ks) != L or any(len(r) != P for r in ks):
        raise ArgumentError(f"k: expected {L} layer(s) of {P} parts like q; got {[len(r) for r in ks]}")
    tq = [[_info(f"q[{l}][{p}]", x) for p, x in enumerate(r)] for l, r in enumerate(qs)]
    # key part 0 is one cache shared by the layers: k[l][0] for l > 0 is None or k[0][0] itself
    for l in range(1, L):
        if ks[l][0] is not None and ks[l][0] is not ks[0][0]:
            raise ArgumentError(f"k[{l}][0]: key part 0 is shared by the layers (one cache, read once): pass None "
                                "or k[0][0] itself")
    tk = [[_info(f"k[{l}][{p}]", x) if (p or not l) else None for p, x in enumerate(r)] for l, r in enumerate(ks)]
    value = KF_PARTS_VALUE_ALIAS if v is None else KF_PARTS_VALUE_SEPARATE
    tv = None
    if v is not None:
        vs, _ = _nested("v", v)
        if len(vs) != L or any(len(r) != P for r in vs):
            raise ArgumentError(f"v: expected {L} layer(s) of {P} parts like k; got {[len(r) for r in vs]}")
        for l in range(1, L):
            if vs[l][0] is not None and vs[l][0] is not vs[0][0]:
                raise ArgumentError(f"v[{l}][0]: value part 0 is shared by the layers like key part 0: pass None "
                                    "or v[0][0] itself")
        tv = [[_info(f"v[{l}][{p}]", x) if (p or not l) else None for p, x in enumerate(r)] for l, r in enumerate(vs)]

    ref = tq[0][0]
    if ref.dtype not in _DTYPES:
        raise ArgumentError(f"{ref.name}: dtype {ref.dtype} is not supported (bf16 or fp16)")
    caches = [(p, t) for r in tk + (tv or []) for p, t in enumerate(r) if t is not None]   # (key part, view)
    # the FP8 latent cache: every cache e4m3 with per-token scales, the aliased value, one layer
    fp8 = any(t.dtype == "e4m3" for _, t in caches)
    if fp8:
        other = [t for _, t in caches if t.dtype != "e4m3"]
        if other:
            raise ArgumentError(f"{other[0].name}: dtype {other[0].dtype}; an FP8 cache is e4m3 in every part "
                                f"({caches[0][1].name} is e4m3)")
        if v is not None or L != 1:
            raise ArgumentError(f"k: FP8 (e4m3) caches serve the absorbed-MLA form only: values aliasing key part 0 "
                                f"(v=None) and one layer; got {'separate values' if v is not None else f'{L} layers'}")
        if kv_scale is None:
            raise ArgumentError("kv_scale: required with FP8 (e4m3) caches (fp32, one scale per token: value = "
                                "kv_scale * e4m3)")
    elif kv_scale is not None:
        raise ArgumentError(f"kv_scale: for FP8 (e4m3) caches; the caches are {caches[0][1].dtype}")
    for t in [t for r in tq for t in r] + [t for _, t in caches if not fp8]:
        if t.dtype != ref.dtype:
            raise ArgumentError(f"{t.name}: dtype {t.dtype} differs from {ref.name}'s {ref.dtype} (one dtype)")
        _check_last_contiguous(t)
        if t.ndim != 4:
            want = "[B, Sq, Hq, dim]" if t.name.startswith("q") else (
                "[pages, page_size, Hkv, dim] (block_table given)" if block_table is not None else "[B, Skv, Hkv, dim]")
            raise ArgumentError(f"{t.name}: expected {want}; got shape {t.shape}")
    b, sq, hq, _ = ref.shape
    dims = [t.shape[3] for t in tq[0]]
    for l, r in enumerate(tq):
        for p, t in enumerate(r):
            if t.shape != (b, sq, hq, dims[p]):
                raise ArgumentError(f"{t.name}: expected [{b}, {sq}, {hq}, {dims[p]}] like q[0][{p}]; got {t.shape}")
    k00 = tk[0][0]
    nb, rows, hkv = k00.shape[0], k00.shape[1], k00.shape[2]
    for p, t in caches:
        if t.shape != (nb, rows, hkv, dims[p]):
            raise ArgumentError(f"{t.name}: expected [{nb}, {rows}, {hkv}, {dims[p]}] (key part {p}, like k[0][0]); "
                                f"got {t.shape}")
    if hkv <= 0 or hq % hkv:
        raise ArgumentError(f"Hq ({hq}) must be a multiple of Hkv ({hkv})")
    if not 1 <= sq <= DECODE_MAX_Q:
        raise ArgumentError(f"q: Sq = {sq}; split-score decode serves 1..{DECODE_MAX_Q} query rows per sequence")
    if value == KF_PARTS_VALUE_ALIAS:
        dv = dims[0] if dv is None else dv
        if not isinstance(dv, int) or not 0 < dv <= dims[0]:
            raise ArgumentError(f"dv: the values alias the first dv columns of key part 0 ({dims[0]} wide); got {dv!r}")
    else:
        if dv is not None and dv != sum(dims):
            raise ArgumentError(f"dv: with separate values o is the {sum(dims)} columns of the value parts; got {dv!r}")
        dv = sum(dims)
    pstr = _part_names(parts if parts is not None else [f"p{chr(97 + i)}" for i in range(P)], dims)

    devices = {t.device for t in [t for r in tq for t in r] + [t for _, t in caches] if t.device is not None}
    if len(devices) > 1:
        raise ArgumentError(f"the tensors are on different devices: {sorted(devices)}")
    device = devices.pop() if devices else None
    keep = [q, k, v] + [t.obj for r in tq for t in r] + [t.obj for _, t in caches]
    torch = torch_module() if (ref.is_torch or out is None or lse is True) else None

    # paging
    page_size, tbt = 0, None
    if block_table is not None:
        tbt = _info("block_table", block_table)
        if tbt.dtype != "int32" or tbt.ndim != 2 or tbt.strides[1] != 1:
            raise ArgumentError(f"block_table: expected int32 [B, max_pages] with contiguous rows; got "
                                f"{tbt.dtype} {tbt.shape} strides {tbt.strides}")
        if tbt.shape[0] != b:
            raise ArgumentError(f"block_table: {tbt.shape[0]} rows, q has batch {b}")
        page_size, max_kv = rows, tbt.shape[1] * rows
        keep.append(block_table)
    else:
        if nb != b:
            raise ArgumentError(f"batch of the caches ({nb}) differs from the batch of q ({b})")
        max_kv = rows
    if b < 1 or max_kv < 1:
        raise ArgumentError(f"empty problem: B={b} max_kv={max_kv}")

    kv_ptr, kv_all = kv_lengths("cache_seqlens", cache_seqlens, b, max_kv, keep)
    tsc = _scale_view(kv_scale, nb, rows, hkv, keep) if fp8 else None

    if softmax_scale is None:
        softmax_scale = sum(dims) ** -0.5
    try:
        scale = float(softmax_scale)
    except (TypeError, ValueError):
        raise ArgumentError(f"softmax_scale must be a number, got {softmax_scale!r}") from None

    # outputs: a list over layers
    oshape = (b, sq, hq, dv)
    outs = out if isinstance(out, (list, tuple)) else ([out] if out is not None else [None] * L)
    if len(outs) != L:
        raise ArgumentError(f"out: expected {L} output(s), one per layer; got {len(outs)}")
    to = []
    for l, o in enumerate(outs):
        if o is None:
            if torch is None or not ref.is_torch:
                raise ArgumentError("out= is required when q is not a torch tensor")
            o = torch.empty(oshape, dtype=ref.obj.dtype, device=ref.obj.device)
            outs[l] = o
        t = _info(f"out[{l}]", o)
        if t.shape != oshape or t.dtype != ref.dtype:
            raise ArgumentError(f"out[{l}]: expected {ref.dtype} {list(oshape)}; got {t.dtype} {list(t.shape)}")
        _check_last_contiguous(t)
        to.append(t)
        keep.append(o)
    outs = list(outs)
    lses, lse_ptrs = None, [None] * L
    if lse is not False and lse is not None:
        want = (b, hq, sq)
        if lse is True:
            if torch is None or not ref.is_torch:
                raise ArgumentError("lse=True needs torch; pass fp32 [B, Hq, Sq] arrays instead")
            lses = [torch.empty(want, dtype=torch.float32, device=ref.obj.device) for _ in range(L)]
        else:
            lses = list(lse) if isinstance(lse, (list, tuple)) else [lse]
            if len(lses) != L:
                raise ArgumentError(f"lse: expected {L} array(s), one per layer; got {len(lses)}")
        cont = (hq * sq, sq, 1)
        for l, x in enumerate(lses):
            t = _info(f"lse[{l}]", x)
            if t.dtype != "fp32" or t.shape != want or any(st != c for st, c, n in zip(t.strides, cont, want) if n > 1):
                raise ArgumentError(f"lse[{l}]: expected a contiguous fp32 {list(want)}; got {t.dtype} {list(t.shape)} "
                                    f"strides {t.strides}")
            lse_ptrs[l] = t.ptr
            keep.append(x)

    d = _lib.parts_desc_init()
    d._parts_bytes = pstr.encode()   # alive as long as the desc (kf_parts_plan copies it)
    d.parts = d._parts_bytes
    _fill(d, dtype=_DTYPES[ref.dtype], value=value, dv=dv, hq=hq, hkv=hkv, layers=L, page_size=page_size,
          causal=1 if causal else 0, max_batch=b, max_q=sq, max_kv=max_kv, kv_dtype=KF_KV_E4M3 if fp8 else KF_KV_SAME)
    d.scale = scale

    ts = _lib.kf_parts_tensors()

    def put_view(dst, t):
        _put(dst, "ptr", t.ptr)
        _put(dst, "strides", t.strides[:3])

    for l in range(L):
        for p in range(P):
            put_view(ts.q[l][p], tq[l][p])
            if tk[l][p] is not None:
                put_view(ts.k[l][p], tk[l][p])
            if tv is not None and tv[l][p] is not None:
                put_view(ts.v[l][p], tv[l][p])
        put_view(ts.o[l], to[l])
        ts.lse[l] = lse_ptrs[l]
    _fill(ts, kv_len=kv_ptr, kv_len_all=kv_all, batch=b, q_len=sq)
    if tbt is not None:
        _fill(ts, block_table=tbt.ptr, bt_stride=tbt.strides[0])
    if tsc is not None:
        _put(ts.kv_scale, "ptr", tsc[0].ptr)
        _put(ts.kv_scale, "strides", tsc[1])
    ts.workspace = None

    s = _stream_handle(stream)
    torch_stream = s is None and torch is not None and ref.is_torch
    if s is None and not torch_stream and ref.stream is not None:
        s = ref.stream or None
    return PartsCall(d, ts, keep, outs, lses, device, s, torch_stream, layered)


def parts_decode(q, k, v=None, parts=None, block_table=None, cache_seqlens=None, softmax_scale=None, causal=False,
                 out=None, lse=False, dv=None, ctx=None, stream=None, kv_scale=None):
    """Split-score decode (kf_parts_*): score = softmax_scale * sum_p q_p . k_p over key parts with their own
    dims, e.g. a base cache shared by a group of layers plus a per-layer delta.

    q: one layer's parts [q_0, q_1, ...], each [B, Sq, Hq, dim_p] (Sq 1..16), or a list of layers of them
    (a joint scan of up to 4 layers over one shared part-0 cache). k: the caches in the same nesting,
    [B, Skv, Hkv, dim_p], or page pools [pages, page_size, Hkv, dim_p] with block_table (int32
    [B, max_pages]); k[l][0] for l > 0 is None (key part 0 is shared). v: None for values that alias the
    first dv columns of key part 0 (dv defaults to its dim), else value caches nested like k (o is their
    dims concatenated). parts: names ("base", "delta") or the desc string ("base128_delta32").
    cache_seqlens: None, an int, or int32 [B]. softmax_scale: None for (sum of dims) ** -0.5. causal:
    bottom-right aligned. lse: True, or fp32 [B, Hq, Sq] arrays to fill. kv_scale: with e4m3 caches
    (torch.float8_e4m3fn; values aliased, one layer), fp32 [B or pages, Skv or page_size(, Hkv)]: one scale per
    token, key = kv_scale * e4m3. Returns o (a list over layers when q was given layers), or (o, lse).
    """
    call = prepare_parts(q, k, v, parts=parts, block_table=block_table, cache_seqlens=cache_seqlens,
                         softmax_scale=softmax_scale, causal=causal, out=out, lse=lse, dv=dv, stream=stream,
                         kv_scale=kv_scale)
    return attach_default(call, ctx).run()


def prepare_mla(q, kv_cache, block_table, cache_seqlens, softmax_scale=None, causal=False, return_lse=False,
                out=None, lse=None, kv_scale=None, head_dim_v=MLA_DV, stream=None):
    """Checks mla_decode()'s arguments and builds the split-score call ("latent512_rope64", values aliasing
    the latent) over views of q and the cache (no copy). Raises ArgumentError."""
    if head_dim_v != MLA_DV:
        raise ArgumentError(f"head_dim_v: absorbed MLA returns the {MLA_DV} latent columns; got {head_dim_v!r}")
    tq, tc = _info("q", q), _info("kv_cache", kv_cache)
    if tq.ndim != 4 or tq.shape[3] != MLA_DIM:
        raise ArgumentError(f"q: expected [B, Sq, Hq, {MLA_DIM}] (512 latent + 64 RoPE); got shape {tq.shape}")
    if tc.ndim != 4 or tc.shape[3] != MLA_DIM:
        raise ArgumentError(f"kv_cache: expected [pages, page_size, 1, {MLA_DIM}] (FlashMLA's paged cache); got "
                            f"shape {tc.shape}")
    if tc.shape[2] != 1:
        raise ArgumentError(f"kv_cache: absorbed MLA has one latent KV head; got {tc.shape[2]} heads {tc.shape}")
    if block_table is None:
        raise ArgumentError("block_table: required (int32 [B, max_pages]); kv_cache is a page pool")
    lat = MLA_DIM - 64
    qp = [last_dim_slice(tq, "q[..., :512]", 0, lat), last_dim_slice(tq, "q[..., 512:]", lat, 64)]
    kp = [last_dim_slice(tc, "k[0][0] (kv_cache[..., :512])", 0, lat),
          last_dim_slice(tc, "k[0][1] (kv_cache[..., 512:])", lat, 64)]
    # the names the C API knows the parts by; the tensors' names in messages are q[0][p], k[0][p]
    qp[0].name, qp[1].name, kp[0].name, kp[1].name = "q[0][0]", "q[0][1]", "k[0][0]", "k[0][1]"
    if softmax_scale is None:
        softmax_scale = MLA_DIM ** -0.5   # FlashMLA's default: q.shape[-1] ** -0.5
    lse_arg = lse if lse is not None else bool(return_lse)
    call = prepare_parts(qp, kp, None, parts="latent512_rope64", block_table=block_table,
                         cache_seqlens=cache_seqlens, softmax_scale=softmax_scale, causal=causal, out=out,
                         lse=lse_arg, dv=MLA_DV, stream=stream, kv_scale=kv_scale)
    call._keep += [q, kv_cache]
    return call


def mla_decode(q, kv_cache, block_table, cache_seqlens, softmax_scale=None, causal=False, return_lse=False,
               out=None, lse=None, kv_scale=None, head_dim_v=MLA_DV, ctx=None, stream=None):
    """Absorbed MLA decode (DeepSeek-V2/V3) in FlashMLA's layouts: q [B, Sq, Hq, 576] (512 latent + 64 RoPE,
    Sq 1..16), kv_cache [pages, page_size, 1, 576] (page_size 64 for FlashMLA), block_table int32
    [B, max_pages], cache_seqlens int32 [B] (or an int); bf16 or fp16. Keys are the 576-wide rows, values
    their first 512 columns (the cache is read once). softmax_scale: None for 576 ** -0.5. causal:
    bottom-right aligned (Sq > 1: query i sees keys <= i + len - Sq). Returns out [B, Sq, Hq, 512], or
    (out, lse [B, Hq, Sq] fp32) with return_lse (or lse= an array to fill). FP8 latent cache: kv_cache of
    dtype e4m3 (torch.float8_e4m3fn, the whole 576-wide row) with kv_scale fp32 [pages, page_size] (or
    [pages, page_size, 1]), one scale per token: key and value = kv_scale * e4m3; q and out stay bf16/fp16."""
    call = prepare_mla(q, kv_cache, block_table, cache_seqlens, softmax_scale=softmax_scale, causal=causal,
                       return_lse=return_lse, out=out, lse=lse, kv_scale=kv_scale, head_dim_v=head_dim_v,
                       stream=stream)
    return attach_default(call, ctx).run()
