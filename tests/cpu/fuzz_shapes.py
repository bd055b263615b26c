#!/usr/bin/env python3
"""tests/cpu/fuzz_shapes.py: a seeded fuzzer over --shape strings for `kforge gen` and `kforge compile`.

Each case starts from a valid shape of a family and applies none, one or several hostile mutations
(numbers past 64 bits or an int, negative, zero, huge, unknown keys, duplicated keys, dropped keys,
garbage bytes, empty, very long). The oracle is by construction: a case with no mutation is valid (the
valid variations only change b and skv within range), any mutation makes it invalid. Every run must end
within its time limit (no hang), by an exit status, not a signal (no crash); exit 0 exactly for the
valid cases, 1 or 2 with an `error:` line for the others.

usage: fuzz_shapes.py path/to/kforge   (env KFORGE_FUZZ_N cases, default 300; KFORGE_FUZZ_SEED, default 14)
"""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

BASES = {
    "attn_decode": "dtype=bf16,b=2,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0",
    "attn_prefill": "dtype=bf16,b=1,sq=256,skv=256,hq=8,hkv=2,d=128,causal=1",
    "kda_decode": "n=4,t=1,h=2,hv=4,dk=128,dv=128",
    "kda_prefill": "n=3,t=11,h=2,hv=4,dk=128,dv=128",
    "attn_parts_decode": "dtype=bf16,b=4,sq=1,skv=4096,hq=16,hkv=1,parts=latent512_rope64,value=alias_latent,"
                         "dv=512,layers=1,page_size=64,causal=0",
}
HOSTILE_INTS = ["-1", "-5", "0", "-2147483648", "2147483648", "4294967298", "9223372036854775807",
                "9223372036854775808", "-9223372036854775809", "99999999999999999999", "9223372036854775807k",
                "9007199254740993K", "2097152k", "-1k", "1e9", "0x10", "12abc", "", " ", "--1", "+-3", "1.5"]
# appended to a name or a value (no separator or white space: those would leave it valid)
GARBAGE = ["\x01\x02", "\xff\xfe", "é", "💥", "%s%n%x", "'", "\"", "\\", "$(id)", "a=b=c", "=", "==", "{}", "[]",
           "nil", "NaN", "inf", "\x7f", "-"]


def parse(base):
    return [tuple(kv.split("=", 1)) for kv in base.split(",")]


def join(items):
    return ",".join(f"{k}={v}" for k, v in items)


def valid_case(rng, family):
    items = parse(BASES[family])
    out = []
    for k, v in items:
        if k in ("b", "n") and rng.random() < 0.5:
            v = str(rng.choice([1, 2, 3, 8, 64]))
        elif k == "skv" and rng.random() < 0.5:
            v = str(rng.choice([0, 1, 100, 8192, 65536]))
        out.append((k, v))
    return join(out)


