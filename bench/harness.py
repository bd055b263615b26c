"""The GPU side of the harness: inputs, the fp32 reference, the contenders, the ceilings and
the timed rounds. Needs torch (CUDA); triton and matplotlib only for flex_attention / plots.

Results JSON (schema kforge-bench/1):
  {schema, started, finished, command, argv, env{...}, config{rounds, samples_per_round,
   warmup, flush_bytes, band_floor, seed, cushion_cycles, ...},
   ceilings{copy{bytes, samples_ms}, gemm{n, flops, samples_ms}},
   shapes[{shape{...}, control{of, duplicate}, reference{dtype, tol},
           contenders[{name, label, role, status ok|wrong|unsupported|error, message, rel_err,
                       setup_s, variant, source, rounds[[ms, ...] per round]}]}],
   incomplete (a reason, when shapes were skipped)}
KDA shapes (shape.kind "kda", bench/sets/kda.json) add per contender state_err (the final
state's relative error) and the status skipped (with the reason); reference{dtype, tol,
tol_state, oracle}.
"""
import json
import math
import zlib
import os
import random
import sys
import time
import traceback

import torch
import torch.nn.functional as F

from . import budget as budgetmod
from . import env as envmod
from . import stats as statsmod

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = {"bf16": 1e-2, "fp16": 2e-3}
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# ---- device primitives (CUDA; a host-clock stand-in for the CPU dry run of the tests) ----------
_DRY = False  # set by run() for --dry-run-cpu: the whole pipeline on the CPU, host-clock timings


class _HostEvent:
    def __init__(self):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def event():
    return _HostEvent() if _DRY else torch.cuda.Event(enable_timing=True)


def sync():
    if not _DRY:
        torch.cuda.synchronize()


def empty_cache():
    if not _DRY:
        torch.cuda.empty_cache()


class Unsupported(Exception):
    """A contender cannot run this shape (recorded with its message, never fatal)."""


# ---- the reference -----------------------------------------------------------------------
def visible(q_idx, kv_idx, off, window=None):
    """Whether key kv_idx is visible to query q_idx (tensors, broadcast): bottom-right aligned
    causal (kv <= q + off, off = Skv - Sq) and, with a window W, kv >= q + off - W. One rule for
    the reference, the SDPA mask and the flex mask_mod."""
    m = kv_idx <= q_idx + off
    if window is not None:
        m = m & (kv_idx >= q_idx + off - window)
    return m


