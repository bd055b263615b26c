"""PNG plots of a results JSON (matplotlib, Agg): one chart per series of shapes (the
`series` key of bench/sets): decode TB/s of K+V read against the context length, prefill
TFLOP/s against the sequence length; every contender that ran correctly, and the ceiling
measured in the same run as a dashed line."""
import os
import re

from . import report
from .sets import fmt_len

STYLE = {"kforge-tuned": ("C3", "o", "-"), "kforge-default": ("C1", "s", "-"),
         "kforge-default#2": ("C1", "s", ":"), "sdpa-cudnn": ("C0", "^", "--"),
         "sdpa-flash": ("C2", "v", "--"), "flex": ("C4", "D", "--")}


def slug(s):
    return re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-").lower()


def series(res):
    """{series name: (kind, [(x, {contender: (label, throughput)})])} sorted by x."""
    ceil, shapes = report.analyze(res)
    out = {}
    for sa in shapes:
        sh = sa["shape"]
        if not sh.series:
            continue
        x = sh.skv if sh.kind == "decode" else sh.sq
        pts = {r["name"]: (r["label"], r["throughput"]) for r in sa["rows"] if r["throughput"]}
        out.setdefault(sh.series, (sh.kind, []))[1].append((x, pts))
    for k in out:
        out[k][1].sort(key=lambda p: p[0])
    return ceil, out


def plot(res, out_dir, include_control=False):
    """Writes one PNG per series into out_dir; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ceil, ser = series(res)
    gpu = ((res.get("env") or {}).get("gpu") or {}).get("name", "")
    paths = []
    os.makedirs(out_dir, exist_ok=True)
    for name, (kind, pts) in ser.items():
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
        contenders = []
        for _, p in pts:
            for c in p:
                if c not in contenders:
                    contenders.append(c)
        for c in contenders:
            if c.endswith("#2") and not include_control:
                continue
            xs = [x for x, p in pts if c in p]
            ys = [p[c][1] / 1e12 for x, p in pts if c in p]
            label = next(p[c][0] for x, p in pts if c in p)
            color, marker, ls = STYLE.get(c, (None, "o", "-"))
            ax.plot(xs, ys, marker=marker, linestyle=ls, color=color, label=label)
        top = max([p[c][1] for _, p in pts for c in p] + [0.0]) / 1e12
        cval = ceil["copy"] if kind == "decode" else ceil["gemm"]
        if cval:
            top = max(top, cval / 1e12)
            cl = (f"device copy ceiling (read+write): {cval / 1e12:.2f} TB/s" if kind == "decode"
                  else f"bf16 GEMM ceiling (8192³): {cval / 1e12:.0f} TFLOP/s")
            ax.axhline(cval / 1e12, color="k", linestyle=":", linewidth=1.2, label=cl)
        ax.set_xscale("log", base=2)
        xs_all = [x for x, _ in pts]
        ax.set_xticks(xs_all)
        ax.set_xticklabels([fmt_len(x) for x in xs_all])
        ax.set_xlabel("keys per sequence (Skv)" if kind == "decode" else "sequence length (Sq = Skv)")
        ax.set_ylabel("TB/s of K+V read" if kind == "decode" else "TFLOP/s (causal counts half)")
        ax.set_ylim(0, top * 1.12 if top > 0 else 1)
        title = name + (f" — {gpu}" if gpu else "")
        if res.get("synthetic"):
            title = "SYNTHETIC TEST DATA — " + title
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        path = os.path.join(out_dir, f"{slug(name)}.png")
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
