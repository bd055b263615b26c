"""Drop-in entry points shaped like flash-attn 2's and PyTorch SDPA's, over kforge's ops.

    from kforge.compat import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, sdpa

Argument names and layouts are flash-attn 2's (q [B, Sq, Hq, D], k/v [B, Skv, Hkv, D], softmax_lse
[B, Hq, Sq], varlen packed [total, H, D] with softmax_lse [Hq, total_q]); causal is bottom-right aligned
when Sq != Skv, as in flash-attn >= 2.1 and kforge. The calls go through the torch ops of kforge.ops, so
they trace under torch.compile and capture in CUDA graphs (after a warm-up call of each shape), and their
results equal kforge's native calls bit for bit (the same plan runs). Model features: window_size=(left, 0)
(a left sliding window on causal attention; (left, -1) with causal=True means the same, (-1, 0) is causal),
softcap, s_aux (gpt-oss's per-head sink logits, fp32 [Hq], as vLLM's flash-attn takes them), FP8 k / v
(torch.float8_e4m3fn, also as caches) with k_scale / v_scale (fp32 [Hkv], per-head dequantisation scales).
What kforge does not serve is refused with kforge.ArgumentError naming the argument: a window reaching right
of the query (window_size right > 0, or (left, -1) without causal), alibi_slopes, dropout_p != 0,
rotary_cos/rotary_sin, cache_batch_idx, cache_leftpad. Importing this module needs no torch; calling it does.
"""
from .api import ArgumentError


def _ops():
    from . import ops   # registers the torch ops on first use
    return ops


def _torch():
    import torch
    return torch


def _window(window_size, causal):
    """(causal, window_left, why-not) of flash-attn's window_size=(left, right) (-1: unbounded on that side)."""
    if window_size is None:
        return causal, None, None
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        return causal, None, f"window_size={window_size!r} (a pair (left, right) of ints, -1 for unbounded)"
    if (left, right) == (-1, -1):
        return causal, None, None
    if left < -1 or right < -1:
        return causal, None, f"window_size={(left, right)!r} (each side >= 0, or -1 for unbounded)"
    if right == 0 or (right == -1 and causal):   # flash-attn: right 0 is causal, whatever causal says
        return True, None if left == -1 else left, None
    return causal, None, (f"window_size={(left, right)!r} (kforge serves a left window on causal attention: "
                          f"(left, 0), or (left, -1) with causal=True; not a window reaching right of the query)")


def _features(fn, window_size, causal, softcap, s_aux, k_scale, v_scale):
    """(causal, keyword arguments of the op) for the model features of a call; refuses what kforge does not serve."""
    causal, left, why = _window(window_size, causal)
    if why:
        raise ArgumentError(f"kforge.compat.{fn}: {why}")
    if softcap is None:
        softcap = 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not softcap >= 0:
        raise ArgumentError(f"kforge.compat.{fn}: softcap={softcap!r} (0 for none, or a cap > 0)")
    if (k_scale is None) != (v_scale is None):
        raise ArgumentError(f"kforge.compat.{fn}: k_scale and v_scale go together (FP8 K/V, fp32 [Hkv] each)")
    feat = {}
    if left is not None:
        feat["window_left"] = left
    if softcap:
        feat["softcap"] = float(softcap)
    if s_aux is not None:
        feat["sinks"] = s_aux
    if k_scale is not None:
        feat["k_scale"], feat["v_scale"] = k_scale, v_scale
    return causal, feat


def _refuse(fn, dropout_p=0.0, alibi_slopes=None, **others):
    """ArgumentError naming every argument set that kforge does not serve."""
    bad = []
    if dropout_p:
        bad.append(f"dropout_p={dropout_p!r} (inference only: 0)")
    if alibi_slopes is not None:
        bad.append("alibi_slopes (ALiBi is not served: None)")
    for name, val in others.items():
        if val is not None:
            bad.append(f"{name} (not served: None)")
    if bad:
        raise ArgumentError(f"kforge.compat.{fn}: " + "; ".join(bad))


def _lse_result(out, lse, return_lse, with_probs):
    if not return_lse:
        return out
    return (out, lse, None) if with_probs else (out, lse)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, s_aux=None, k_scale=None,
                    v_scale=None):
    """flash_attn.flash_attn_func: q [B, Sq, Hq, D], k, v [B, Skv, Hkv, D] (bf16/fp16; Hq % Hkv == 0).
    Returns out [B, Sq, Hq, D], or (out, softmax_lse [B, Hq, Sq], None) with return_attn_probs (kforge
    returns no attention probabilities; the third value is None). deterministic is accepted: kforge's
    kernels are deterministic. window_size, softcap, s_aux, k_scale / v_scale: the module's doc."""
    _refuse("flash_attn_func", dropout_p, alibi_slopes)
    causal, feat = _features("flash_attn_func", window_size, causal, softcap, s_aux, k_scale, v_scale)
    res = _ops().attention(q, k, v, causal=causal, scale=softmax_scale, return_lse=return_attn_probs, **feat)
    return _lse_result(*(res if return_attn_probs else (res, None)), return_attn_probs, True)


