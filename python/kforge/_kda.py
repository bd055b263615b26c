"""kda(): Kimi Delta Attention through kf_kda_plan / kf_kda_run (runtime/kforge.h)."""
from . import _lib
from ._lib import (KF_KDA_PREFILL, KF_KDA_DECODE, KF_KDA_GATE_LOG, KF_KDA_GATE_SIGMOID, KF_KDA_STATE_KV,
                   KF_KDA_STATE_VK)
from ._tensor import torch_module
from .api import ArgumentError, Call, _info, _check_last_contiguous, _fill, _put, _stream_handle, attach_default

_GATES = {"log": KF_KDA_GATE_LOG, "sigmoid": KF_KDA_GATE_SIGMOID}
_LAYOUTS = {"kv": KF_KDA_STATE_KV, "vk": KF_KDA_STATE_VK}
_MODES = {"prefill": KF_KDA_PREFILL, "decode": KF_KDA_DECODE}


class KdaCall(Call):
    """A checked KDA call (see Context.bind_kda): run() enqueues and returns out, or
    (out, final_state) when a final state was asked for."""

    def __init__(self, desc, tensors, keep, out, final_state, device, stream, torch_stream):
        super().__init__(desc, tensors, keep, out, None, device, stream, torch_stream)
        self.final_state = final_state

    def run(self, stream=None):
        s = _stream_handle(stream) if stream is not None else self.stream()
        self.plan.run(self.tensors, s)
        return (self.out, self.final_state) if self.final_state is not None else self.out

    __call__ = run


def _rows(t, packed, ndim, layout):
    """(shape without the sequence dimension, (sequence, token, head) strides) of a [B, T, ...]
    tensor, or of a packed [T, ...] / [1, T, ...] one (sequence stride 0)."""
    if packed:
        if t.ndim == ndim:
            return t.shape, ((0,) + t.strides)[:3]
        if t.ndim == ndim + 1 and t.shape[0] == 1:
            return t.shape[1:], ((0,) + t.strides[1:])[:3]
        raise ArgumentError(f"{t.name}: with cu_seqlens, {t.name} is packed {layout.replace('B, ', '')} "
                            f"(or [1, ...]); got shape {t.shape}")
    if t.ndim != ndim + 1:
        raise ArgumentError(f"{t.name}: expected {layout}; got shape {t.shape}")
    return t.shape[1:], t.strides[:3]


def _fp32(t, what):
    if t.dtype != "fp32":
        raise ArgumentError(f"{t.name}: dtype {t.dtype} is not supported ({what} is fp32)")


