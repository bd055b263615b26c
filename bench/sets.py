"""Named sets of shapes (bench/sets/NAME.json), expanded to a list of Shape.

A set file: {"name", "description", "dtype", "shapes": [...]} or {"name", "include": [...]}.
A shape entry: kind decode|prefill, b, hq, hkv, d, then sq and skv (decode) or s (prefill,
meaning Sq = Skv); causal (default false); window (a sliding window W: each query, at key
position p under the bottom-right alignment, sees keys p - W .. p; needs causal; default none,
dense); table (a design.md reference row); series (the plot line it belongs to). Any of sq, skv,
s may be a list: one shape per value. Lengths accept a K suffix (x1024).

A KDA entry (kind "kda", see KdaShape): n and t (padded [N, T, ...] inputs, every sequence T
tokens) or lens (packed with cu_seqlens, one length per sequence); h (a list: one shape per
value), hv (default h, or hv_per_h times h), d (K = V) or dk and dv; gate "log" | "sigmoid",
lower_bound, l2norm, beta_sigmoid, initial_state (bools); mode (default: decode when there are
no more tokens than sequences, as kforge.kda picks); table.
"""
import json
import os

SETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sets")


def parse_len(x):
    if isinstance(x, int):
        return x
    s = str(x).strip().upper()
    if s.endswith("K"):
        return int(s[:-1]) * 1024
    if s.endswith("M"):
        return int(s[:-1]) * 1024 * 1024
    return int(s)


def fmt_len(n):
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


class Shape:
    FIELDS = ("kind", "b", "hq", "hkv", "d", "sq", "skv", "causal", "window", "dtype", "table", "series", "set")

    def __init__(self, kind, b, hq, hkv, d, sq, skv, causal=False, dtype="bf16", table=False,
                 series=None, set=None, window=None):
        if kind not in ("decode", "prefill"):
            raise ValueError(f"kind must be decode or prefill, got {kind!r}")
        if hq % hkv:
            raise ValueError(f"hq {hq} is not a multiple of hkv {hkv}")
        if window is not None:
            if isinstance(window, bool) or not isinstance(window, int) or window < 0:
                raise ValueError(f"window must be None (dense) or an int >= 0 (keys before the query's own), "
                                 f"got {window!r}")
            if not causal:
                raise ValueError(f"window {window} needs causal (a left window of causal attention, as kforge's "
                                 f"window_left)")
        self.kind, self.b, self.hq, self.hkv, self.d = kind, int(b), int(hq), int(hkv), int(d)
        self.sq, self.skv, self.causal, self.window = int(sq), int(skv), bool(causal), window
        self.dtype, self.table, self.series, self.set = dtype, bool(table), series, set

    @property
    def id(self):
        c = "-causal" if self.causal else ""
        w = "" if self.window is None else f"-w{self.window}"
        return (f"{self.kind}-b{self.b}-h{self.hq}x{self.hkv}-d{self.d}-q{fmt_len(self.sq)}"
                f"-kv{fmt_len(self.skv)}{c}{w}-{self.dtype}")

    @property
    def label(self):
        c = " causal" if self.causal else ""
        if self.window is not None:
            c += f" win{self.window}"
        if self.kind == "prefill" and self.sq == self.skv:
            return f"prefill{c} B{self.b} {self.hq}/{self.hkv} D{self.d} S{fmt_len(self.sq)}"
        return (f"{self.kind}{c} B{self.b} {self.hq}/{self.hkv} D{self.d} Sq{fmt_len(self.sq)} "
                f"Skv{fmt_len(self.skv)}")

    def to_dict(self):
        d = {f: getattr(self, f) for f in self.FIELDS}
        d["id"] = self.id
        d["label"] = self.label
        return d

    @classmethod
    def from_dict(cls, d):
        return cls(**{f: d[f] for f in cls.FIELDS if f in d})

    # work of one call
    def elem_bytes(self):
        return {"bf16": 2, "fp16": 2}[self.dtype]

    def kv_bytes(self):
        """Bytes of K and V one call must read: every key, or with a window the keys some query
        sees (the last min(Skv, Sq + W))."""
        keys = self.skv if self.window is None else self.skv - max(0, self.skv - self.sq - self.window)
        return 2 * self.b * keys * self.hkv * self.d * self.elem_bytes()

    def visible_pairs(self):
        """Query-key pairs one head of one sequence computes with a window: query row i sees
        min(i + 1 + Skv - Sq, W + 1) keys (bottom-right causal alignment; none when that is < 1),
        summed over the rows in closed form."""
        assert self.window is not None
        cap = self.window + 1
        lo, hi = 1 + self.skv - self.sq, self.skv  # row 0's and the last row's causal key counts
        a, b = max(lo, 1), min(hi, cap)            # rows under the cap: a .. b keys each
        under = (a + b) * (b - a + 1) // 2 if b >= a else 0
        capped = hi - max(lo, cap + 1) + 1        # rows at the cap
        return under + cap * max(0, capped)

    def flops(self):
        """4 * B * Hq * Sq * Skv * D, halved for causal (design.md's reference figures); with a
        window, 4 * B * Hq * D per query-key pair actually visible (visible_pairs, exact)."""
        if self.window is not None:
            return 4.0 * self.b * self.hq * self.d * self.visible_pairs()
        f = 4.0 * self.b * self.hq * self.sq * self.skv * self.d
        return f / 2 if self.causal else f

    def __repr__(self):
        return f"Shape({self.id})"