def _varlen_lengths(cu, name):
    """Per-sequence lengths of cu_seqlens on the device (no synchronisation)."""
    torch = _torch()
    if cu.dtype != torch.int32 or cu.dim() != 1:
        raise ArgumentError(f"{name}: expected int32 [B + 1]; got {cu.dtype} {tuple(cu.shape)}")
    return (cu[1:] - cu[:-1]).to(torch.int32)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, seqused_k=None, s_aux=None,
                           k_scale=None, v_scale=None):
    """flash_attn.flash_attn_varlen_func: q packed [total_q, Hq, D] with cu_seqlens_q (int32 [B + 1]) and
    max_seqlen_q; k, v packed [total_k, Hkv, D] with cu_seqlens_k and max_seqlen_k, or (block_table int32
    [B, max_blocks]) page pools [num_blocks, page_size, Hkv, D] read in place, keys per sequence from
    seqused_k (int32 [B], vLLM's) or cu_seqlens_k. Causal: bottom-right per sequence.
    kforge's C API takes packed queries but not packed keys: packed k and v are gathered into a padded
    [B, max_seqlen_k, Hkv, D] copy (on the device, no synchronisation); pass a block_table to avoid it.
    A paged call with max_seqlen_q <= 16 runs the decode kernels, past that the paged prefill (chunked
    prefill: each sequence's queries are the last of its keys). window_size, softcap, s_aux, k_scale / v_scale:
    the module's doc.
    Returns out [total_q, Hq, D], or (out, softmax_lse [Hq, total_q], None) with return_attn_probs."""
    _refuse("flash_attn_varlen_func", dropout_p, alibi_slopes)
    causal, feat = _features("flash_attn_varlen_func", window_size, causal, softcap, s_aux, k_scale, v_scale)
    torch = _torch()
    if block_table is not None:
        kv_len = seqused_k if seqused_k is not None else _varlen_lengths(cu_seqlens_k, "cu_seqlens_k")
        kp, vp = k, v
    else:
        if seqused_k is not None:
            raise ArgumentError("kforge.compat.flash_attn_varlen_func: seqused_k is read with a block_table only")
        if k.dim() != 3:
            raise ArgumentError(f"kforge.compat.flash_attn_varlen_func: k: expected packed [total_k, Hkv, D]; got "
                                f"{tuple(k.shape)}")
        kv_len = _varlen_lengths(cu_seqlens_k, "cu_seqlens_k")
        pos = cu_seqlens_k[:-1, None].long() + torch.arange(int(max_seqlen_k), device=k.device)[None, :]
        pos = pos.clamp_(max=max(k.shape[0] - 1, 0))
        kp, vp = k[pos], v[pos]   # [B, max_seqlen_k, Hkv, D]; keys past kv_len are never read
    res = _ops().attention(q, kp, vp, causal=causal, kv_len=kv_len, block_table=block_table,
                           cu_seqlens_q=cu_seqlens_q, max_seqlen_q=int(max_seqlen_q), scale=softmax_scale,
                           return_lse=return_attn_probs, **feat)
    return _lse_result(*(res if return_attn_probs else (res, None)), return_attn_probs, True)