def prepare_kda(q, k, v, g, beta, initial_state=None, final_state=False, cu_seqlens=None, scale=None,
                gate="log", A_log=None, dt_bias=None, lower_bound=-5.0, l2norm=False, beta_sigmoid=False,
                state_layout="kv", out=None, mode=None, stream=None):
    """Checks the arguments of kda() and builds the kf_kda_desc and kf_kda_tensors; makes no call
    into libkforge. Raises ArgumentError."""
    tq, tk, tv, tg, tb = _info("q", q), _info("k", k), _info("v", v), _info("g", g), _info("beta", beta)
    for t in (tq, tk, tv):
        if t.dtype != "bf16":
            raise ArgumentError(f"{t.name}: dtype {t.dtype} is not supported (KDA takes bf16 q, k, v)")
    _fp32(tg, "the gate g")
    _fp32(tb, "beta")
    for t in (tq, tk, tv, tg):
        _check_last_contiguous(t)
    if not isinstance(gate, str) or gate not in _GATES:
        raise ArgumentError(f"gate: 'log' or 'sigmoid', got {gate!r}")
    if not isinstance(state_layout, str) or state_layout not in _LAYOUTS:
        raise ArgumentError(f"state_layout: 'kv' ([N, HV, K, V]) or 'vk' ([N, HV, V, K]), got {state_layout!r}")

    packed = cu_seqlens is not None
    qs, qst = _rows(tq, packed, 3, "[B, T, H, K]")
    ks, kst = _rows(tk, packed, 3, "[B, T, H, K]")
    vs, vst = _rows(tv, packed, 3, "[B, T, HV, V]")
    gs, gst = _rows(tg, packed, 3, "[B, T, HV, K]")
    bs, bst = _rows(tb, packed, 2, "[B, T, HV]")
    T, h, dk = qs
    _, hv, dv = vs
    if ks != qs:
        raise ArgumentError(f"k and q shapes differ: {tk.shape} vs {tq.shape}")
    if vs[0] != T:
        raise ArgumentError(f"v has {vs[0]} tokens, q has {T}")
    if gs != (T, hv, dk):
        raise ArgumentError(f"g: expected [.., {T}, {hv}, {dk}] (tokens, value heads, K); got shape {tg.shape}")
    if bs != (T, hv):
        raise ArgumentError(f"beta: expected [.., {T}, {hv}] (tokens, value heads); got shape {tb.shape}")
    if h <= 0 or hv % h:
        raise ArgumentError(f"HV ({hv}) must be a multiple of H ({h})")
    if not packed:
        b = tq.shape[0]
        for t in (tk, tv, tg, tb):
            if t.shape[0] != b:
                raise ArgumentError(f"{t.name}: batch {t.shape[0]} differs from the batch of q ({b})")

    torch = torch_module() if (tq.is_torch or out is None or final_state is True) else None
    keep = [q, k, v, g, beta, tq.obj, tk.obj, tv.obj, tg.obj, tb.obj]

    tcu = None
    if packed:
        tcu = _info("cu_seqlens", cu_seqlens)
        if tcu.dtype not in ("int32", "int64") or tcu.ndim != 1 or tcu.shape[0] < 2:
            raise ArgumentError(f"cu_seqlens: expected int32 or int64 [N + 1]; got {tcu.dtype} {tcu.shape}")
        if tcu.strides[0] != 1:
            raise ArgumentError("cu_seqlens: must be contiguous")
        n, total = tcu.shape[0] - 1, T
        keep.append(cu_seqlens)
    else:
        n, total = tq.shape[0], tq.shape[0] * T
        if n < 1:
            raise ArgumentError(f"empty problem: B={n}")

    devices = {t.device for t in (tq, tk, tv, tg, tb) if t.device is not None}
    if len(devices) > 1:
        raise ArgumentError(f"q, k, v, g, beta are on different devices: {sorted(devices)}")
    device = devices.pop() if devices else None

    # gate parameters
    a_ptr = dt_ptr = None
    if gate == "sigmoid":
        if A_log is None:
            raise ArgumentError("A_log is required with gate='sigmoid' (fp32 [HV])")
        ta = _info("A_log", A_log)
        _fp32(ta, "A_log")
        if ta.shape != (hv,) or ta.strides[0] != 1:
            raise ArgumentError(f"A_log: expected a contiguous fp32 [{hv}]; got {ta.shape} strides {ta.strides}")
        a_ptr = ta.ptr
        keep.append(A_log)
        if dt_bias is not None:
            td = _info("dt_bias", dt_bias)
            _fp32(td, "dt_bias")
            cont = (dk, 1) if td.ndim == 2 else (1,)
            if td.shape not in ((hv, dk), (hv * dk,)) or td.strides != cont:
                raise ArgumentError(f"dt_bias: expected a contiguous fp32 [{hv}, {dk}]; got {td.shape} "
                                    f"strides {td.strides}")
            dt_ptr = td.ptr
            keep.append(dt_bias)
    elif A_log is not None or dt_bias is not None:
        raise ArgumentError("A_log and dt_bias are only for gate='sigmoid' (g is already in log space)")

    # states
    sshape = (n, hv, dk, dv) if state_layout == "kv" else (n, hv, dv, dk)
    h0_ptr = ht_ptr = None
    sstrides = None
    if initial_state is not None:
        ts = _info("initial_state", initial_state)
        _fp32(ts, "the state")
        if ts.shape != sshape:
            raise ArgumentError(f"initial_state: expected fp32 {list(sshape)} (state_layout {state_layout!r}); "
                                f"got shape {ts.shape}")
        _check_last_contiguous(ts)
        h0_ptr, sstrides = ts.ptr, ts.strides[:3]
        keep.append(initial_state)
    fin = None
    if final_state is True:
        if torch is None or not tq.is_torch:
            raise ArgumentError("final_state=True needs torch; pass an fp32 array to fill instead")
        fin = torch.empty(sshape, dtype=torch.float32, device=tq.obj.device)
    elif final_state is not False and final_state is not None:
        fin = final_state
    if fin is not None:
        tf = _info("final_state", fin)
        _fp32(tf, "the state")
        if tf.shape != sshape:
            raise ArgumentError(f"final_state: expected fp32 {list(sshape)} (state_layout {state_layout!r}); "
                                f"got shape {tf.shape}")
        _check_last_contiguous(tf)
        if sstrides is not None and tf.strides[:3] != sstrides:
            raise ArgumentError(f"final_state: strides {tf.strides} differ from initial_state's "
                                f"{sstrides + (1,)} (one state layout serves both)")
        ht_ptr, sstrides = tf.ptr, tf.strides[:3]
        keep.append(fin)

    # output
    if out is None:
        if torch is None or not tv.is_torch:
            raise ArgumentError("out= is required when v is not a torch tensor")
        src = tv.obj
        out = torch.empty(src.shape, dtype=src.dtype, device=src.device)
    to = _info("out", out)
    if to.shape != tv.shape or to.dtype != "bf16":
        raise ArgumentError(f"out: expected bf16 {tv.shape} (like v); got {to.dtype} {to.shape}")
    _check_last_contiguous(to)
    _, ost = _rows(to, packed, 3, "[B, T, HV, V]")
    keep.append(out)

    if mode is None:
        mode = KF_KDA_DECODE if total <= n else KF_KDA_PREFILL
    elif isinstance(mode, str):
        if mode not in _MODES:
            raise ArgumentError(f"mode: 'prefill' or 'decode', got {mode!r}")
        mode = _MODES[mode]
    elif mode not in (KF_KDA_PREFILL, KF_KDA_DECODE):
        raise ArgumentError(f"mode: unknown value {mode!r}")
    try:
        lb = float(lower_bound)
        sc = 0.0 if scale is None else float(scale)
    except (TypeError, ValueError):
        raise ArgumentError(f"lower_bound and scale must be numbers; got {lower_bound!r}, {scale!r}") from None

    d = _lib.kda_desc_init()
    _fill(d, mode=mode, max_seqs=n, max_tokens=total, h=h, hv=hv, dk=dk, dv=dv, gate=_GATES[gate],
          l2norm=1 if l2norm else 0, beta_sigmoid=1 if beta_sigmoid else 0, state_layout=_LAYOUTS[state_layout],
          has_initial_state=1 if h0_ptr is not None else 0, wants_final_state=1 if ht_ptr is not None else 0,
          q_strides=qst, k_strides=kst, v_strides=vst, g_strides=gst, beta_strides=bst, o_strides=ost)
    d.lower_bound = lb
    d.scale = sc
    if sstrides is not None:
        _put(d, "state_strides", sstrides)

    ts_ = _lib.kf_kda_tensors()
    _fill(ts_, q=tq.ptr, k=tk.ptr, v=tv.ptr, g=tg.ptr, beta=tb.ptr, o=to.ptr, a_log=a_ptr, dt_bias=dt_ptr,
          initial_state=h0_ptr, final_state=ht_ptr, n=n, total=total)
    if tcu is not None:
        _put(ts_, "cu_seqlens64" if tcu.dtype == "int64" else "cu_seqlens", tcu.ptr)
    ts_.workspace = None

    s = _stream_handle(stream)
    torch_stream = s is None and torch is not None and tq.is_torch
    if s is None and not torch_stream and tq.stream is not None:
        s = tq.stream or None
    return KdaCall(d, ts_, keep, out, fin, device, s, torch_stream)


