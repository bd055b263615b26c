"""From a results JSON (see bench/harness.py for the schema) to numbers per row and to the
markdown table appended to bench/RESULTS.md. Pure Python: runs without torch or a GPU."""
import json

from . import stats
from .sets import shape_from_dict

SCHEMA = "kforge-bench/1"
ROLE_ORDER = {"kforge": 0, "control": 1, "peer": 2}


def load(path):
    with open(path) as f:
        res = json.load(f)
    if res.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {res.get('schema')!r}, expected {SCHEMA!r}")
    return res


def ceilings(res):
    """{'copy': bytes/s or None, 'gemm': FLOP/s or None} from the run's own samples."""
    out = {"copy": None, "gemm": None}
    c = res.get("ceilings") or {}
    cp = c.get("copy") or {}
    m = stats.median(cp.get("samples_ms") or [])
    if m and cp.get("bytes"):
        out["copy"] = cp["bytes"] / (m * 1e-3)
    g = c.get("gemm") or {}
    m = stats.median(g.get("samples_ms") or [])
    if m and g.get("flops"):
        out["gemm"] = g["flops"] / (m * 1e-3)
    return out


def analyze_shape(entry, ceil, band_floor=stats.DEFAULT_BAND_FLOOR):
    """Rows of one shape: medians, throughput, % of ceiling, ratio to the best peer, verdict."""
    shape = shape_from_dict(entry["shape"])
    kda = shape.kind == "kda"
    rows = []
    for c in entry["contenders"]:
        samples = stats.flatten(c.get("rounds"))
        s = stats.summary(samples) if c.get("status") == "ok" else stats.summary([])
        med = s["median"]
        tput = pct = bps = None
        if med:
            sec = med * 1e-3
            if kda:  # tokens/s; bytes moved per second against the copy ceiling
                tput = shape.tokens / sec
                bps = shape.bytes_moved() / sec
                if ceil.get("copy"):
                    pct = 100.0 * bps / ceil["copy"]
            elif shape.kind == "decode":
                tput = shape.kv_bytes() / sec
                if ceil.get("copy"):
                    pct = 100.0 * tput / ceil["copy"]
            else:
                tput = shape.flops() / sec
                if ceil.get("gemm"):
                    pct = 100.0 * tput / ceil["gemm"]
        rows.append({"name": c["name"], "label": c.get("label", c["name"]), "role": c.get("role", "peer"),
                     "status": c.get("status"), "message": c.get("message"), "rel_err": c.get("rel_err"),
                     "variant": c.get("variant"), "source": c.get("source"), "summary": s,
                     "median_ms": med, "throughput": tput, "pct_ceiling": pct,
                     "calls": c.get("calls"), "sets": c.get("sets")})
        rows[-1].update(clocks_of(c))
        if kda:
            rows[-1].update({"tokens_per_s": tput, "bytes_per_s": bps, "state_err": c.get("state_err")})
    by = {r["name"]: r for r in rows}
    ctl = entry.get("control") or {}
    a, b = by.get(ctl.get("of")), by.get(ctl.get("duplicate"))
    band = None
    ctl_ratio = None
    if a and b and a["median_ms"] and b["median_ms"]:
        ctl_ratio = b["median_ms"] / a["median_ms"]
        # every other row of the control's variant (kforge tuned where it kept the default) is one more
        # control: the band is the widest of them (three names of one variant spread 2.9% at the power limit)
        ctrl = stats.flatten(_rounds(entry, a["name"]))
        same = [b] + [r for r in rows if r is not a and r is not b and r["role"] != "peer" and r["median_ms"]
                      and r.get("variant") and r["variant"] == a.get("variant")]
        band = max(stats.control_band(ctrl, stats.flatten(_rounds(entry, r["name"])), band_floor) for r in same)
    peers = [r for r in rows if r["role"] == "peer" and r["median_ms"]]
    best = min(peers, key=lambda r: r["median_ms"]) if peers else None
    for r in rows:
        r["ratio_best_peer"] = stats.ratio(r["median_ms"], best["median_ms"]) if best else None
        r["verdict"] = stats.verdict(r["ratio_best_peer"], band)
        if best is not None and r is best:
            r["verdict"] = "best peer"
    return {"shape": shape, "rows": rows, "band": band, "control_ratio": ctl_ratio,
            "best_peer": best["name"] if best else None, "error": entry.get("error")}


