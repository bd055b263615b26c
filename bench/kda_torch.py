"""Kimi Delta Attention in PyTorch: the peers and the oracle of the KDA rows of the harness.

Per value head a state S [K, V]; per token t (g_t in log space, g <= 0, q scaled):
  S <- diag(exp g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
(design.md, KDA). Two implementations of that one formula:

- naive(): token by token, batched over (sequence, value head); the state in fp32 (the
  "floor of honesty" peer) or fp64 (the oracle every contender is checked against).
- chunked(): the WY/UT form of design.md with chunk C (64 by default): cumulative gates G
  per chunk; L[i,j] = beta_i sum_d k_i[d] k_j[d] exp(G_i[d] - G_j[d]) strictly lower;
  T = (I + L)^-1 diag(beta) by a batched triangular solve; W = T (exp(G) * K); U = T V;
  then per chunk V' = U - W S, O = (Q * exp G) S + A_qk V', S <- diag(exp G_last) S +
  (K * exp(G_last - G))^T V'. Batched matmuls over (chunk, sequence, head); fp32 (or fp64)
  throughout. exp(-G) is never formed: the intra-chunk products exp(G_i - G_j) (i >= j) are
  built level by level, each level the lower-left quadrants of the diagonal blocks with the
  boundary between the two halves as reference, so both factors exp(G_i - G_ref) and
  exp(G_ref - G_j) are <= 1 (no overflow for any g <= 0, e.g. lower bound -5 over 64 tokens).

Inputs (like kforge.kda): q, k [N, T, H, K] (or packed [T, H, K] / [1, T, H, K] with
cu_seqlens, N + 1 offsets), v [.., HV, V], g [.., HV, K] (log space, or raw with
gate='sigmoid': g = lower_bound * sigmoid(exp(A_log[hv]) * (g + dt_bias[hv]))), beta [.., HV]
(raw with beta_sigmoid), initial state [N, HV, K, V] (K first) or None. Value head hv reads
q/k head hv // (HV // H). Returns (o like v, final state [N, HV, K, V]).

Ragged sequences are padded to a common length with identity steps (g = 0, beta = 0, k = 0:
S is left unchanged), so one batched code path serves packed and padded inputs.
A bound object (Naive / Chunked) does all host work (lengths, index tensors) once; its
__call__ only enqueues device work (no host synchronisation: capturable in a CUDA graph).
"""

import torch


def _pow2_at_least(n):
    p = 1
    while p < n:
        p *= 2
    return p


