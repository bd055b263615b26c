#!/usr/bin/env python3
"""tests/ncu_stalls.py: the warp stall reasons of one kernel launch from Nsight Compute's raw page (CSV).

usage: python3 tests/ncu_stalls.py REPORT.raw.csv [TOP]
Reads `ncu --import R.ncu-rep --page raw --csv` (a header row, a units row, a row a profiled launch) and prints, for
each launch, the stall reasons by their share of the sampled warp states (smsp__pcsamp_warps_issue_stalled_*; the
per-issue averages smsp__average_warps_issue_stalled_*_per_issue_active.ratio where sampling is absent), largest first.
"""
import csv
import re
import sys

SAMPLED = re.compile(r"^smsp__pcsamp_warps_issue_stalled_([a-z_]+)$")
AVERAGE = re.compile(r"^smsp__average_warps_issue_stalled_([a-z_]+)_per_issue_active\.ratio$")


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def reasons(header, row):
    """{reason: value} from the sampled counters, else from the per-issue averages ("not_issued" left out)."""
    for pattern in (SAMPLED, AVERAGE):
        out = {}
        for name, value in zip(header, row):
            m = pattern.match(name)
            v = number(value) if m else None
            if m and v is not None and not m.group(1).endswith("not_issued"):
                out[m.group(1)] = v
        if any(out.values()):
            return out
    return {}


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__.strip().splitlines()[2])
    top = int(argv[2]) if len(argv) > 2 else 8
    with open(argv[1], newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    if len(rows) < 3:
        sys.exit(f"{argv[1]}: no launch in it (a header, a units row and a row a launch expected)")
    header = rows[0]
    name_col = header.index("Kernel Name") if "Kernel Name" in header else None
    for row in rows[2:]:
        got = reasons(header, row)
        total = sum(got.values())
        label = row[name_col] if name_col is not None else "launch"
        if not total:
            print(f"{label}: no stall counters in this report")
            continue
        parts = sorted(got.items(), key=lambda kv: -kv[1])[:top]
        print(f"{label}: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in parts))


if __name__ == "__main__":
    main(sys.argv)