def _append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table):
    """flash-attn's in-place append: k, v [B, Snew, Hkv, D] written at positions cache_seqlens[b] + j of
    each sequence (through block_table when paged). Returns the new lengths (int32 [B])."""
    torch = _torch()
    if cache_seqlens is None:
        raise ArgumentError("kforge.compat.flash_attn_with_kvcache: k and v are appended at cache_seqlens: it is "
                            "required with k and v")
    b, snew = k.shape[0], k.shape[1]
    lens = _lengths_tensor(cache_seqlens, b, k.device)
    pos = lens[:, None].long() + torch.arange(snew, device=k.device)[None, :]          # [B, Snew]
    if block_table is None:
        bidx = torch.arange(b, device=k.device)[:, None].expand(b, snew)
        k_cache[bidx, pos] = k
        v_cache[bidx, pos] = v
    else:
        ps = k_cache.shape[1]
        page = torch.gather(block_table, 1, pos // ps).long()
        k_cache[page, pos % ps] = k
        v_cache[page, pos % ps] = v
    return lens + snew


def _lengths_tensor(n, b, device):
    torch = _torch()
    if isinstance(n, int):
        return torch.full((b,), n, dtype=torch.int32, device=device)
    return n if n.dtype == torch.int32 else n.to(torch.int32)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            s_aux=None, k_scale=None, v_scale=None):
    """flash_attn.flash_attn_with_kvcache: q [B, Sq, Hq, D]; k_cache, v_cache [B, S_cache, Hkv, D], or page
    pools [num_blocks, page_size, Hkv, D] with block_table int32 [B, max_blocks]; cache_seqlens int32 [B]
    or an int (keys per sequence; None: the whole cache). k, v [B, Snew, Hkv, D]: appended in place at
    cache_seqlens first, then attended (as flash-attn does). num_splits is ignored (kforge's plan picks the
    split count). Causal: bottom-right. A paged cache runs the decode kernels up to Sq 16, the paged prefill past
    that. FP8 caches (float8_e4m3fn) with k_scale / v_scale: k and v to append are then FP8 too (written as they are).
    window_size, softcap, s_aux: the module's doc.
    Returns out, or (out, softmax_lse [B, Hq, Sq]) with return_softmax_lse."""
    _refuse("flash_attn_with_kvcache", 0.0, alibi_slopes, rotary_cos=rotary_cos,
            rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad)
    causal, feat = _features("flash_attn_with_kvcache", window_size, causal, softcap, s_aux, k_scale, v_scale)
    if (k is None) != (v is None):
        raise ArgumentError("kforge.compat.flash_attn_with_kvcache: k and v are given together or not at all")
    if k is not None:
        kv_len = _append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table)
    elif cache_seqlens is not None:
        # an int becomes a lengths tensor (not a narrower view of the cache): one plan serves every length
        cap = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
        if isinstance(cache_seqlens, int) and not 0 <= cache_seqlens <= cap:
            raise ArgumentError(f"kforge.compat.flash_attn_with_kvcache: cache_seqlens {cache_seqlens} is outside "
                                f"0..{cap} (the cache capacity)")
        kv_len = _lengths_tensor(cache_seqlens, q.shape[0], q.device)
    else:
        kv_len = None
    res = _ops().attention(q, k_cache, v_cache, causal=causal, kv_len=kv_len, block_table=block_table, scale=softmax_scale,
                           return_lse=return_softmax_lse, **feat)
    return _lse_result(*(res if return_softmax_lse else (res, None)), return_softmax_lse, False)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
         causal_align="top_left"):
    """torch.nn.functional.scaled_dot_product_attention's call in its [B, H, S, D] layout (read in place as
    [B, S, H, D] views; the last dimension contiguous): query [B, Hq, Sq, D], key/value [B, Hkv, Skv, D],
    Hq != Hkv with enable_gqa=True (as SDPA). Returns [B, Hq, Sq, D] (a transposed view of kforge's
    [B, Sq, Hq, D] output).

    is_causal follows SDPA: its mask is TOP-LEFT aligned when Sq != Skv (query i sees keys 0..i), not
    flash-attn's and kforge's bottom-right one (query i sees keys 0..i + Skv - Sq). kforge serves top-left
    exactly: Sq < Skv as bottom-right over the first Sq keys (the later keys are masked for every query);
    Sq > Skv as two calls (the first Skv rows causal, the rest seeing every key) whose outputs are
    concatenated. causal_align="bottom_right" gives kforge's own mask. attn_mask and dropout_p are refused."""
    _refuse("sdpa", dropout_p, None, attn_mask=attn_mask)
    if causal_align not in ("top_left", "bottom_right"):
        raise ArgumentError(f"kforge.compat.sdpa: causal_align is 'top_left' (SDPA's) or 'bottom_right'; got "
                            f"{causal_align!r}")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ArgumentError(f"kforge.compat.sdpa: expected [B, H, S, D] query, key, value; got {tuple(query.shape)}, "
                            f"{tuple(key.shape)}, {tuple(value.shape)}")
    hq, hkv = query.shape[1], key.shape[1]
    if hq != hkv and not enable_gqa:
        raise ArgumentError(f"kforge.compat.sdpa: query has {hq} heads and key {hkv}: pass enable_gqa=True "
                            "(as SDPA requires)")
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    sq, skv = q.shape[1], k.shape[1]
    ops = _ops()
    if not is_causal or sq == skv or causal_align == "bottom_right":
        return ops.attention(q, k, v, causal=bool(is_causal), scale=scale).transpose(1, 2)
    if sq < skv:   # top-left: no query sees a key past Sq - 1
        return ops.attention(q, k[:, :sq], v[:, :sq], causal=True, scale=scale).transpose(1, 2)
    # sq > skv: rows 0..skv-1 causal (top-left = bottom-right there), rows skv.. see all keys
    head = ops.attention(q[:, :skv], k, v, causal=True, scale=scale)
    tail = ops.attention(q[:, skv:], k, v, causal=False, scale=scale)
    return _torch().cat([head, tail], dim=1).transpose(1, 2)