class _Layout:
    """Packed or padded input <-> [N, Tp, ...] padded to a multiple of the chunk."""

    def __init__(self, lens, packed, t, chunk, device):
        self.lens = [int(x) for x in lens]
        if any(x < 0 for x in self.lens):
            raise ValueError(f"negative sequence length in {self.lens}")
        self.n = len(self.lens)
        self.packed = packed
        self.t = t  # tokens per sequence (padded input) or total tokens (packed)
        self.max_len = max(self.lens, default=0)
        self.tp = -(-self.max_len // chunk) * chunk
        self.identity = (not packed) and self.tp == t
        self.dst = None
        if packed:
            idx = [n * self.tp + i for n, ln in enumerate(self.lens) for i in range(ln)]
            self.dst = torch.tensor(idx, dtype=torch.long, device=device)

    def pad(self, x):
        """x packed [T, ...] or padded [N, T, ...] -> [N, Tp, ...] (new zero rows at the ends)."""
        if self.packed:
            out = x.new_zeros((self.n * self.tp,) + tuple(x.shape[1:]))
            out.index_copy_(0, self.dst, x)
            return out.view((self.n, self.tp) + tuple(x.shape[1:]))
        if self.identity:
            return x
        out = x.new_zeros((self.n, self.tp) + tuple(x.shape[2:]))
        out[:, :self.t] = x
        return out

    def unpad(self, y):
        """[N, Tp, ...] -> packed [T, ...] or padded [N, T, ...]."""
        if self.packed:
            return y.reshape((self.n * self.tp,) + tuple(y.shape[2:])).index_select(0, self.dst)
        return y if self.identity else y[:, :self.t]


class _Bound:
    """The arguments of one KDA call, checked and laid out once."""

    def __init__(self, q, k, v, g, beta, initial_state=None, cu_seqlens=None, scale=None, gate="log",
                 A_log=None, dt_bias=None, lower_bound=-5.0, l2norm=False, beta_sigmoid=False,
                 dtype=torch.float32, out_dtype=None, chunk=1):
        packed = cu_seqlens is not None
        if packed:
            if isinstance(cu_seqlens, torch.Tensor):
                cu = [int(x) for x in cu_seqlens.tolist()]  # host copy at bind time only
            else:
                cu = [int(x) for x in cu_seqlens]
            if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
                raise ValueError(f"cu_seqlens must start at 0 and not decrease; got {cu}")
            lens = [b - a for a, b in zip(cu, cu[1:])]
            squeeze = q.ndim == 4
            if squeeze:
                if q.shape[0] != 1:
                    raise ValueError(f"packed q must be [T, H, K] or [1, T, H, K]; got {tuple(q.shape)}")
                q, k, v, g, beta = q[0], k[0], v[0], g[0], beta[0]
            if cu[-1] != q.shape[0]:
                raise ValueError(f"cu_seqlens ends at {cu[-1]} but q has {q.shape[0]} tokens")
            t = q.shape[0]
            _, h, dk = q.shape
            hv, dv = v.shape[1], v.shape[2]
        else:
            n, t, h, dk = q.shape
            hv, dv = v.shape[2], v.shape[3]
            lens = [t] * n
            squeeze = False
        if hv % h:
            raise ValueError(f"HV ({hv}) must be a multiple of H ({h})")
        if gate not in ("log", "sigmoid"):
            raise ValueError(f"gate: 'log' or 'sigmoid', got {gate!r}")
        if gate == "sigmoid" and A_log is None:
            raise ValueError("A_log is required with gate='sigmoid'")
        self.q, self.k, self.v, self.g, self.beta = q, k, v, g, beta
        self.h0, self.A_log, self.dt_bias = initial_state, A_log, dt_bias
        self.h, self.hv, self.dk, self.dv = h, hv, dk, dv
        self.scale = float(dk ** -0.5 if scale is None else scale)
        self.gate, self.lower_bound = gate, float(lower_bound)
        self.l2norm, self.beta_sigmoid = bool(l2norm), bool(beta_sigmoid)
        self.dtype = dtype
        self.out_dtype = out_dtype
        self.squeeze = squeeze
        max_len = max(lens, default=0)
        self.chunk = max(1, min(int(chunk), _pow2_at_least(max_len)))
        self.layout = _Layout(lens, packed, t, self.chunk, q.device)
        self.n = self.layout.n

    # the per-token transforms of the kernel, in the compute dtype, on the caller's layout
    def _inputs(self):
        cd = self.dtype
        q, k = self.q.to(cd), self.k.to(cd)
        v, g, beta = self.v.to(cd), self.g.to(cd), self.beta.to(cd)
        if self.gate == "sigmoid":
            a = torch.exp(self.A_log.to(cd)).view(self.hv, 1)
            if self.dt_bias is not None:
                g = g + self.dt_bias.to(cd).view(self.hv, self.dk)
            g = self.lower_bound * torch.sigmoid(a * g)
        if self.l2norm:
            q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
            k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        q = q * self.scale
        if self.beta_sigmoid:
            beta = torch.sigmoid(beta)
        grp = self.hv // self.h
        lay = self.layout
        q, k, v, g, beta = (lay.pad(x) for x in (q, k, v, g, beta))  # [N, Tp, heads, ...]
        if grp > 1:  # value head hv reads q/k head hv // grp
            q = q.repeat_interleave(grp, dim=2)
            k = k.repeat_interleave(grp, dim=2)
        return q, k, v, g, beta

    def _state0(self):
        B = self.n * self.hv
        if self.h0 is None:
            return torch.zeros((B, self.dk, self.dv), dtype=self.dtype, device=self.q.device)
        return self.h0.to(self.dtype).reshape(B, self.dk, self.dv).clone()

    def _finish(self, o, S):
        """o [N, Tp, HV, V] -> the caller's layout (and out_dtype); S -> [N, HV, K, V]."""
        o = self.layout.unpad(o)
        if self.out_dtype is not None:
            o = o.to(self.out_dtype)
        if self.squeeze:
            o = o.unsqueeze(0)
        return o, S.view(self.n, self.hv, self.dk, self.dv)


class Naive(_Bound):
    """The token-by-token recurrence, batched over (sequence, value head)."""

    def __init__(self, *a, **kw):
        kw["chunk"] = 1
        super().__init__(*a, **kw)

    def __call__(self):
        q, k, v, g, beta = self._inputs()
        N, L, HV = self.n, self.layout.tp, self.hv
        B = N * HV

        def steps(x):  # [N, L, HV, ...] -> [L, N*HV, ...] contiguous
            return x.transpose(0, 1).reshape((L, B) + tuple(x.shape[3:]))

        q, k, v, eg, beta = steps(q), steps(k), steps(v), steps(torch.exp(g)), steps(beta)
        S = self._state0()
        o = torch.empty((L, B, self.dv), dtype=self.dtype, device=S.device)
        for t in range(L):
            S.mul_(eg[t].unsqueeze(-1))
            kt = k[t].unsqueeze(-1)  # [B, K, 1]
            kv = torch.bmm(kt.transpose(1, 2), S).squeeze(1)  # S^T k: [B, V]
            u = beta[t].unsqueeze(-1) * (v[t] - kv)
            S.baddbmm_(kt, u.unsqueeze(1))
            o[t] = torch.bmm(q[t].unsqueeze(1), S).squeeze(1)
        o = o.view(L, N, HV, self.dv).transpose(0, 1)
        return self._finish(o, S)


class Chunked(_Bound):
    """The chunked WY/UT form (see the module docstring)."""

    def __init__(self, *a, chunk=64, **kw):
        if chunk < 1 or chunk & (chunk - 1):
            raise ValueError(f"chunk must be a power of two, got {chunk}")
        super().__init__(*a, chunk=chunk, **kw)

    def _state_decay(self, S, egl):
        """S <- diag(exp G_last) S (a method so that the tests can plant a mutant)."""
        return S * egl.unsqueeze(-1)

    def __call__(self):
        q, k, v, g, beta = self._inputs()
        N, Tp, HV, K, V, C = self.n, self.layout.tp, self.hv, self.dk, self.dv, self.chunk
        if Tp == 0:
            S = self._state0()
            o = torch.zeros((N, 0, HV, V), dtype=self.dtype, device=S.device)
            return self._finish(o, S)
        nc, B = Tp // C, N * HV

        def chunks(x):  # [N, Tp, HV, ...] -> [nc, N*HV, C, ...] contiguous
            tail = tuple(x.shape[3:])
            x = x.reshape((N, nc, C, HV) + tail).transpose(2, 3)
            return x.transpose(0, 1).reshape((nc, B, C) + tail)

        q, k, v, g, beta = chunks(q), chunks(k), chunks(v), chunks(g), chunks(beta)
        G = g.cumsum(dim=2)  # [nc, B, C, K], decreasing along the chunk
        akk, aqk = self._intra(q, k, G)
        L = beta.unsqueeze(-1) * akk  # strictly lower; unitriangular=True below supplies the I of I + L
        eG = torch.exp(G)
        rhs = torch.cat([beta.unsqueeze(-1) * eG * k, beta.unsqueeze(-1) * v], dim=-1)
        X = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)  # (I + L)^-1 rhs
        W, U = X[..., :K], X[..., K:]
        WQ = torch.cat([W, q * eG], dim=2)  # [nc, B, 2C, K]: one product with S per chunk
        glast = G[:, :, C - 1, :]  # [nc, B, K]
        Kd = (k * torch.exp(glast.unsqueeze(2) - G)).transpose(-1, -2).contiguous()  # [nc, B, K, C]
        egl = torch.exp(glast)
        U = U.contiguous()
        S = self._state0()
        O = torch.empty((nc, B, C, V), dtype=self.dtype, device=S.device)
        for c in range(nc):
            X = torch.bmm(WQ[c], S)  # [B, 2C, V]: W S over Q exp(G) S
            Vp = U[c] - X[:, :C]
            torch.baddbmm(X[:, C:], aqk[c], Vp, out=O[c])
            S = torch.baddbmm(self._state_decay(S, egl[c]), Kd[c], Vp)
        o = O.view(nc, N, HV, C, V).permute(1, 0, 3, 2, 4).reshape(N, Tp, HV, V)
        return self._finish(o, S)

    @staticmethod
    def _intra(q, k, G):
        """A_kk (strictly lower) and A_qk (lower, diagonal included) of every chunk:
        A[i, j] = sum_d x_i[d] k_j[d] exp(G_i[d] - G_j[d]), i > j (i >= j for A_qk).
        Level by level: at quadrant size s, the lower-left s x s quadrant of each diagonal
        block of size 2s, with G at the last row of the upper half as reference."""
        nc, B, C, K = k.shape
        akk = k.new_zeros((nc, B, C, C))
        aqk = k.new_zeros((nc, B, C, C))
        s = C // 2
        while s >= 1:
            nb = C // (2 * s)
            Gv = G.view(nc, B, nb, 2, s, K)
            kv = k.view(nc, B, nb, 2, s, K)
            qv = q.view(nc, B, nb, 2, s, K)
            ref = Gv[:, :, :, 0, s - 1:s, :]  # [nc, B, nb, 1, K]
            el = torch.exp(Gv[:, :, :, 1] - ref)  # rows i (later half): <= 1
            ku = (kv[:, :, :, 0] * torch.exp(ref - Gv[:, :, :, 0])).transpose(-1, -2)  # cols j: <= 1
            for a, x in ((akk, kv), (aqk, qv)):
                blk = torch.matmul(x[:, :, :, 1] * el, ku)  # [nc, B, nb, s, s]
                sub = a.view(nc, B, nb, 2, s, nb, 2, s)[:, :, :, 1, :, :, 0, :]  # [nc, B, nb, s, nb, s]
                torch.diagonal(sub, dim1=2, dim2=4).copy_(blk.permute(0, 1, 3, 4, 2))
            s //= 2
        aqk.diagonal(dim1=-2, dim2=-1).copy_((q * k).sum(-1))
        return akk, aqk


def naive(q, k, v, g, beta, **kw):
    """The recurrence: (o like v, final state [N, HV, K, V]); kw as _Bound (dtype: the state's)."""
    return Naive(q, k, v, g, beta, **kw)()


def chunked(q, k, v, g, beta, chunk=64, **kw):
    """The chunked WY/UT form: (o like v, final state [N, HV, K, V])."""
    return Chunked(q, k, v, g, beta, chunk=chunk, **kw)()