class KdaShape:
    """One KDA call (design.md, KDA): N sequences of lens tokens (packed with cu_seqlens) or N x T
    (padded), H q/k heads, HV value heads, K = dk, V = dv; bf16 q, k, v, o; fp32 g, beta, state."""
    FIELDS = ("kind", "mode", "n", "t", "lens", "h", "hv", "dk", "dv", "gate", "lower_bound", "l2norm",
              "beta_sigmoid", "initial_state", "dtype", "table", "series", "set")
    kind = "kda"

    def __init__(self, kind="kda", mode=None, n=None, t=None, lens=None, h=16, hv=None, dk=128, dv=None,
                 gate="sigmoid", lower_bound=-5.0, l2norm=True, beta_sigmoid=True, initial_state=True,
                 dtype="bf16", table=False, series=None, set=None):
        if kind != "kda":
            raise ValueError(f"KdaShape kind must be kda, got {kind!r}")
        if lens is not None:
            self.lens = [int(x) for x in lens]
            if not self.lens or any(x < 0 for x in self.lens):
                raise ValueError(f"lens must be a non-empty list of lengths >= 0, got {lens!r}")
            self.n, self.t = len(self.lens), None
        else:
            if n is None or t is None:
                raise ValueError("a KDA shape needs n and t (padded) or lens (packed)")
            self.lens, self.n, self.t = None, int(n), int(t)
            if self.n < 1 or self.t < 1:
                raise ValueError(f"n and t must be >= 1, got {n}, {t}")
        self.h = int(h)
        self.hv = int(hv) if hv is not None else self.h
        if self.h < 1 or self.hv % self.h:
            raise ValueError(f"hv {self.hv} is not a multiple of h {self.h}")
        self.dk = int(dk)
        self.dv = int(dv) if dv is not None else self.dk
        if gate not in ("log", "sigmoid"):
            raise ValueError(f"gate must be log or sigmoid, got {gate!r}")
        self.gate, self.lower_bound = gate, float(lower_bound)
        self.l2norm, self.beta_sigmoid = bool(l2norm), bool(beta_sigmoid)
        self.initial_state = bool(initial_state)
        if dtype != "bf16":
            raise ValueError(f"KDA takes bf16 q, k, v; got dtype {dtype!r}")
        self.dtype, self.table, self.set = dtype, bool(table), set
        self.series = None  # no KDA plots
        if mode is None:
            mode = "decode" if self.tokens <= self.n else "prefill"
        if mode not in ("prefill", "decode"):
            raise ValueError(f"mode must be prefill or decode, got {mode!r}")
        self.mode = mode

    @property
    def packed(self):
        return self.lens is not None

    @property
    def seq_lens(self):
        return list(self.lens) if self.packed else [self.t] * self.n

    @property
    def tokens(self):
        """Tokens of one call, all sequences together."""
        return sum(self.lens) if self.packed else self.n * self.t

    @property
    def max_len(self):
        return max(self.seq_lens)

    def _seq(self, sep):
        return ("lens" + sep.join(str(x) for x in self.lens)) if self.packed else f"T{fmt_len(self.t)}"

    @property
    def id(self):
        g = "log" if self.gate == "log" else f"sig{self.lower_bound:g}"
        flags = ("-l2" if self.l2norm else "") + ("-bs" if self.beta_sigmoid else "") + \
            ("-h0" if self.initial_state else "")
        return (f"kda-{self.mode}-n{self.n}-{self._seq('.').lower()}-h{self.h}x{self.hv}-k{self.dk}-v{self.dv}"
                f"-{g}{flags}-{self.dtype}")

    @property
    def label(self):
        seq = f"lens [{', '.join(str(x) for x in self.lens)}]" if self.packed else f"T{fmt_len(self.t)}"
        g = "log gate" if self.gate == "log" else f"sigmoid gate lb {self.lower_bound:g}"
        extra = [x for x, on in (("l2norm", self.l2norm), ("h0", self.initial_state)) if on]
        return (f"KDA {self.mode} N{self.n} {seq} H{self.h}/HV{self.hv} K{self.dk} V{self.dv} {g}"
                + ("".join(" " + x for x in extra)))

    def to_dict(self):
        d = {f: getattr(self, f) for f in self.FIELDS}
        d["id"] = self.id
        d["label"] = self.label
        return d

    @classmethod
    def from_dict(cls, d):
        return cls(**{f: d[f] for f in cls.FIELDS if f in d})

    # work of one call
    def bytes_moved(self):
        """Bytes one call must move at least: q, k, v, g, beta read and o written once (bf16 q, k,
        v, o; fp32 g, beta), the state read (when given) and written once (fp32), plus the gate's
        A_log / dt_bias and cu_seqlens."""
        t = self.tokens
        b = 2 * t * self.h * self.dk * 2          # q, k
        b += 2 * t * self.hv * self.dv * 2        # v, o
        b += t * self.hv * self.dk * 4            # g
        b += t * self.hv * 4                      # beta
        st = self.n * self.hv * self.dk * self.dv * 4
        b += st * (2 if self.initial_state else 1)
        if self.gate == "sigmoid":
            b += self.hv * 4 + self.hv * self.dk * 4
        if self.packed:
            b += (self.n + 1) * 4
        return b

    def __repr__(self):
        return f"KdaShape({self.id})"


