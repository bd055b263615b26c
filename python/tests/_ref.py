"""fp64 torch references of kforge's calls, written plainly from design.md (CPU tests of the compat layer and
the GPU tests share them): attention with GQA, per-sequence key lengths, bottom-right causal, packed q,
paged K/V, the model features (window_left, softcap, sinks, FP8 K/V with per-head scales); absorbed MLA; split-score
parts. A row that sees no key gives o = 0 and lse = -inf (the sink with sinks)."""
import math

import torch


def _one(q, k, v, causal, scale, window_left=None, softcap=0.0, sinks=None):
    """q [Sq, Hq, D], k [L, Hkv, Dk], v [L, Hkv, Dv] fp64 -> o [Sq, Hq, Dv], lse [Hq, Sq]. window_left W: query i (key
    position p = i + L - Sq) sees keys p - W .. p; softcap c: score = c tanh(score / c); sinks [Hq]: one more term
    of each denominator."""
    sq, hq = q.shape[0], q.shape[1]
    n, hkv = k.shape[0], k.shape[1]
    g = hq // hkv
    sink = None if sinks is None else sinks.double().to(q.device)[:, None].expand(hq, sq)
    if n == 0:
        return q.new_zeros(sq, hq, v.shape[2]), (q.new_full((hq, sq), float("-inf")) if sink is None else sink.clone())
    kk = k.repeat_interleave(g, dim=1)       # head h reads kv head h // g
    vv = v.repeat_interleave(g, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(n, device=q.device)[None, :]
    if causal:   # bottom-right: query i sees keys j <= i + n - sq
        s = s.masked_fill((j > i + n - sq)[None], float("-inf"))
    if window_left is not None:
        s = s.masked_fill((j < i + n - sq - window_left)[None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                       # [hq, sq]
    if sink is not None:
        lse = torch.logaddexp(lse, sink)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)      # rows with no key: 0
    o = torch.einsum("hij,jhd->ihd", p, vv)
    return o, lse


def keys_of(k, b, n, block_table=None):
    """The first n keys of sequence b: k[b, :n], or through block_table from a page pool."""
    if block_table is None:
        return k[b, :n]
    ps = k.shape[1]
    pages = block_table[b, : (n + ps - 1) // ps].long()
    return k[pages].reshape(-1, k.shape[2], k.shape[3])[:n]


def attention(q, k, v, causal=False, kv_len=None, block_table=None, cu_seqlens_q=None, scale=None, window_left=None,
              softcap=0.0, sinks=None, k_scale=None, v_scale=None):
    """kforge.attention's result in fp64: (o like q with v's last dim, lse [B, Hq, Sq] or packed [Hq, total]).
    FP8 k, v (float8_e4m3fn): value = scale[kv head] * e4m3, k_scale / v_scale fp32 [Hkv]."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qd, kd, vd = q.double(), k.double(), v.double()
    if k_scale is not None:
        kd = kd * k_scale.double().to(kd.device)[:, None]
        vd = vd * v_scale.double().to(vd.device)[:, None]
    if cu_seqlens_q is not None:
        cu = cu_seqlens_q.tolist()
        b = len(cu) - 1
    else:
        b = q.shape[0]
    cap = k.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    lens = [cap] * b if kv_len is None else ([kv_len] * b if isinstance(kv_len, int) else kv_len.tolist())
    outs, lses = [], []
    for i in range(b):
        qi = qd[cu[i]:cu[i + 1]] if cu_seqlens_q is not None else qd[i]
        o, l = _one(qi, keys_of(kd, i, lens[i], block_table), keys_of(vd, i, lens[i], block_table), causal, scale,
                    window_left, softcap, sinks)
        outs.append(o)
        lses.append(l)
    if cu_seqlens_q is not None:
        return torch.cat(outs, 0), torch.cat(lses, 1)
    return torch.stack(outs), torch.stack(lses)


def mla(q, kv_cache, block_table, cache_seqlens, scale=None, causal=False):
    """Absorbed MLA: keys the 576-wide rows, values their first 512 columns. (o [B, Sq, Hq, 512], lse)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return attention(q, kv_cache, kv_cache[..., :512], causal=causal, kv_len=cache_seqlens, block_table=block_table,
                     scale=scale)


def parts(q_parts, k_parts, v_parts=None, dv=None, causal=False, kv_len=None, block_table=None, scale=None):
    """One layer of split-score attention: score = scale * sum_p q_p . k_p; values alias the first dv columns
    of key part 0 (v_parts None) or are the value parts concatenated."""
    q = torch.cat(q_parts, -1)
    k = torch.cat(k_parts, -1)
    v = k_parts[0][..., :dv] if v_parts is None else torch.cat(v_parts, -1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return attention(q, k, v, causal=causal, kv_len=kv_len, block_table=block_table, scale=scale)


def rel(a, b):
    a, b = a.double(), b.double()
    n = b.norm()
    return float((a - b).norm() / n) if n > 0 else float((a - b).norm())
