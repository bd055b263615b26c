"""Statistics of the harness, pure Python (no numpy): medians, spreads, the control band
and the tie/win/loss verdicts."""
import math

DEFAULT_BAND_FLOOR = 0.01  # a band never narrower than 1%


def _clean(xs):
    out = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    return out


def median(xs):
    xs = sorted(_clean(xs))
    n = len(xs)
    if n == 0:
        return None
    m = n // 2
    return xs[m] if n % 2 else 0.5 * (xs[m - 1] + xs[m])


def quantile(xs, q):
    """Linear interpolation between closest ranks (numpy's default 'linear')."""
    xs = sorted(_clean(xs))
    if not xs:
        return None
    if not 0.0 <= q <= 1.0:
        raise ValueError("q must be in [0, 1]")
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(xs):
    """n, median, min, max, q25, q75 and the relative spread (IQR / median)."""
    c = _clean(xs)
    if not c:
        return {"n": 0, "median": None, "min": None, "max": None, "q25": None, "q75": None,
                "rel_iqr": None}
    med = median(c)
    q25, q75 = quantile(c, 0.25), quantile(c, 0.75)
    return {"n": len(c), "median": med, "min": min(c), "max": max(c), "q25": q25, "q75": q75,
            "rel_iqr": (q75 - q25) / med if med else None}


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def control_band(control_samples, duplicate_samples, floor=DEFAULT_BAND_FLOOR):
    """The noise band of a shape: the same contender timed twice as two contenders; the
    band is |median(duplicate) / median(control) - 1|, never below floor. None when either
    has no samples."""
    r = ratio(median(duplicate_samples), median(control_samples))
    if r is None:
        return None
    return max(abs(r - 1.0), floor)


def verdict(r, band):
    """'win' (faster than 1 - band), 'loss' (slower than 1 + band) or 'tie' for a time ratio
    r = contender / reference; None when r or band is unknown."""
    if r is None or band is None:
        return None
    if r < 1.0 - band:
        return "win"
    if r > 1.0 + band:
        return "loss"
    return "tie"


def flatten(rounds):
    """Samples of all rounds in one list."""
    return [x for r in (rounds or []) for x in r]


# ---- sustained timing (as the tuner's, tuner/tune_ilv.c and tuner/attn_run.c) -------------------
MAX_SETS = 64


def rotate_sets(set_bytes, l2_bytes):
    """Copies of a case's inputs (set_bytes each) a sustained timing rotates over so that together
    they hold at least 2x the L2: 1 when one set does (or either size is unknown), else
    ceil(2 l2 / set_bytes), at most MAX_SETS."""
    if not l2_bytes or not set_bytes or l2_bytes <= 0 or set_bytes <= 0 or set_bytes >= 2 * l2_bytes:
        return 1
    return min(MAX_SETS, int(math.ceil(2.0 * l2_bytes / set_bytes)))


def burst_calls(per_call_ms, burst_ms=1.0, lo=2, hi=100000):
    """Calls in one sustained sample: about burst_ms of back-to-back calls, at least lo."""
    if not per_call_ms or per_call_ms <= 0:
        return lo
    return max(lo, min(hi, int(math.ceil(burst_ms / per_call_ms))))


def per_call(burst_ms_list, calls):
    """Samples of a sustained timing: each burst's time over its calls."""
    return [x / calls for x in burst_ms_list]