def clocks_of(c):
    """A contender's SM clock and power over its timed rounds (the harness records one NVML summary
    per round): {'sm_mhz': mean of the rounds' means, 'sm_mhz_min', 'power_w': mean, 'power_w_max',
    'temp_c_max'}, each None when unknown (no NVML, a burst run, an older JSON)."""
    ck = [k for k in (c.get("clocks") or []) if isinstance(k, dict)]

    def pick(key, how):
        v = [k[key] for k in ck if isinstance(k.get(key), (int, float))]
        return how(v) if v else None
    return {"sm_mhz": pick("sm_mhz_mean", lambda v: sum(v) / len(v)), "sm_mhz_min": pick("sm_mhz_min", min),
            "power_w": pick("power_w_mean", lambda v: sum(v) / len(v)), "power_w_max": pick("power_w_max", max),
            "temp_c_max": pick("temp_c_max", max)}


def sustained(res):
    """Whether the run timed sustained (back to back over rotating inputs): the config says so
    (timing_mode, the harness's default since issue 15); older JSONs were burst (L2 flushed)."""
    return ((res.get("config") or {}).get("timing_mode") or "burst") == "sustained"


def _rounds(entry, name):
    for c in entry["contenders"]:
        if c["name"] == name:
            return c.get("rounds") or []
    return []


def analyze(res, band_floor=None):
    if band_floor is None:
        band_floor = (res.get("config") or {}).get("band_floor", stats.DEFAULT_BAND_FLOOR)
    ceil = ceilings(res)
    return ceil, [analyze_shape(e, ceil, band_floor) for e in res.get("shapes", [])]


# ---- formatting ----------------------------------------------------------------------
def fmt_ms(x):
    if x is None:
        return "—"
    return f"{x:.4f}" if x < 1 else f"{x:.3f}" if x < 100 else f"{x:.1f}"


def fmt_tput(kind, x):
    if x is None:
        return "—"
    if kind == "decode":
        return f"{x / 1e12:.2f} TB/s" if x >= 1e11 else f"{x / 1e9:.2f} GB/s"
    if x >= 1e14:
        return f"{x / 1e12:.0f} TFLOP/s"
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.2f} GFLOP/s"


def fmt_tokens(x):
    if x is None:
        return "—"
    if x >= 1e9:
        return f"{x / 1e9:.2f} G tok/s"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M tok/s"
    if x >= 1e3:
        return f"{x / 1e3:.1f} K tok/s"
    return f"{x:.0f} tok/s"


def fmt_bytes(n):
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.2f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} KB"
    return f"{n} B"


def fmt_pct(x):
    return "—" if x is None else f"{x:.0f}%"


def cell(s, limit=140):
    s = " ".join(str(s).split())
    if len(s) > limit:
        s = s[:limit - 1] + "…"
    return s.replace("|", "\\|")


def _verdict_cell(r, band):
    st = r["status"]
    if st == "wrong":
        err = r.get("rel_err")
        e = f" (rel err {err:.2e})" if isinstance(err, (int, float)) else ""
        return cell(f"**wrong**{e}, not timed" + (f": {r['message']}" if r.get("message") else ""))
    if st != "ok":
        return cell(f"{st}: {r.get('message') or ''}")
    if r["role"] == "control":
        return "control" + (f" (band ±{100 * band:.1f}%)" if band is not None else "")
    v = r.get("verdict")
    return v if v else "—"


def env_line(env):
    bits = []
    tv = env.get("torch") or {}
    if tv.get("version"):
        s = f"torch {tv['version']}"
        extra = []
        if tv.get("cuda"):
            extra.append(f"CUDA {tv['cuda']}")
        if tv.get("cudnn"):
            extra.append(f"cuDNN {tv['cudnn']}")
        if env.get("triton"):
            extra.append(f"triton {env['triton']}")
        if extra:
            s += " (" + ", ".join(extra) + ")"
        bits.append(s)
    gpu = env.get("gpu") or {}
    if gpu.get("uuid"):
        bits.append(f"GPU UUID {gpu['uuid']}")
    if gpu.get("cc"):
        bits.append(f"sm_{gpu['cc'].replace('.', '')}, {gpu.get('sm_count', '?')} SMs")
    smi = env.get("nvidia_smi_start") or {}
    if smi.get("clocks.sm"):
        s = f"clocks at start: SM {smi['clocks.sm']} MHz"
        if smi.get("clocks.max.sm"):
            s += f" (max {smi['clocks.max.sm']})"
        if smi.get("clocks.mem"):
            s += f", memory {smi['clocks.mem']} MHz"
        if smi.get("temperature.gpu"):
            s += f", {smi['temperature.gpu']} °C"
        if smi.get("power.draw"):
            s += f", {smi['power.draw']} W"
        bits.append(s)
    if env.get("nvrtc"):
        bits.append(f"NVRTC {env['nvrtc']}")
    return "; ".join(bits)