def reference(q, k, v, causal, out_dtype=torch.float32, budget_elems=1 << 28, window=None):
    """Attention in fp32 (or fp64) on upcast inputs, written plainly, chunked over batch and
    query rows so the score matrix stays under budget_elems; grouped heads without copying
    K/V per query head. q [B, Sq, Hq, D], k/v [B, Skv, Hkv, D]; returns [B, Sq, Hq, D].
    window: None, or W (causal only): query i sees keys i + Skv - Sq - W .. i + Skv - Sq."""
    if window is not None and not causal:
        raise ValueError(f"window {window} needs causal")
    B, Sq, Hq, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D)
    out = torch.empty((B, Sq, Hq, D), dtype=out_dtype, device=q.device)
    per_b = Hkv * G * Skv
    bc = max(1, min(B, budget_elems // max(1, per_b * Sq)))
    qc = max(1, min(Sq, budget_elems // max(1, per_b * bc)))
    for b0 in range(0, B, bc):
        b1 = min(B, b0 + bc)
        kf = k[b0:b1].to(out_dtype).permute(0, 2, 1, 3)  # [b, Hkv, Skv, D]
        vf = v[b0:b1].to(out_dtype).permute(0, 2, 1, 3)
        for i0 in range(0, Sq, qc):
            i1 = min(Sq, i0 + qc)
            n = i1 - i0
            # [b, n, Hq, D] -> [b, Hkv, G*n, D] (row = g*n + i)
            qf = q[b0:b1, i0:i1].to(out_dtype).reshape(b1 - b0, n, Hkv, G, D)
            qf = qf.permute(0, 2, 3, 1, 4).reshape(b1 - b0, Hkv, G * n, D)
            s = torch.matmul(qf, kf.transpose(-1, -2)) * scale  # [b, Hkv, G*n, Skv]
            if causal:
                qi = torch.arange(i0, i1, device=q.device).repeat(G)  # row -> query index
                kj = torch.arange(Skv, device=q.device)
                mask = ~visible(qi[:, None], kj[None, :], Skv - Sq, window)  # bottom-right aligned
                s.masked_fill_(mask, float("-inf"))
            p = torch.softmax(s, dim=-1)
            p = torch.nan_to_num(p, nan=0.0)  # rows with no visible key give 0
            o = torch.matmul(p, vf)  # [b, Hkv, G*n, D]
            o = o.reshape(b1 - b0, Hkv, G, n, D).permute(0, 3, 1, 2, 4).reshape(b1 - b0, n, Hq, D)
            out[b0:b1, i0:i1] = o
            del s, p, o, qf
    return out


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64; inf when out has NaN/Inf."""
    o = out.to(torch.float64)
    if not torch.isfinite(o).all():
        return float("inf")
    r = ref.to(torch.float64)
    return float(torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r))


# ---- contenders ----------------------------------------------------------------------------
class Contender:
    """name, label, role; setup(case) returns a callable that runs one call and returns the
    output in [B, Sq, Hq, D] (the same callable is what is timed)."""

    def __init__(self, name, label, role):
        self.name, self.label, self.role = name, label, role
        self.info = {}

    def setup(self, case):
        raise NotImplementedError


class Case:
    """Inputs of one shape on the device."""

    def __init__(self, shape, device, seed):
        self.shape = shape
        self.device = device
        dt = TORCH_DTYPE[shape.dtype]
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        s = shape
        self.q = torch.randn((s.b, s.sq, s.hq, s.d), generator=g, device=device, dtype=dt)
        self.k = torch.randn((s.b, s.skv, s.hkv, s.d), generator=g, device=device, dtype=dt)
        self.v = torch.randn((s.b, s.skv, s.hkv, s.d), generator=g, device=device, dtype=dt)


class KforgeContender(Contender):
    def __init__(self, name, label, ctx_factory, role="kforge"):
        super().__init__(name, label, role)
        self._factory = ctx_factory

    def setup(self, case):
        import kforge
        ctx = self._factory()  # raises Unsupported when the context could not be opened
        s = case.shape
        out = torch.empty_like(case.q)
        try:
            call = ctx.bind(case.q, case.k, case.v, causal=s.causal, out=out,
                            kind="decode" if s.kind == "decode" else "prefill", window_left=s.window)
        except kforge.Error as e:
            raise Unsupported(str(e)) from None
        self.info = {"variant": call.plan.variant, "source": call.plan.source,
                     "workspace_bytes": call.plan.workspace_bytes}

        def fn():
            call.run()
            return out

        fn.poison = lambda: out.fill_(float("nan"))
        return fn


MASK_BUDGET_BYTES = 2 << 30  # the largest explicit SDPA mask a window row builds (32K x 32K bf16: 2 GiB)


def window_mask(shape, dtype, device, budget=MASK_BUDGET_BYTES):
    """The additive mask [1, 1, Sq, Skv] of a window row (0 where visible, -inf elsewhere), in the
    inputs' dtype so SDPA converts nothing during the timed call. Raises Skipped, with the
    size, when it would exceed budget bytes."""
    s = shape
    elem = torch.empty((), dtype=dtype).element_size()
    nbytes = s.sq * s.skv * elem
    if nbytes > budget:
        raise Skipped(f"the explicit [Sq, Skv] = [{s.sq}, {s.skv}] {str(dtype).replace('torch.', '')} window mask "
                      f"would take {nbytes / 2**30:.2f} GiB > the {budget / 2**30:.2f} GiB mask budget")
    qi = torch.arange(s.sq, device=device)[:, None]
    kj = torch.arange(s.skv, device=device)[None, :]
    m = torch.zeros((1, 1, s.sq, s.skv), dtype=dtype, device=device)
    m.masked_fill_(~visible(qi, kj, s.skv - s.sq, s.window), float("-inf"))
    return m


class SdpaContender(Contender):
    """F.scaled_dot_product_attention under one backend. Causal rows take is_causal (Sq = Skv) or
    causal_lower_right; window rows an explicit additive mask (window_mask, built once per shape,
    outside the timed call, shared by the rotation's copies), and a backend that takes no mask
    (flash) is skipped on them rather than run dense."""
    NO_MASK = ("FLASH_ATTENTION",)  # backends that refuse attn_mask

    def __init__(self, name, label, backend, mask_budget=MASK_BUDGET_BYTES):
        super().__init__(name, label, "peer")
        self.backend = backend
        self.mask_budget = mask_budget
        self._mask = (None, None)  # (key, tensor): the last window row's mask

    def _window_mask(self, case):
        s = case.shape
        key = (s.sq, s.skv, s.window, case.q.dtype, str(case.device))
        if self._mask[0] != key:
            self._mask = (None, None)  # free the last row's before building this one's
            self._mask = (key, window_mask(s, case.q.dtype, case.device, self.mask_budget))
        return self._mask[1]

    def setup(self, case):
        from torch.nn.attention import sdpa_kernel
        s = case.shape
        qt, kt, vt = (x.transpose(1, 2) for x in (case.q, case.k, case.v))  # views [B, H, S, D]
        kw = {"enable_gqa": True}
        if s.window is not None:
            if self.backend.name in self.NO_MASK:
                raise Skipped(f"SDPA's {self.backend.name.lower()} backend takes no attn_mask and has no sliding "
                              f"window: window {s.window} would run dense")
            kw["attn_mask"] = self._window_mask(case)
        else:
            self._mask = (None, None)  # a dense row: the last window row's mask is not needed
            if s.causal and s.sq == s.skv:
                kw["is_causal"] = True
            elif s.causal:
                from torch.nn.attention.bias import causal_lower_right
                kw["attn_mask"] = causal_lower_right(s.sq, s.skv)
        backend = self.backend

        def fn():
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(qt, kt, vt, **kw)
            return o.transpose(1, 2)

        if s.window is not None:
            _try_reasons(fn)
        return fn


def _try_reasons(fn):
    """One call of an SDPA callable; when the backend refuses it (the mask, GQA with a mask, ...),
    Unsupported with torch's reasons (its warnings), not only 'No available kernel'."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except RuntimeError as e:
            why = "; ".join(" ".join(str(w.message).split()) for w in caught)
            raise Unsupported(f"{type(e).__name__}: {e}" + (f" ({why})" if why else "")) from None


_flex_cache = {}


def flex_mask_mod(shape):
    """flex_attention's mask_mod of a causal row: bottom-right aligned, and the sliding window
    when the row has one (key blocks wholly outside are skipped by the block mask)."""
    off, window = shape.skv - shape.sq, shape.window

    def causal_br(b, h, q_idx, kv_idx):
        return visible(q_idx, kv_idx, off, window)

    return causal_br


class FlexContender(Contender):
    def __init__(self, name="flex", label="flex_attention (compiled)"):
        super().__init__(name, label, "peer")

    def setup(self, case):
        from torch.nn.attention.flex_attention import flex_attention, create_block_mask
        import torch._dynamo as dynamo
        # a fresh compile per shape: no recompile limit, no guard from an earlier shape
        dynamo.reset()
        for attr, val in (("cache_size_limit", 64), ("recompile_limit", 64),
                          ("accumulated_cache_size_limit", 1024), ("accumulated_recompile_limit", 1024)):
            if hasattr(dynamo.config, attr):
                setattr(dynamo.config, attr, val)
        s = case.shape
        qt, kt, vt = (x.transpose(1, 2) for x in (case.q, case.k, case.v))
        bm = None
        if s.causal:
            bm = create_block_mask(flex_mask_mod(s), B=None, H=None, Q_LEN=s.sq, KV_LEN=s.skv,
                                   device=case.device)
        compiled = torch.compile(flex_attention, dynamic=False)

        def fn():
            o = compiled(qt, kt, vt, block_mask=bm, enable_gqa=True)
            return o.transpose(1, 2)

        return fn


# ---- KDA (design.md, KDA): inputs, the oracle, the contenders ---------------------------------
KDA_TOL_O, KDA_TOL_STATE = 1e-2, 5e-3
KDA_NAIVE_MAX_STEPS = 256    # the token-by-token peer runs only up to this many serial steps
KDA_REF_FP64_LIMIT = 1 << 34  # oracle in fp64 while state elements x serial steps stay under this
GQA_CONTENDER_NAMES = ("kforge-tuned", "kforge-default", "kforge-default#2", "sdpa-cudnn", "sdpa-flash", "flex",
                       "sdpa-math")
KDA_CONTENDER_NAMES = ("kforge-tuned", "kforge-default", "kforge-default#2", "torch-chunked",
                       "torch-chunked-graph", "torch-naive", "fla-chunk", "fla-recurrent")
KDA_GRAPH_TOKENS = 4096      # KDA calls of at most this many tokens x value heads / 16 are timed as CUDA graphs
KDA_GRAPH_CALLS = 8          # of this many calls each: a replay's host cost spread as in an engine's graph


class Skipped(Exception):
    """A contender is not run on this shape on purpose (recorded as skipped with the reason)."""


class KdaCase:
    """Inputs of one KDA shape on the device: bf16 q, k, v; fp32 g (raw for the sigmoid gate, log
    space otherwise), beta (raw with beta_sigmoid), A_log, dt_bias, initial state; cu_seqlens int32
    on the device and as a host list (packed shapes)."""

    def __init__(self, shape, device, seed):
        s = shape
        self.shape = shape
        self.device = device
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        lead = (s.tokens,) if s.packed else (s.n, s.t)
        bf = torch.bfloat16

        def randn(*shape_):
            return torch.randn(shape_, generator=gen, device=device, dtype=torch.float32)

        qk_scale = 1.0 if s.l2norm else s.dk ** -0.5  # without the in-kernel norm keep |k| ~ 1 (stable)
        self.q = (randn(*lead, s.h, s.dk) * qk_scale).to(bf)
        self.k = (randn(*lead, s.h, s.dk) * qk_scale).to(bf)
        self.v = randn(*lead, s.hv, s.dv).to(bf)
        g_raw = randn(*lead, s.hv, s.dk)
        a_log = torch.log(1.0 + 15.0 * torch.rand((s.hv,), generator=gen, device=device))  # A in [1, 16)
        dt_bias = 0.5 * randn(s.hv, s.dk)
        if s.gate == "sigmoid":
            self.g, self.A_log, self.dt_bias = g_raw, a_log, dt_bias
        else:  # log space, values of the production gate
            self.g = s.lower_bound * torch.sigmoid(torch.exp(a_log)[:, None] * (g_raw + dt_bias))
            self.A_log = self.dt_bias = None
        b_raw = randn(*lead, s.hv)
        self.beta = b_raw if s.beta_sigmoid else torch.sigmoid(b_raw)
        self.h0 = 0.5 * randn(s.n, s.hv, s.dk, s.dv) if s.initial_state else None
        self.cu_host = self.cu = None
        if s.packed:
            cu = [0]
            for x in s.lens:
                cu.append(cu[-1] + x)
            self.cu_host = cu
            self.cu = torch.tensor(cu, dtype=torch.int32, device=device)

    def torch_kwargs(self):
        s = self.shape
        return {"initial_state": self.h0, "cu_seqlens": self.cu_host, "gate": s.gate, "A_log": self.A_log,
                "dt_bias": self.dt_bias, "lower_bound": s.lower_bound, "l2norm": s.l2norm,
                "beta_sigmoid": s.beta_sigmoid}


def kda_reference(case):
    """The oracle: the token-by-token recurrence (bench/kda_torch.py) in fp64, or in fp32 when
    state elements x serial steps exceed KDA_REF_FP64_LIMIT. Returns (o, final state, dtype)."""
    from . import kda_torch
    s = case.shape
    work = s.n * s.hv * s.dk * s.dv * max(1, s.max_len)
    dt = torch.float64 if work <= KDA_REF_FP64_LIMIT else torch.float32
    o, st = kda_torch.naive(case.q, case.k, case.v, case.g, case.beta, dtype=dt, **case.torch_kwargs())
    return o, st, dt


class KdaKforgeContender(Contender):
    """kforge.kda through the binding, bound once (Context.bind_kda): plan made, tensors struct
    built; the timed call is one kf_kda_run. Final state written to its own buffer."""

    def __init__(self, name, label, ctx_factory, role="kforge"):
        super().__init__(name, label, role)
        self._factory = ctx_factory

    def setup(self, case):
        import kforge
        ctx = self._factory()  # raises Unsupported when the context could not be opened
        s = case.shape
        out = torch.empty_like(case.v)
        fin = torch.empty((s.n, s.hv, s.dk, s.dv), dtype=torch.float32, device=case.device)
        kw = {}
        if s.gate == "sigmoid":
            kw = {"A_log": case.A_log, "dt_bias": case.dt_bias}
        try:
            call = ctx.bind_kda(case.q, case.k, case.v, case.g, case.beta, initial_state=case.h0,
                                final_state=fin, cu_seqlens=case.cu, gate=s.gate, lower_bound=s.lower_bound,
                                l2norm=s.l2norm, beta_sigmoid=s.beta_sigmoid, out=out, mode=s.mode, **kw)
        except kforge.Error as e:
            raise Unsupported(str(e)) from None
        self.info = {"variant": call.plan.variant, "source": call.plan.source,
                     "workspace_bytes": call.plan.workspace_bytes}

        def fn():
            call.run()
            return out, fin

        def poison():
            out.fill_(float("nan"))
            fin.fill_(float("nan"))

        fn.poison = poison
        return fn


class KdaTorchContender(Contender):
    """bench/kda_torch.py: 'chunked' (chunk 64, fp32, eager), 'graph' (the same captured once in a
    CUDA graph outside the timing and replayed: no host launch cost), 'naive' (the token-by-token
    recurrence, fp32 state; skipped above KDA_NAIVE_MAX_STEPS serial steps)."""

    def __init__(self, name, label, impl, chunk=64):
        super().__init__(name, label, "peer")
        self.impl, self.chunk = impl, chunk

    def setup(self, case):
        from . import kda_torch
        s = case.shape
        args = (case.q, case.k, case.v, case.g, case.beta)
        kw = dict(case.torch_kwargs(), dtype=torch.float32, out_dtype=torch.bfloat16)
        if self.impl == "naive":
            if s.max_len > KDA_NAIVE_MAX_STEPS:
                raise Skipped(f"{s.max_len} serial token steps > {KDA_NAIVE_MAX_STEPS} (about 6 launches per "
                              f"token: seconds per call; the oracle runs it once, in "
                              f"{'fp64' if s.n * s.hv * s.dk * s.dv * s.max_len <= KDA_REF_FP64_LIMIT else 'fp32'})")
            self.info = {"variant": "token by token, fp32 state, eager"}
            return kda_torch.Naive(*args, **kw)
        bound = kda_torch.Chunked(*args, chunk=self.chunk, **kw)
        self.info = {"variant": f"chunk {bound.chunk}, fp32, " + ("CUDA graph" if self.impl == "graph" else "eager")}
        if self.impl == "chunked":
            return bound
        if _DRY or not torch.cuda.is_available():
            raise Unsupported("CUDA graphs need a CUDA device")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside the capture (cuBLAS handles, workspaces)
                bound()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            res = bound()

        def fn():
            graph.replay()
            return res

        fn.graph = graph  # keep it alive with the callable
        fn.bound = bound  # and the tensors its kernels read (index tables, inputs): freed, replays read garbage
        return fn


class KdaFlaContender(Contender):
    """fla (flash-linear-attention 0.6.0, Triton): fla.ops.kda.chunk_kda ('chunk') or
    fused_recurrent_kda ('recurrent', the token recurrence fla serves decode with; skipped above
    KDA_NAIVE_MAX_STEPS serial steps). The production gate runs in fla's kernel as in kforge's
    (use_gate_in_kernel with lower_bound and safe_gate: lower_bound * sigmoid(exp(A_log) (g +
    dt_bias))), as do the q/k L2 norm and beta's sigmoid; the final state goes to a new buffer.
    Packed shapes are [1, T, ...] with int64 cu_seqlens (and its host copy for chunk_kda, which
    then needs no device-to-host read: capturable)."""

    def __init__(self, name, label, impl):
        super().__init__(name, label, "peer")
        self.impl = impl

    def setup(self, case):
        s = case.shape
        if self.impl == "recurrent" and s.max_len > KDA_NAIVE_MAX_STEPS:
            raise Skipped(f"{s.max_len} serial token steps > {KDA_NAIVE_MAX_STEPS}: fla serves prefill with chunk_kda")
        # fla memoises index tensors of cu_seqlens by argument identity in a queue of FLA_TENSOR_CACHE_SIZE (4)
        # entries: a CUDA graph of one input set reads tensors freed once four more sets have run (an illegal
        # address on the H200 with 64 rotation sets, session 9). Read when fla is first imported.
        os.environ.setdefault("FLA_TENSOR_CACHE_SIZE", "100000")
        try:
            import fla
            from fla.ops.kda import chunk_kda, fused_recurrent_kda
        except Exception as e:  # not installed (bench/NOTES.md: the wheels), or its Triton refuses the device
            raise Unsupported(f"fla not importable: {type(e).__name__}: {e}") from None
        q, k, v, g, beta = case.q, case.k, case.v, case.g, case.beta
        kw = {"initial_state": case.h0, "output_final_state": True, "use_qk_l2norm_in_kernel": bool(s.l2norm),
              "use_beta_sigmoid_in_kernel": bool(s.beta_sigmoid)}
        if s.packed:
            q, k, v, g, beta = (x.unsqueeze(0) for x in (q, k, v, g, beta))
            kw["cu_seqlens"] = torch.tensor(case.cu_host, dtype=torch.long, device=case.device)
            if self.impl == "chunk":
                kw["cu_seqlens_cpu"] = torch.tensor(case.cu_host, dtype=torch.long)
        if s.gate == "sigmoid":
            kw.update(use_gate_in_kernel=True, lower_bound=float(s.lower_bound), A_log=case.A_log,
                      dt_bias=case.dt_bias.reshape(-1).contiguous())
            if self.impl == "chunk":
                kw["safe_gate"] = True
        f = chunk_kda if self.impl == "chunk" else fused_recurrent_kda
        self.info = {"variant": f"fla {getattr(fla, '__version__', '?')} {f.__name__}"
                                + (", gate in kernel (safe_gate)" if s.gate == "sigmoid" else ", log-space g")}
        shape_o = case.v.shape

        def fn():
            with torch.inference_mode():
                o, fin = f(q, k, v, g, beta, **kw)
            return o.view(shape_o), fin

        return fn


def _graphed(fns, calls=1):
    """fns[0], fns[1], ... (cycled) captured once, calls of them in order, into one CUDA graph (after two
    calls of each on a side stream: Triton autotuning, cuBLAS handles, allocator pools) and replayed; a
    replay counts as `calls` calls (g.calls, which the timers divide by). The outputs of the last
    captured call are returned (every replay rewrites them). Raises when a call cannot be captured."""
    fns = fns if isinstance(fns, (list, tuple)) else [fns]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for f in fns[:calls]:
            for _ in range(2):
                f()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            res = fns[i % len(fns)]()

    def g():
        graph.replay()
        return res

    g.graph, g.inner, g.calls = graph, fns, calls
    if hasattr(fns[0], "poison"):
        g.poison = fns[0].poison
    return g


def _kda_graph_all(ok, shape):
    """Small KDA calls (tokens x value heads <= 16 KDA_GRAPH_TOKENS): every contender's callables replaced by
    CUDA graphs of KDA_GRAPH_CALLS calls each (issue 17's "graph of 8"), rotating over its input sets in
    order (graph j holds sets j*8 .. j*8+7), so that launch cost, and the host's cost of one replay, count
    for none of them; a contender that is one graph already (the torch graph peer) is captured again from
    its eager callable, 8 calls a graph as the others. A contender whose capture fails keeps its eager
    callable, noted in its row. Returns the new ok list."""
    if _DRY or not torch.cuda.is_available() or shape.tokens * shape.hv > 16 * KDA_GRAPH_TOKENS:
        return ok
    out = []
    for c, fn, rec in ok:
        try:
            sets = [getattr(f, "bound", f) for f in getattr(fn, "rotation", None) or [fn]]
            n = KDA_GRAPH_CALLS
            rot = [_graphed([sets[(j * n + i) % len(sets)] for i in range(n)], n)
                   for j in range((len(sets) + n - 1) // n)]
            g = rot[0]
            if len(rot) > 1:
                g.rotation = rot
            g.sets = len(sets)
            rec["graph"] = f"{n} calls a graph"
            out.append((c, g, rec))
        except Exception as e:
            rec["graph"] = f"capture failed, timed eagerly: {type(e).__name__}: {e}"[:200]
            try:
                sync()
            except Exception:
                pass
            out.append((c, fn, rec))
    return out


def make_kda_contenders(kctx, names=None):
    all_ = [
        KdaKforgeContender("kforge-tuned", "kforge tuned", lambda: kctx.get("tuned")),
        KdaKforgeContender("kforge-default", "kforge default", lambda: kctx.get("default")),
        KdaKforgeContender("kforge-default#2", "kforge default (control)", lambda: kctx.get("default"),
                           role="control"),
        KdaTorchContender("torch-chunked", "torch chunked (C64, fp32)", "chunked"),
        KdaTorchContender("torch-chunked-graph", "torch chunked (C64, fp32, CUDA graph)", "graph"),
        KdaTorchContender("torch-naive", "torch token recurrence (fp32 state)", "naive"),
        KdaFlaContender("fla-chunk", "fla chunk_kda", "chunk"),
        KdaFlaContender("fla-recurrent", "fla fused_recurrent_kda", "recurrent"),
    ]
    if names:
        keep = set(names)
        unknown = keep - set(KDA_CONTENDER_NAMES) - set(GQA_CONTENDER_NAMES)
        if unknown:
            raise SystemExit(f"unknown contenders: {sorted(unknown)}; known: GQA {list(GQA_CONTENDER_NAMES)}, "
                             f"KDA {list(KDA_CONTENDER_NAMES)}")
        all_ = [c for c in all_ if c.name in keep]
    return all_


def kda_errors(out, ref_o, ref_s):
    """(o relative error, final state relative error) of a contender's (o, state)."""
    o, st = out
    return rel_err(o, ref_o), rel_err(st, ref_s)


# ---- timing ----------------------------------------------------------------------------------
class Timer:
    def __init__(self, device, flush_bytes, cushion_cycles):
        self.device = device
        self.flush = torch.empty(int(flush_bytes), dtype=torch.uint8, device=device)
        self.flush_bytes = int(flush_bytes)
        self.cushion = int(cushion_cycles)
        self._sleep = None if _DRY else getattr(torch.cuda, "_sleep", None)
        self._n = 0

    def before(self):
        """L2 flush (a write of >= 2x L2), then a short GPU spin so the host's launch cost
        of the next call stays out of the measured interval."""
        self._n += 1
        self.flush.fill_(self._n & 0xFF)
        if self.cushion and self._sleep is not None:
            self._sleep(self.cushion)

    def time(self, fn, n):
        """n samples of fn (ms; a graph of fn.calls calls gives its time over them); events are read after
        one synchronisation."""
        evs = [(event(), event()) for _ in range(n)]
        for a, b in evs:
            self.before()
            a.record()
            fn()
            b.record()
        w = getattr(fn, "calls", 1)
        return evs if w == 1 else ("per", evs, w)


class SustainedTimer:
    """Sustained timing, as kforge tune's (tuner/attn_run.c): after an idle gap (> idle_s) the
    contender runs back to back for >= warm_ms (and until NVML's SM clock settles, at most
    4 x warm_ms); each sample is a burst of about burst_ms of back-to-back calls rotating over
    the contender's input sets (fn.rotation: copies whose inputs together exceed 2x L2), with
    one event between two bursts; a sample is the burst's time / calls. No flush, no spin: the
    GPU never cools between samples, as under a serving load."""
    sustained = True

    def __init__(self, device, burst_ms=1.0, warm_ms=200.0, idle_s=0.1, nvml=None):
        self.device, self.burst_ms, self.warm_ms, self.idle_s = device, burst_ms, warm_ms, idle_s
        self.nvml = nvml
        self.last_busy = 0.0
        self.warmups = 0

    def _settled(self, hist):
        sm = [h[0] for h in hist[-3:] if h and h[0] is not None]
        return len(sm) < 3 or (max(sm) - min(sm)) / min(sm) <= 0.01

    def time(self, fn, n):
        fns = getattr(fn, "rotation", None) or [fn]
        k = 0
        a, b = event(), event()
        for f in fns:  # every set once (first-touch costs out of the samples)
            f()
        a.record()
        for _ in range(2):
            fns[k % len(fns)]()
            k += 1
        b.record()
        sync()
        one = max(a.elapsed_time(b) / 2, 1e-4)
        if time.time() - self.last_busy > self.idle_s:
            t0, hist = time.time(), []
            self.warmups += 1
            while True:
                m = statsmod.burst_calls(one, 25.0)
                a.record()
                for _ in range(m):
                    fns[k % len(fns)]()
                    k += 1
                b.record()
                sync()
                one = max(a.elapsed_time(b) / m, 1e-4)
                hist.append(self.nvml.read() if self.nvml else None)
                el = (time.time() - t0) * 1e3
                if el >= 4 * self.warm_ms or (el >= self.warm_ms and self._settled(hist)):
                    break
        calls = statsmod.burst_calls(one, self.burst_ms)
        evs = [event() for _ in range(n + 1)]
        evs[0].record()
        for i in range(n):
            for _ in range(calls):
                fns[k % len(fns)]()
                k += 1
            evs[i + 1].record()
        w = getattr(fns[0], "calls", 1)                 # a replay of a graph of w calls
        return ("sustained", evs, calls * w, getattr(fns[0], "sets", len(fns)))


def _elapsed(evs):
    sync()
    if isinstance(evs, tuple) and evs and evs[0] == "sustained":
        _, e, calls, _sets = evs
        return statsmod.per_call([e[i].elapsed_time(e[i + 1]) for i in range(len(e) - 1)], calls)
    if isinstance(evs, tuple) and evs and evs[0] == "per":
        return statsmod.per_call([a.elapsed_time(b) for a, b in evs[1]], evs[2])
    return [a.elapsed_time(b) for a, b in evs]


def _case_bytes(case):
    n = 0
    for name in ("q", "k", "v", "g", "beta", "h0"):
        t = getattr(case, name, None)
        if t is not None:
            n += t.numel() * t.element_size()
    return n


def _rotation(ok, make_case, cfg):
    """Sustained timing: each contender that passed the check set up on extra copies of the
    inputs (fn.rotation), so that the sets together exceed 2x L2. A contender that refuses a copy
    rotates over the sets it took."""
    first = make_case(0)
    sets = statsmod.rotate_sets(_case_bytes(first), cfg["l2_bytes"])
    del first
    if sets <= 1:
        return 1
    extra = [make_case(i + 1) for i in range(sets - 1)]
    for c, fn, rec in ok:
        fns = [fn]
        for case in extra:
            try:
                fns.append(c.setup(case))
            except Exception:
                break
        fn.rotation = fns
        rec["sets"] = len(fns)
    return sets


def measure_ceilings(device, samples=20, copy_bytes=1 << 30, gemm_n=8192):
    """Device-to-device copy of 1 GiB (bytes read + written) and an 8192^3 bf16 matmul on
    random data, medians of `samples` event-timed runs after a warm-up."""
    out = {}
    try:
        n = copy_bytes
        src = torch.randint(0, 256, (n,), dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        sync()
        evs = []
        for _ in range(samples):
            a, b = event(), event()
            a.record()
            dst.copy_(src)
            b.record()
            evs.append((a, b))
        ms = _elapsed(evs)
        sync()
        if not torch.equal(dst[:1 << 20], src[:1 << 20]):
            raise RuntimeError("copy check failed")
        out["copy"] = {"bytes": 2 * n, "samples_ms": ms}
        del src, dst
    except Exception as e:  # never fatal
        out["copy"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        n = gemm_n
        g = torch.Generator(device=device)
        g.manual_seed(1)
        a_ = torch.randn((n, n), generator=g, device=device, dtype=torch.bfloat16)
        b_ = torch.randn((n, n), generator=g, device=device, dtype=torch.bfloat16)
        c_ = torch.empty((n, n), device=device, dtype=torch.bfloat16)
        for _ in range(3):
            torch.mm(a_, b_, out=c_)
        sync()
        evs = []
        for _ in range(samples):
            a, b = event(), event()
            a.record()
            torch.mm(a_, b_, out=c_)
            b.record()
            evs.append((a, b))
        ms = _elapsed(evs)
        out["gemm"] = {"n": n, "flops": 2.0 * n ** 3, "samples_ms": ms}
        del a_, b_, c_
    except Exception as e:
        out["gemm"] = {"error": f"{type(e).__name__}: {e}"}
    empty_cache()
    return out


# ---- kforge contexts -------------------------------------------------------------------------
class KforgeContexts:
    """Opens the two contexts once per run: tuned (with the database) and default (without)."""

    def __init__(self, device, db):
        self.device = device
        self.db = db
        self._ctx = {}
        self._err = {}

    def get(self, which):
        if which in self._ctx:
            return self._ctx[which]
        if which in self._err:
            raise Unsupported(self._err[which])
        try:
            import kforge
        except Exception as e:
            self._err[which] = f"kforge binding not importable: {e}"
            raise Unsupported(self._err[which])
        try:
            if which == "tuned":
                if not self.db or not os.path.exists(self.db):
                    raise Unsupported(f"no tuning database at {self.db!r} (set --db or KFORGE_DB)")
                ctx = kforge.Context(device=self.device, db=self.db)
            else:
                ctx = kforge.Context(device=self.device, db=None)
        except Unsupported as e:
            self._err[which] = str(e)
            raise
        except Exception as e:
            self._err[which] = f"{type(e).__name__}: {e}"
            raise Unsupported(self._err[which])
        self._ctx[which] = ctx
        return ctx


def _refused(rec, e, cfg):
    """Records why a contender did not run: skipped (by rule), or unsupported (it refused or
    raised; the device is synchronised so a fault shows up in this row, not the next)."""
    if isinstance(e, (Skipped, Unsupported)):
        rec["status"] = "skipped" if isinstance(e, Skipped) else "unsupported"
        rec["message"] = str(e)
        return
    rec["status"] = "unsupported"
    rec["message"] = f"{type(e).__name__}: {e}".strip()
    if cfg.get("verbose"):
        traceback.print_exc()
    try:
        sync()
    except Exception as e2:
        rec["message"] += f" (and the device reported: {e2})"


def make_contenders(kctx, names=None):
    from torch.nn.attention import SDPBackend
    all_ = [
        KforgeContender("kforge-tuned", "kforge tuned", lambda: kctx.get("tuned")),
        KforgeContender("kforge-default", "kforge default", lambda: kctx.get("default")),
        KforgeContender("kforge-default#2", "kforge default (control)", lambda: kctx.get("default"),
                        role="control"),
        SdpaContender("sdpa-cudnn", "SDPA cuDNN", SDPBackend.CUDNN_ATTENTION),
        SdpaContender("sdpa-flash", "SDPA flash", SDPBackend.FLASH_ATTENTION),
        FlexContender(),
    ]
    if _DRY:  # the CPU dry run: one contender that runs there
        all_.append(SdpaContender("sdpa-math", "SDPA math (dry run)", SDPBackend.MATH))
    if names:
        keep = set(names)
        unknown = keep - {c.name for c in all_} - set(KDA_CONTENDER_NAMES)
        if unknown:
            raise SystemExit(f"unknown contenders: {sorted(unknown)}; known: {[c.name for c in all_]}")
        all_ = [c for c in all_ if c.name in keep]
    return all_


# ---- one shape ---------------------------------------------------------------------------------
def run_shape(shape, contenders, timer, cfg, device):
    entry = {"shape": shape.to_dict(),
             "control": {"of": "kforge-default", "duplicate": "kforge-default#2"},
             "contenders": []}
    t0 = time.time()
    case = Case(shape, device, cfg["seed"] + zlib.crc32(shape.id.encode()) % 100000)
    small = shape.b * shape.hq * shape.sq * shape.skv * shape.d < (1 << 27)
    rdt = torch.float64 if small else torch.float32
    ref = reference(case.q, case.k, case.v, shape.causal, out_dtype=rdt, window=shape.window)
    tol = TOL[shape.dtype]
    entry["reference"] = {"dtype": str(rdt).replace("torch.", ""), "tol": tol,
                          "seconds": round(time.time() - t0, 2)}

    def verdict(o):
        err = rel_err(o, ref)
        bad = [] if err <= tol else [f"rel err {err:.3e} > {tol:g}" if math.isfinite(err)
                                     else "output has NaN/Inf (unwritten or overflow)"]
        return {"rel_err": err if math.isfinite(err) else None}, bad

    ok = _check_contenders(contenders, case, entry, {"rel_err": None}, verdict, cfg)
    del ref
    if getattr(timer, "sustained", False):
        seed = cfg["seed"] + zlib.crc32(shape.id.encode()) % 100000
        entry["sets"] = _rotation(ok, lambda i: case if i == 0 else Case(shape, device, seed + 7 * i), cfg)
    _timed_rounds(shape, ok, timer, cfg)
    entry["seconds"] = round(time.time() - t0, 2)
    del case
    empty_cache()
    return entry


_ERR_LABEL = {"rel_err": "err", "state_err": "state"}


def _check_contenders(contenders, case, entry, fields, verdict, cfg):
    """Sets up every contender, runs it once on poisoned outputs and checks it with verdict(out)
    -> (error fields, list of failures); the passing ones are warmed up. Records each in
    entry["contenders"]; returns [(contender, fn, record)] of those that ran (for the timing)."""
    ok = []
    for c in contenders:
        rec = {"name": c.name, "label": c.label, "role": c.role, "status": None, "message": None,
               **fields, "rounds": []}
        entry["contenders"].append(rec)
        ts = time.time()
        try:
            c.info = {}
            fn = c.setup(case)
            rec.update(c.info)
            if hasattr(fn, "poison"):
                fn.poison()
            out = fn()
            sync()
            errs, bad = verdict(out)
            rec.update(errs)
            if bad:
                rec["status"], rec["message"] = "wrong", "; ".join(bad)
            else:
                for _ in range(cfg["warmup"]):
                    fn()
                sync()
                rec["status"] = "ok"
                ok.append((c, fn, rec))
            del out
        except Exception as e:  # the library or a peer refusing the shape, a capture failure, ...
            _refused(rec, e, cfg)
        rec["setup_s"] = round(time.time() - ts, 2)
        log(f"  {c.name:20s} {rec['status']:11s} "
            + "".join(f"{_ERR_LABEL.get(k, k)} {rec[k]:.2e} " for k in fields if rec[k] is not None)
            + (rec["message"][:160] if rec["message"] else ""))
    return ok


def _probe(ok):
    """Before the timed rounds: each contender's callables (every input set) run once and synchronised, one
    contender after the other, so that an illegal address is named by the contender that made it (the error is
    sticky: every contender timed after it would report it as its own)."""
    for c, fn, rec in ok:
        if rec["status"] != "ok":
            continue
        try:
            for f in getattr(fn, "rotation", None) or [fn]:
                f()
            sync()
        except Exception as e:
            rec["status"], rec["message"] = "error", f"before timing (each input set once): {type(e).__name__}: {e}"
            return


def _timed_rounds(shape, ok, timer, cfg):
    """The timed rounds of the contenders that passed the check: interleaved, in a freshly
    shuffled order each round. Sustained: each contender's samples read (one synchronisation)
    before the next contender's, with the SM clock, power and temperature during them."""
    _probe(ok)
    rng = random.Random(cfg["seed"] * 7919 + len(shape.id))
    sampler = getattr(timer, "sampler", None)
    for r in range(cfg["rounds"]):
        order = [x for x in ok if x[2]["status"] == "ok"]
        rng.shuffle(order)
        pending = []
        for c, fn, rec in order:
            try:
                if getattr(timer, "sustained", False):
                    if sampler:
                        sampler.start()
                    evs = timer.time(fn, cfg["samples_per_round"])
                    ms = _elapsed(evs)
                    timer.last_busy = time.time()
                    rec["rounds"].append(ms)
                    rec["calls"], rec["sets"] = evs[2], evs[3]
                    rec.setdefault("clocks", []).append(sampler.stop() if sampler else None)
                else:
                    pending.append((rec, timer.time(fn, cfg["samples_per_round"])))
            except Exception as e:
                rec["status"], rec["message"] = "error", f"during timing: {type(e).__name__}: {e}"
        for rec, evs in pending:
            try:
                ms = _elapsed(evs)
                rec["rounds"].append(ms)
            except Exception as e:
                rec["status"], rec["message"] = "error", f"reading events: {type(e).__name__}: {e}"
    for c, fn, rec in ok:
        if rec["status"] == "ok":
            samples = [x for rr in rec["rounds"] for x in rr]
            samples.sort()
            if samples:
                ck = [k for k in rec.get("clocks") or [] if k and k.get("sm_mhz_mean")]
                clk = (f", SM {sum(k['sm_mhz_mean'] for k in ck) / len(ck):.0f} MHz"
                       f" {sum(k['power_w_mean'] or 0 for k in ck) / len(ck):.0f} W" if ck else "")
                log(f"  {c.name:18s} median {samples[len(samples) // 2]:.4f} ms over {len(samples)} samples"
                    + (f" ({rec.get('calls')} calls a sample, {rec.get('sets')} sets{clk})" if "calls" in rec else ""))


def run_kda_shape(shape, contenders, timer, cfg, device):
    """One KDA shape: the oracle once, every contender checked against it (o and final state),
    then the timed rounds; a contender that raises is unsupported, one not run on purpose
    skipped."""
    entry = {"shape": shape.to_dict(),
             "control": {"of": "kforge-default", "duplicate": "kforge-default#2"},
             "contenders": []}
    t0 = time.time()
    case = KdaCase(shape, device, cfg["seed"] + zlib.crc32(shape.id.encode()) % 100000)
    ref_o, ref_s, rdt = kda_reference(case)
    sync()
    entry["reference"] = {"dtype": str(rdt).replace("torch.", ""), "tol": KDA_TOL_O, "tol_state": KDA_TOL_STATE,
                          "oracle": "token-by-token recurrence (bench/kda_torch.py naive)",
                          "seconds": round(time.time() - t0, 2)}
    def verdict(out):
        eo, es = kda_errors(out, ref_o, ref_s)
        bad = []
        if not (eo <= KDA_TOL_O):
            bad.append(f"o rel err {eo:.3e} > {KDA_TOL_O:g}" if math.isfinite(eo)
                       else "o has NaN/Inf (unwritten or overflow)")
        if not (es <= KDA_TOL_STATE):
            bad.append(f"final state rel err {es:.3e} > {KDA_TOL_STATE:g}" if math.isfinite(es)
                       else "final state has NaN/Inf (unwritten or overflow)")
        return {"rel_err": eo if math.isfinite(eo) else None, "state_err": es if math.isfinite(es) else None}, bad

    ok = _check_contenders(contenders, case, entry, {"rel_err": None, "state_err": None}, verdict, cfg)
    del ref_o, ref_s
    if getattr(timer, "sustained", False):
        seed = cfg["seed"] + zlib.crc32(shape.id.encode()) % 100000
        entry["sets"] = _rotation(ok, lambda i: case if i == 0 else KdaCase(shape, device, seed + 7 * i), cfg)
    ok = _kda_graph_all(ok, shape)
    _timed_rounds(shape, ok, timer, cfg)
    entry["seconds"] = round(time.time() - t0, 2)
    del case, ok
    empty_cache()
    return entry


# ---- the run -----------------------------------------------------------------------------------
def device_ok(device):
    """False when the device no longer works (a sticky error such as an illegal address
    left by a contender): every later number would be garbage, so the run stops."""
    try:
        x = torch.ones(4, device=device)
        sync()
        return float((x + 1).sum().item()) == 8.0
    except Exception:
        return False


def default_db():
    env = os.environ.get("KFORGE_DB")
    if env:
        return env
    return os.path.join(REPO, "kforge.db")


def write_json(path, res):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, path)


def run(shapes, args, command):
    global _DRY
    _DRY = bool(getattr(args, "dry_run_cpu", False))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if _DRY:
        device = torch.device("cpu")
        l2, name = 1 << 20, "cpu (dry run)"
        flush = 2 << 20
    else:
        if not torch.cuda.is_available():
            raise SystemExit("error: no CUDA device visible to torch; the benchmark needs a GPU")
        device = torch.device("cuda", args.device)
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        l2, name = int(getattr(props, "L2_cache_size", 0) or 0) or (60 << 20), props.name
        flush = max(2 * l2, 128 << 20) if args.flush_mib is None else args.flush_mib << 20
    if flush < 2 * l2:
        log(f"warning: --flush-mib {args.flush_mib} is under 2x L2 ({2 * l2 >> 20} MiB)")
    cfg = {"rounds": args.rounds, "samples_per_round": args.samples, "warmup": args.warmup,
           "flush_bytes": flush, "l2_bytes": l2, "band_floor": args.band_floor, "seed": args.seed,
           "cushion_cycles": args.cushion_cycles, "set": args.set, "db": args.db,
           "time_budget_s": args.time_budget, "verbose": args.verbose}
    mode = getattr(args, "timing", None) or "sustained"
    cfg["timing_mode"] = mode
    if mode == "burst":
        cfg["timing"] = ("burst: device time between CUDA events around one call; host launch cost hidden "
                         "behind the L2 flush and a GPU spin (a cool, boosted GPU between samples)")
    else:
        cfg["timing"] = ("sustained: after >= 200 ms back to back (clocks settled), each sample a burst of "
                         "~1 ms of back-to-back calls over input copies exceeding 2x L2, events around the "
                         "burst, time / calls (the GPU under load, at its power limit), as kforge tune")
    os.makedirs(args.out, exist_ok=True)
    jpath = os.path.join(args.out, "results.json")
    started = time.time()
    res = {"schema": "kforge-bench/1", "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": command, "argv": sys.argv, "config": cfg, "shapes": []}
    log(f"environment ({name}) ...")
    res["env"] = envmod.collect(None if _DRY else device.index, args)
    if _DRY:
        res["dry_run"] = "CPU dry run of the harness: host-clock timings, not a measurement"
    write_json(jpath, res)
    log("ceilings: 1 GiB device copy, 8192^3 bf16 GEMM ...")
    res["ceilings"] = (measure_ceilings(device, 5, 1 << 24, 256) if _DRY else measure_ceilings(device))
    write_json(jpath, res)
    kctx = KforgeContexts(args.device, args.db)
    is_kda = [getattr(sh, "kind", None) == "kda" for sh in shapes]
    contenders = make_contenders(kctx, args.contenders) if not all(is_kda) or not shapes else []
    kda_contenders = make_kda_contenders(kctx, args.contenders) if any(is_kda) else []
    nv = None
    if not _DRY:
        nv = envmod.Nvml(res["env"].get("gpu", {}).get("uuid"), device.index)
        if not nv.ok:
            log(f"clocks and power unknown: {nv.why}")
    cfg["nvml"] = bool(nv and nv.ok)
    timer = (Timer(device, flush, args.cushion_cycles) if mode == "burst"
             else SustainedTimer(device, nvml=nv if nv and nv.ok else None))
    timer.sampler = envmod.ClockSampler(nv) if nv and nv.ok else None
    longest = 0.0
    for i, sh in enumerate(shapes):
        el = time.time() - started
        why = budgetmod.stop_reason(el, longest, args.time_budget)
        if why:
            res["incomplete"] = (f"{why} after {i} of {len(shapes)} shapes; skipped: "
                                 + ", ".join(s.id for s in shapes[i:]))
            log("time budget: " + res["incomplete"])
            break
        log(f"[{i + 1}/{len(shapes)}] {sh.label}  ({el:.0f} s elapsed)")
        try:
            if is_kda[i]:
                res["shapes"].append(run_kda_shape(sh, kda_contenders, timer, cfg, device))
            else:
                res["shapes"].append(run_shape(sh, contenders, timer, cfg, device))
        except Exception as e:  # the reference or the inputs failed (out of memory, ...): go on
            log(f"  shape failed: {type(e).__name__}: {e}")
            traceback.print_exc()
            res["shapes"].append({"shape": sh.to_dict(), "error": f"{type(e).__name__}: {e}",
                                  "contenders": []})
            try:
                sync()
                empty_cache()
            except Exception:
                pass
        longest = max(longest, time.time() - started - el)
        write_json(jpath, res)
        if not device_ok(device):
            res["incomplete"] = (f"the device stopped working during {sh.id} (a sticky CUDA error, e.g. an "
                                 f"illegal address from a contender): the run stopped; rerun the rest with "
                                 f"--shapes / --contenders")
            log("error: " + res["incomplete"])
            break
    try:
        res["env"]["nvidia_smi_end"] = envmod.nvidia_smi(res["env"].get("gpu", {}).get("uuid"))
        res["env"]["kforge_plans"] = _plans(kctx)
    except Exception as e:
        res["env"]["end_error"] = f"{type(e).__name__}: {e}"
    res["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res["seconds"] = round(time.time() - started, 1)
    write_json(jpath, res)
    return res, jpath


def _plans(kctx):
    out = {}
    for which, ctx in kctx._ctx.items():
        out[which] = [{"variant": p.variant, "source": p.source} for p in ctx.plans]
    out["errors"] = dict(kctx._err)
    return out
