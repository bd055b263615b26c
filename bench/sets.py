"""Named sets of shapes (bench/sets/NAME.json), expanded to a list of Shape.

A set file: {"name", "description", "dtype", "shapes": [...]} or {"name", "include": [...]}.
A shape entry: kind decode|prefill, b, hq, hkv, d, then sq and skv (decode) or s (prefill,
meaning Sq = Skv); causal (default false); table (a design.md reference row); series (the
plot line it belongs to). Any of sq, skv, s may be a list: one shape per value. Lengths
accept a K suffix (x1024).
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
    FIELDS = ("kind", "b", "hq", "hkv", "d", "sq", "skv", "causal", "dtype", "table", "series", "set")

    def __init__(self, kind, b, hq, hkv, d, sq, skv, causal=False, dtype="bf16", table=False,
                 series=None, set=None):
        if kind not in ("decode", "prefill"):
            raise ValueError(f"kind must be decode or prefill, got {kind!r}")
        if hq % hkv:
            raise ValueError(f"hq {hq} is not a multiple of hkv {hkv}")
        self.kind, self.b, self.hq, self.hkv, self.d = kind, int(b), int(hq), int(hkv), int(d)
        self.sq, self.skv, self.causal = int(sq), int(skv), bool(causal)
        self.dtype, self.table, self.series, self.set = dtype, bool(table), series, set

    @property
    def id(self):
        c = "-causal" if self.causal else ""
        return (f"{self.kind}-b{self.b}-h{self.hq}x{self.hkv}-d{self.d}-q{fmt_len(self.sq)}"
                f"-kv{fmt_len(self.skv)}{c}-{self.dtype}")

    @property
    def label(self):
        c = " causal" if self.causal else ""
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
        """Bytes of K and V one call must read."""
        return 2 * self.b * self.skv * self.hkv * self.d * self.elem_bytes()

    def flops(self):
        """4 * B * Hq * Sq * Skv * D, halved for causal."""
        f = 4.0 * self.b * self.hq * self.sq * self.skv * self.d
        return f / 2 if self.causal else f

    def __repr__(self):
        return f"Shape({self.id})"


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
        if "s" in e:
            pairs = [(parse_len(s), parse_len(s)) for s in _as_list(e["s"])]
        else:
            pairs = [(parse_len(q), parse_len(k)) for q in _as_list(e["sq"]) for k in _as_list(e["skv"])]
        for sq, skv in pairs:
            sh = Shape(kind, e["b"], e["hq"], e["hkv"], e["d"], sq, skv, e.get("causal", False),
                       e.get("dtype", dtype), e.get("table", False), e.get("series"), spec["name"])
            if sh.id not in seen:
                seen.add(sh.id)
                out.append(sh)
    return out