def markdown(res, json_path=None):
    """The markdown section of one run."""
    env = res.get("env") or {}
    cfg = res.get("config") or {}
    gpu = env.get("gpu") or {}
    kf = env.get("kforge") or {}
    ceil, shapes = analyze(res)
    rev = kf.get("git_rev") or "unknown"
    if kf.get("git_dirty"):
        rev += " (dirty)"
    if kf.get("build_rev") and not kf["build_rev"].startswith(kf.get("git_rev") or "-"):
        rev = f"{kf['build_rev']} (library build; source tree at {rev})"
    date = res.get("started") or env.get("date") or "?"
    title = (f"## {date} · {gpu.get('name', '?')} · driver {env.get('driver') or '?'} · "
             f"kforge {kf.get('version') or '?'} @ {rev}")
    out = [title, ""]
    if res.get("synthetic"):
        out += ["> **SYNTHETIC** — hand-written test data, not a measurement.", ""]
    if res.get("dry_run"):
        out += [f"> **DRY RUN** — {res['dry_run']}.", ""]
    out.append(f"- command: `{res.get('command', '?')}`")
    el = env_line(env)
    if el:
        out.append(f"- environment: {el}")
    cp = (res.get("ceilings") or {}).get("copy") or {}
    gm = (res.get("ceilings") or {}).get("gemm") or {}
    cbits = []
    if ceil["copy"]:
        size = cp.get("bytes", 0) / 2
        size = f"{size / 2**30:g} GiB" if size >= 2**30 else f"{size / 2**20:g} MiB"
        cbits.append(f"device copy {fmt_tput('decode', ceil['copy'])} (read+write, {size} copied)")
    if ceil["gemm"]:
        n = gm.get("n")
        cbits.append(f"bf16 GEMM {fmt_tput('prefill', ceil['gemm'])}" + (f" ({n}³)" if n else ""))
    for k in ("copy", "gemm"):
        if ((res.get("ceilings") or {}).get(k) or {}).get("error"):
            cbits.append(f"{k} failed: {cell(res['ceilings'][k]['error'])}")
    out.append("- ceilings measured in this run: " + (", ".join(cbits) if cbits else "none"))
    if cfg:
        fl = cfg.get("flush_bytes")
        if sustained(res):
            how = (", sustained: each contender warmed up back to back first, each sample a burst of "
                   "back-to-back calls over rotating input copies (together > 2× L2), events around the burst, "
                   "time / calls (the GPU under load, at its power limit); SM clock and power (NVML) per contender")
        else:
            how = (", L2 flushed" + (f" ({fl / 2**20:.0f} MiB write)" if fl else "")
                   + " before each sample (burst: a cool, boosted GPU)")
        out.append(
            f"- method: {cfg.get('rounds', '?')} rounds × {cfg.get('samples_per_round', '?')} samples per "
            f"contender, contenders shuffled each round{how}, CUDA events, median; "
            + ("outputs checked against an fp32 reference first; "
               if any(sa["shape"].kind != "kda" for sa in shapes) or not shapes else "")
            + "time / best peer < 1 is faster; band = the widest |ratio − 1| of the control and of any other row "
            + "of the default's variant to the default, at least "
            + f"{100 * cfg.get('band_floor', stats.DEFAULT_BAND_FLOOR):.0f}%")
    if json_path:
        out.append(f"- raw samples: `{json_path}`")
    kda_shapes = [sa for sa in shapes if sa["shape"].kind == "kda"]
    shapes = [sa for sa in shapes if sa["shape"].kind != "kda"]
    if kda_shapes:
        out.append("- KDA: every contender's o and final state checked first against the token-by-token "
                   "recurrence (fp64 on these sizes, else fp32): relative error ≤ 1e-2 (o) and ≤ 5e-3 (state); "
                   "bytes moved = q, k, v, g, beta read and o written once + the state read and written once, "
                   "% of the device-copy ceiling; tokens/s = all sequences' tokens per call / median")
    if any(getattr(sa["shape"], "window", None) is not None for sa in shapes):
        out.append("- window rows (`winW`: each query sees its own key and the W before it, bottom-right aligned): "
                   "TFLOP/s count the query-key pairs inside the window, exactly; decode TB/s the K+V bytes of the "
                   "keys inside it; SDPA takes an explicit additive [Sq, Skv] mask built before the timing (flash "
                   "takes none: skipped), flex a block mask; every output checked against the windowed reference")
    if res.get("incomplete"):
        out.append(f"- **incomplete run**: {res['incomplete']}")
    if shapes or not kda_shapes:
        _gqa_table(out, shapes)
    if kda_shapes:
        _kda_table(out, kda_shapes)
    return "\n".join(out) + "\n"