def kda(q, k, v, g, beta, initial_state=None, final_state=False, cu_seqlens=None, scale=None, gate="log",
        A_log=None, dt_bias=None, lower_bound=-5.0, l2norm=False, beta_sigmoid=False, state_layout="kv",
        out=None, ctx=None, mode=None, stream=None):
    """Kimi Delta Attention. q, k [B, T, H, K] bf16 (or packed [T, H, K] / [1, T, H, K] with
    cu_seqlens int32/int64 [N + 1]); v [.., T, HV, V] bf16; g [.., T, HV, K] fp32; beta [.., T, HV]
    fp32; last dimensions contiguous; HV % H == 0.

    gate='log': g is the log-space gate (<= 0). gate='sigmoid': g is raw and the kernel computes
    lower_bound * sigmoid(exp(A_log[hv]) * (g + dt_bias[hv])), A_log fp32 [HV], dt_bias fp32
    [HV, K] or None, lower_bound in [-5, 0). l2norm: normalise q and k in the kernel. beta_sigmoid:
    beta = sigmoid(beta). scale: None for K^-0.5. initial_state: None (zero) or fp32 [N, HV, K, V]
    (state_layout 'kv') / [N, HV, V, K] ('vk'). final_state: False, True (allocated), or an fp32
    array of the state's shape to fill (may be initial_state: updated in place). out: written in
    place (allocated like v when None). mode: 'prefill' / 'decode' (default decode when there are
    no more tokens than sequences). ctx: a Context (default: one per device with $KFORGE_DB).
    Returns out, or (out, final_state). Raises kforge.Error.
    """
    call = prepare_kda(q, k, v, g, beta, initial_state=initial_state, final_state=final_state,
                       cu_seqlens=cu_seqlens, scale=scale, gate=gate, A_log=A_log, dt_bias=dt_bias,
                       lower_bound=lower_bound, l2norm=l2norm, beta_sigmoid=beta_sigmoid,
                       state_layout=state_layout, out=out, mode=mode, stream=stream)
    return attach_default(call, ctx).run()
