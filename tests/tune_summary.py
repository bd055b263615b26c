# tests/tune_summary.py: one table from `kforge tune --json` lines (band, drift, speedup, kept, phase split per shape; the total)
# usage: python3 tests/tune_summary.py tune.jsonl
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
f = lambda x, p="%.4f": "-" if x is None else p % x
print("%-14s %-58s %5s %8s %7s %7s %9s %7s %7s %7s" % ("family", "shape", "var", "band%", "drift%", "speedup",
      "kept", "wall_s", "gate_s", "time_s"))
for r in rows:
    if r.get("total"):
        ph = r["phases"]
        print("total: %d/%d shapes, %d measured, wall %.1f s (gate %.1f s, time %.1f s, compile wait %.1f s)" % (
              r["shapes_done"], r["shapes"], r["measured"], ph["wall_s"], ph["gate_s"], ph["time_s"], ph["compile_wait_s"]))
        continue
    ph = r.get("phases", {})
    print("%-14s %-58s %5d %8s %7s %7s %9s %7.1f %7.1f %7.1f" % (r["family"], r["shape"][:58], r["variants"],
          f(100 * r["band"] if r.get("band") is not None else None, "%.2f"),
          f(100 * r["drift"] if r.get("drift") is not None else None, "%.2f"), f(r.get("speedup")),
          r.get("default_kept"), ph.get("wall_s", 0), ph.get("gate_s", 0), ph.get("time_s", 0)))