def _tally(shapes):
    tally = {}
    for sa in shapes:
        for r in sa["rows"]:
            if r["name"] == "kforge-tuned" and r["status"] == "ok" and r.get("verdict"):
                tally[r["verdict"]] = tally.get(r["verdict"], 0) + 1
    return ", ".join(f"{tally.get(k, 0)} {k}" for k in ("win", "tie", "loss")) if tally else None


def _rows(out, shapes, head_of, head_width, ncols, cells_of):
    """One table body: per shape its rows in role order, the shape cell (with the noise band)
    on the first row only, and an error row when the shape failed as a whole."""
    for sa in shapes:
        head = head_of(sa["shape"])
        if sa.get("error"):
            out.append(f"| {cell(head, head_width)} |" + " — |" * (ncols - 2) + f" {cell('error: ' + sa['error'])} |")
        rows = sorted(sa["rows"], key=lambda r: (ROLE_ORDER.get(r["role"], 9)))
        default_variant = next((r["variant"] for r in rows if r["name"] == "kforge-default"), None)
        for k, r in enumerate(rows):
            label = r["label"]
            if r["name"] == "kforge-tuned" and r.get("variant") and r["variant"] == default_variant:
                label += " (= default variant)"
            sc = ""
            if k == 0:
                sc = cell(head, head_width)
                if sa["band"] is not None:
                    sc += f" (band ±{100 * sa['band']:.1f}%)"
            ratio = r.get("ratio_best_peer")
            out.append("| " + " | ".join([sc, cell(label)] + cells_of(sa["shape"], r) + [
                "—" if ratio is None else f"{ratio:.3f}", _verdict_cell(r, sa["band"])]) + " |")


def _has_clocks(shapes):
    return any(r.get("sm_mhz") is not None or r.get("power_w") is not None for sa in shapes for r in sa["rows"])


def fmt_clock(r):
    """'1710 (min 1695)' MHz of a row, or '—'."""
    if r.get("sm_mhz") is None:
        return "—"
    lo = r.get("sm_mhz_min")
    return f"{r['sm_mhz']:.0f}" + (f" (min {lo:.0f})" if lo is not None and lo < r["sm_mhz"] - 0.5 else "")


def fmt_power(r):
    """'684 (max 699)' W of a row, or '—'."""
    if r.get("power_w") is None:
        return "—"
    hi = r.get("power_w_max")
    return f"{r['power_w']:.0f}" + (f" (max {hi:.0f})" if hi is not None and hi > r["power_w"] + 0.5 else "")


def _kda_table(out, shapes):
    """The KDA rows: median, tokens/s, bytes moved per second and % of the copy ceiling (and the SM
    clock and power where the run recorded them); the shape cell carries the bytes one call moves."""
    ck = _has_clocks(shapes)
    out += ["", "| KDA shape | contender | median ms | tokens/s | moved/s | % copy ceiling |"
            + (" SM MHz | power W |" if ck else "") + " time / best peer | verdict |",
            "| --- | --- | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if ck else "") + " ---: | --- |"]
    _rows(out, shapes, lambda sh: f"{sh.label} · {fmt_bytes(sh.bytes_moved())} moved", 240, 10 if ck else 8,
          lambda sh, r: [fmt_ms(r["median_ms"]), fmt_tokens(r.get("tokens_per_s")),
                         fmt_tput("decode", r.get("bytes_per_s")), fmt_pct(r["pct_ceiling"])]
          + ([fmt_clock(r), fmt_power(r)] if ck else []))
    t = _tally(shapes)
    if t:
        out += ["", "KDA: kforge tuned vs the best peer: " + t]


def _gqa_table(out, shapes):
    ck = _has_clocks(shapes)
    out += ["", "| shape | contender | median ms | throughput | % ceiling |" + (" SM MHz | power W |" if ck else "")
            + " time / best peer | verdict |",
            "| --- | --- | ---: | ---: | ---: |" + (" ---: | ---: |" if ck else "") + " ---: | --- |"]
    _rows(out, shapes, lambda sh: sh.label, 200, 9 if ck else 7,
          lambda sh, r: [fmt_ms(r["median_ms"]), fmt_tput(sh.kind, r["throughput"]), fmt_pct(r["pct_ceiling"])]
          + ([fmt_clock(r), fmt_power(r)] if ck else []))
    # a one-line tally of kforge tuned against the best peer
    t = _tally(shapes)
    if t:
        out += ["", "kforge tuned vs the best peer: " + t]


def append(results_md, text):
    with open(results_md, "a") as f:
        f.write("\n" + text)
