"""torch.library custom ops over kforge, for torch.compile(fullgraph=True) and CUDA graphs.

    import kforge.ops                      # registers the ops (importing kforge alone needs no torch)
    o, lse = torch.ops.kforge.attention(q, k, v, kv_len, None, None, 0, True, None, False)
    o = kforge.ops.attention(q, k, v, causal=True, kv_len=lens)            # the same, keyword form
    o = kforge.ops.mla_decode(q, kv_cache, block_table, cache_seqlens)
    o, state = kforge.ops.kda(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    o = kforge.ops.kda_inplace(q, k, v, g, beta, state)                   # state updated in place

Ops (schemas in torch.ops.kforge.<name>.default._schema):
  kforge::attention(q, k, v?, kv_len?, block_table?, cu_seqlens_q?, max_seqlen_q, causal, scale?, return_lse,
      window_left=-1, softcap=0., sinks?=None, k_scale?=None, v_scale?=None)
      -> (out, lse)          v None: k is vLLM's [2, blocks, block_size, Hkv, D] cache; the model features
                             (appended, with defaults: the ten-argument call is unchanged) as kforge.attention's,
                             window_left -1 for none; k, v float8_e4m3fn with k_scale, v_scale (fp32 [Hkv])
  kforge::mla_decode(q, kv_cache, block_table, cache_seqlens, softmax_scale?, causal, return_lse) -> (out, lse)
  kforge::kda(q, k, v, g, beta, initial_state?, cu_seqlens?, A_log?, dt_bias?, scale?, gate, lower_bound,
      l2norm, beta_sigmoid, state_layout, output_final_state, kda_mode) -> (out, final_state)
  kforge::kda_inplace(..., Tensor(a!) state, ...) -> out      the one op that mutates an argument
lse / final_state are empty (shape [0]) when not asked for. Every op has a fake (meta) implementation
giving the shapes and dtypes, so torch.compile traces a model through them.

CUDA graphs: a plan is made (maybe compiled, its workspace allocated) on the first call of a shape, which
cannot happen inside a capture: make the plans first, with kforge.warmup(...) or one eager call of the
same shapes, strides and flags. Inside a capture (torch.cuda.is_current_stream_capturing()) an op whose
plan does not exist yet refuses with kforge.Error naming the op and the shape. The ops use the default
context of the tensors' device (kforge.set_default_context to choose its database or bundles).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import api, _kda, _parts
from ._lib import KF_ERR_ARG

LIB = "kforge"


def _capturing():
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def check_capture(op, ctx, desc):
    """Inside a CUDA graph capture, refuse a call whose plan is not made yet (kf_*_plan may compile and
    allocates the plan's workspace: neither may happen inside a capture)."""
    if ctx is None or not ctx.has_plan(desc):
        raise api.Error(KF_ERR_ARG, f"{op}: no plan for this call exists and a CUDA graph is being captured: "
                        "plans are made (maybe compiled) outside a capture. Call kforge.warmup(...) with the "
                        "same shapes, dtypes, strides and flags, or run the op once eagerly, before capturing "
                        f"(desc: {_desc_text(desc)})", op)


def _desc_text(desc):
    out = []
    for f, _ in desc._fields_:
        v = getattr(desc, f)
        out.append(f"{f}={list(v) if hasattr(v, '_length_') else v}")
    return " ".join(out)


def _run(op, call):
    """Attach call to the default context of its device and run it; inside a capture only from an
    existing plan."""
    dev = call.device if call.device is not None else torch.cuda.current_device()
    if _capturing():
        ctx = api.existing_default_context(dev)
        check_capture(op, ctx, call.desc)
        call.attach(ctx)
    else:
        api.attach_default(call, None)
    return call.run()


def _empty_lse(like):
    return like.new_empty((0,), dtype=torch.float32)


# ---- kforge::attention ------------------------------------------------------------------------
@torch.library.custom_op(f"{LIB}::attention", mutates_args=())
def _attention(q: Tensor, k: Tensor, v: Optional[Tensor], kv_len: Optional[Tensor], block_table: Optional[Tensor],
               cu_seqlens_q: Optional[Tensor], max_seqlen_q: int, causal: bool, scale: Optional[float],
               return_lse: bool, window_left: int = -1, softcap: float = 0.0, sinks: Optional[Tensor] = None,
               k_scale: Optional[Tensor] = None, v_scale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    if cu_seqlens_q is not None and max_seqlen_q <= 0 and _capturing():
        raise api.Error(KF_ERR_ARG, "kforge::attention: a packed q needs max_seqlen_q > 0 inside a CUDA graph "
                        "capture (reading it from cu_seqlens_q synchronises)", "kforge::attention")
    call = api.prepare(q, k, v, causal=causal, kv_len=kv_len, cu_seqlens_q=cu_seqlens_q, scale=scale,
                       lse=return_lse, max_seqlen_q=max_seqlen_q if max_seqlen_q > 0 else None,
                       block_table=block_table, window_left=None if window_left < 0 else window_left,
                       softcap=softcap, sinks=sinks, k_scale=k_scale, v_scale=v_scale)
    res = _run("kforge::attention", call)
    return (res[0], res[1]) if return_lse else (res, _empty_lse(q))


@_attention.register_fake
def _attention_fake(q, k, v, kv_len, block_table, cu_seqlens_q, max_seqlen_q, causal, scale, return_lse,
                    window_left=-1, softcap=0.0, sinks=None, k_scale=None, v_scale=None):
    out = q.new_empty(q.shape)
    if not return_lse:
        return out, _empty_lse(q)
    if cu_seqlens_q is not None:   # packed [total, Hq, D]: lse [Hq, total]
        return out, q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    return out, q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


def attention(q, k, v=None, causal=False, kv_len=None, block_table=None, cu_seqlens_q=None, max_seqlen_q=0,
              scale=None, return_lse=False, window_left=None, softcap=0.0, sinks=None, k_scale=None, v_scale=None):
    """torch.ops.kforge.attention with keywords; returns out, or (out, lse). See kforge.attention (window_left None:
    no window; softcap; sinks fp32 [Hq]; FP8 k, v with k_scale, v_scale fp32 [Hkv])."""
    if window_left is not None and (isinstance(window_left, bool) or not isinstance(window_left, int)
                                    or window_left < 0):
        raise api.ArgumentError(f"window_left must be None (no window) or an int >= 0, got {window_left!r}")
    feat = () if window_left is None and not softcap and sinks is None and k_scale is None and v_scale is None else (
        -1 if window_left is None else int(window_left), float(softcap or 0.0), sinks, k_scale, v_scale)
    out, lse = torch.ops.kforge.attention(q, k, v, kv_len, block_table, cu_seqlens_q, int(max_seqlen_q), bool(causal),
                                          None if scale is None else float(scale), bool(return_lse), *feat)
    return (out, lse) if return_lse else out


# ---- kforge::mla_decode -----------------------------------------------------------------------
@torch.library.custom_op(f"{LIB}::mla_decode", mutates_args=())
def _mla_decode(q: Tensor, kv_cache: Tensor, block_table: Tensor, cache_seqlens: Tensor,
                softmax_scale: Optional[float], causal: bool, return_lse: bool) -> Tuple[Tensor, Tensor]:
    call = _parts.prepare_mla(q, kv_cache, block_table, cache_seqlens, softmax_scale=softmax_scale, causal=causal,
                              return_lse=return_lse)
    res = _run("kforge::mla_decode", call)
    return (res[0], res[1]) if return_lse else (res, _empty_lse(q))


@_mla_decode.register_fake
def _mla_decode_fake(q, kv_cache, block_table, cache_seqlens, softmax_scale, causal, return_lse):
    b, sq, hq, _ = q.shape
    out = q.new_empty((b, sq, hq, _parts.MLA_DV))
    return out, (q.new_empty((b, hq, sq), dtype=torch.float32) if return_lse else _empty_lse(q))


def mla_decode(q, kv_cache, block_table, cache_seqlens, softmax_scale=None, causal=False, return_lse=False):
    """torch.ops.kforge.mla_decode with keywords; returns out, or (out, lse). See kforge.mla_decode."""
    out, lse = torch.ops.kforge.mla_decode(q, kv_cache, block_table, cache_seqlens,
                                           None if softmax_scale is None else float(softmax_scale), bool(causal),
                                           bool(return_lse))
    return (out, lse) if return_lse else out


# ---- kforge::kda and kforge::kda_inplace ------------------------------------------------------
def _kda_state_shape(q, v, cu_seqlens, state_layout):
    n = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else q.shape[0]
    hv, dk, dv = v.shape[-2], q.shape[-1], v.shape[-1]
    return (n, hv, dk, dv) if state_layout == "kv" else (n, hv, dv, dk)


def _kda_mode(mode):
    return None if mode == "auto" else mode


@torch.library.custom_op(f"{LIB}::kda", mutates_args=())
def _kda_op(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, initial_state: Optional[Tensor],
            cu_seqlens: Optional[Tensor], A_log: Optional[Tensor], dt_bias: Optional[Tensor], scale: Optional[float],
            gate: str, lower_bound: float, l2norm: bool, beta_sigmoid: bool, state_layout: str,
            output_final_state: bool, kda_mode: str) -> Tuple[Tensor, Tensor]:
    call = _kda.prepare_kda(q, k, v, g, beta, initial_state=initial_state, final_state=bool(output_final_state),
                            cu_seqlens=cu_seqlens, scale=scale, gate=gate, A_log=A_log, dt_bias=dt_bias,
                            lower_bound=lower_bound, l2norm=l2norm, beta_sigmoid=beta_sigmoid,
                            state_layout=state_layout, mode=_kda_mode(kda_mode))
    res = _run("kforge::kda", call)
    return (res[0], res[1]) if output_final_state else (res, _empty_lse(v))


@_kda_op.register_fake
def _kda_fake(q, k, v, g, beta, initial_state, cu_seqlens, A_log, dt_bias, scale, gate, lower_bound, l2norm,
              beta_sigmoid, state_layout, output_final_state, kda_mode):
    out = v.new_empty(v.shape)
    if not output_final_state:
        return out, _empty_lse(v)
    return out, v.new_empty(_kda_state_shape(q, v, cu_seqlens, state_layout), dtype=torch.float32)


@torch.library.custom_op(f"{LIB}::kda_inplace", mutates_args=("state",))
def _kda_inplace(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor,
                 cu_seqlens: Optional[Tensor], A_log: Optional[Tensor], dt_bias: Optional[Tensor],
                 scale: Optional[float], gate: str, lower_bound: float, l2norm: bool, beta_sigmoid: bool,
                 state_layout: str, kda_mode: str) -> Tensor:
    call = _kda.prepare_kda(q, k, v, g, beta, initial_state=state, final_state=state, cu_seqlens=cu_seqlens,
                            scale=scale, gate=gate, A_log=A_log, dt_bias=dt_bias, lower_bound=lower_bound,
                            l2norm=l2norm, beta_sigmoid=beta_sigmoid, state_layout=state_layout,
                            mode=_kda_mode(kda_mode))
    return _run("kforge::kda_inplace", call)[0]


@_kda_inplace.register_fake
def _kda_inplace_fake(q, k, v, g, beta, state, cu_seqlens, A_log, dt_bias, scale, gate, lower_bound, l2norm,
                      beta_sigmoid, state_layout, kda_mode):
    return v.new_empty(v.shape)


def _kda_args(scale, gate, lower_bound, l2norm, beta_sigmoid, state_layout, mode):
    return (None if scale is None else float(scale), str(gate), float(lower_bound), bool(l2norm), bool(beta_sigmoid),
            str(state_layout), "auto" if mode is None else str(mode))


def kda(q, k, v, g, beta, initial_state=None, output_final_state=False, cu_seqlens=None, scale=None, gate="log",
        A_log=None, dt_bias=None, lower_bound=-5.0, l2norm=False, beta_sigmoid=False, state_layout="kv", mode=None):
    """torch.ops.kforge.kda with keywords; returns out, or (out, final_state). See kforge.kda."""
    sc, gate, lb, l2, bs, sl, md = _kda_args(scale, gate, lower_bound, l2norm, beta_sigmoid, state_layout, mode)
    out, fin = torch.ops.kforge.kda(q, k, v, g, beta, initial_state, cu_seqlens, A_log, dt_bias, sc, gate, lb, l2, bs,
                                    sl, bool(output_final_state), md)
    return (out, fin) if output_final_state else out


def kda_inplace(q, k, v, g, beta, state, cu_seqlens=None, scale=None, gate="log", A_log=None, dt_bias=None,
                lower_bound=-5.0, l2norm=False, beta_sigmoid=False, state_layout="kv", mode=None):
    """torch.ops.kforge.kda_inplace with keywords: state (fp32, the layout of state_layout) is the initial
    state and receives the final one; returns out."""
    sc, gate, lb, l2, bs, sl, md = _kda_args(scale, gate, lower_bound, l2norm, beta_sigmoid, state_layout, mode)
    return torch.ops.kforge.kda_inplace(q, k, v, g, beta, state, cu_seqlens, A_log, dt_bias, sc, gate, lb, l2, bs, sl,
                                        md)