def shape_from_dict(d):
    """A Shape or a KdaShape from its to_dict()."""
    return KdaShape.from_dict(d) if d.get("kind") == "kda" else Shape.from_dict(d)


def _kda_entries(e, name, dtype="bf16"):
    hs = _as_list(e.get("h", 16))
    for h in hs:
        if "hv" in e:
            if len(hs) > 1:
                raise ValueError(f"set {name}: a KDA entry with a list of h takes hv_per_h, not hv")
            hv = e["hv"]
        else:
            hv = int(e.get("hv_per_h", 1)) * int(h)
        d = e.get("d", 128)
        t = e.get("t")
        yield KdaShape("kda", e.get("mode"), e.get("n"), None if t is None else parse_len(t), e.get("lens"),
                       h, hv, e.get("dk", d), e.get("dv", d), e.get("gate", "sigmoid"),
                       e.get("lower_bound", -5.0), e.get("l2norm", True), e.get("beta_sigmoid", True),
                       e.get("initial_state", True), e.get("dtype", dtype), e.get("table", False), None, name)


def available():
    return sorted(f[:-5] for f in os.listdir(SETS_DIR) if f.endswith(".json"))


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def load(name, _seen=None):
    """Shapes of the named set, in file order, without duplicates (by id)."""
    path = os.path.join(SETS_DIR, name + ".json")
    if not os.path.exists(path):
        raise ValueError(f"unknown set {name!r}; known: {', '.join(available())}")
    with open(path) as f:
        spec = json.load(f)
    seen = _seen if _seen is not None else set()
    out = []
    for inc in spec.get("include", []):
        out += load(inc, seen)
    dtype = spec.get("dtype", "bf16")
    for e in spec.get("shapes", []):
        kind = e["kind"]
        if kind == "kda":
            for sh in _kda_entries(e, spec["name"], dtype):
                if sh.id not in seen:
                    seen.add(sh.id)
                    out.append(sh)
            continue
        if "s" in e:
            pairs = [(parse_len(s), parse_len(s)) for s in _as_list(e["s"])]
        else:
            pairs = [(parse_len(q), parse_len(k)) for q in _as_list(e["sq"]) for k in _as_list(e["skv"])]
        for sq, skv in pairs:
            sh = Shape(kind, e["b"], e["hq"], e["hkv"], e["d"], sq, skv, e.get("causal", False),
                       e.get("dtype", dtype), e.get("table", False), e.get("series"), spec["name"],
                       None if e.get("window") is None else parse_len(e["window"]))
            if sh.id not in seen:
                seen.add(sh.id)
                out.append(sh)
    return out