def mutate(rng, family):
    """An invalid shape string for family (every mutation below is refused by kforge's rules)."""
    items = parse(BASES[family])
    ints = [i for i, (k, v) in enumerate(items) if v.lstrip("-").isdigit()]
    kind = rng.randrange(12)
    if kind == 0:    # a hostile integer in place of a size
        i = rng.choice(ints)
        bad = rng.choice(HOSTILE_INTS)
        if bad in ("0",) and items[i][0] == "skv":
            bad = "-1"
        if bad.lower() in ("0", "2097152k") and items[i][0] in ("causal", "page_size"):
            bad = "-7"
        items[i] = (items[i][0], bad)
    elif kind == 1:  # an unknown key
        items.insert(rng.randrange(len(items) + 1), (rng.choice(["foo", "bq", "window", "z", "famil"]), "1"))
    elif kind == 2:  # a duplicated key (was: the last one won)
        k, v = rng.choice(items)
        items.insert(rng.randrange(len(items) + 1), (k, v))
    elif kind == 3:  # a dropped key
        del items[rng.randrange(len(items))]
    elif kind == 4:  # garbage bytes in a value
        i = rng.randrange(len(items))
        items[i] = (items[i][0], items[i][1] + rng.choice(GARBAGE))
    elif kind == 5:  # garbage in a name
        i = rng.randrange(len(items))
        items[i] = (items[i][0] + rng.choice(GARBAGE + ["X", "1", ",", ";"]), items[i][1])
    elif kind == 6:  # empty or separators only
        return rng.choice(["", ",", ";", " , ; ", "=", "==,=", "a", ",,,,b"])
    elif kind == 7:  # very long
        return rng.choice(["b=" + "9" * rng.choice([30, 500, 3000]), ",".join(["b=1"] * 500),
                           "x" * 5000, join(items) + "," + "y" * 40 + "=1"])
    elif kind == 8:  # heads that do not divide
        names = {"attn_decode": ("hq", "hkv"), "attn_prefill": ("hq", "hkv"), "attn_parts_decode": ("hq", "hkv"),
                 "kda_decode": ("hv", "h"), "kda_prefill": ("hv", "h")}[family]
        items = [(k, "30" if k == names[0] else "8" if k == names[1] else v) for k, v in items]
    elif kind == 9:  # a zero divisor
        div = {"attn_decode": "hkv", "attn_prefill": "hkv", "attn_parts_decode": "hkv", "kda_decode": "h",
               "kda_prefill": "h"}[family]
        items = [(k, "0" if k == div else v) for k, v in items]
    elif kind == 10:  # a string where an integer goes, or an integer where a name goes
        i = rng.randrange(len(items))
        items[i] = (items[i][0], "abc" if items[i][1].isdigit() else "5")
    else:             # random printable and control bytes (no NUL: argv cannot hold one)
        n = rng.randrange(1, 200)
        return "".join(chr(rng.choice(list(range(1, 256)))) for _ in range(n))
    return join(items)


def main():
    kf = sys.argv[1]
    n = int(os.environ.get("KFORGE_FUZZ_N", "300"))
    seed = int(os.environ.get("KFORGE_FUZZ_SEED", "14"))
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="kf_fuzz_")
    env = dict(os.environ, KFORGE_NO_GPU="1", KFORGE_DB=os.path.join(tmp, "f.db"))
    fams = sorted(BASES)
    crashes = hangs = wrong = valid = 0
    t0 = time.time()
    for i in range(n):
        family = rng.choice(fams)
        ok = rng.random() < 0.15
        shape = valid_case(rng, family) if ok else mutate(rng, family)
        valid += ok
        for cmd in (["gen"], ["compile", "--arch", "sm_90a", "--quiet"]):
            argv = [kf] + cmd + [family, "--shape", shape]
            try:
                r = subprocess.run(argv, env=env, capture_output=True, timeout=30)
            except subprocess.TimeoutExpired:
                hangs += 1
                print(f"HANG  case {i}: {cmd[0]} {family} --shape {shape!r}")
                continue
            err = r.stderr.decode(errors="replace")
            if r.returncode < 0:
                crashes += 1
                print(f"CRASH case {i}: {cmd[0]} {family} --shape {shape!r}: signal "
                      f"{signal.Signals(-r.returncode).name}\n{err[-2000:]}")
            elif ok and r.returncode != 0:
                wrong += 1
                print(f"WRONG case {i}: {cmd[0]} {family} --shape {shape!r}: a valid shape exits "
                      f"{r.returncode}\n{err[-1000:]}")
            elif not ok and (r.returncode not in (1, 2) or "error: " not in err):
                wrong += 1
                print(f"WRONG case {i}: {cmd[0]} {family} --shape {shape!r}: an invalid shape exits "
                      f"{r.returncode} with {err[-300:]!r}")
    dt = time.time() - t0
    print(f"fuzz_shapes: seed {seed}, {n} shapes ({valid} valid), {2 * n} runs (gen + compile) in {dt:.1f} s: "
          f"{crashes} crashes, {hangs} hangs, {wrong} wrong exits")
    return 1 if crashes or hangs or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
