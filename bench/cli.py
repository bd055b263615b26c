"""python -m bench: the command line of the harness.

  python -m bench run --set gqa-decode|gqa-prefill|all [--rounds R] [--out DIR] [...]
  python -m bench run --set gqa-window               (sliding-window rows: SDPA with an explicit mask, flex
                                                     with a block mask; not in all)
  python -m bench --markdown-from results.json [--append-to bench/RESULTS.md]
  python -m bench --plots-from results.json --out DIR
  python -m bench sets                               (list the sets and their shapes)
"""
import argparse
import os
import shlex
import sys
import time

from . import report, sets, stats

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_MD = os.path.join(HERE, "RESULTS.md")


def _parser():
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--markdown-from", metavar="JSON", help="print the markdown table of a saved run")
    p.add_argument("--append-to", metavar="MD", help="with --markdown-from: also append it to this file")
    p.add_argument("--plots-from", metavar="JSON", help="write the PNG plots of a saved run into --out")
    p.add_argument("--out", metavar="DIR", help="with --plots-from: where the PNGs go (default: beside the JSON)")
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="run a set on the GPU")
    r.add_argument("--set", default="all", help="a set of bench/sets (default all): " + ", ".join(sets.available()))
    r.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    r.add_argument("--samples", type=int, default=6, help="samples per contender per round (default 6)")
    r.add_argument("--warmup", type=int, default=5, help="untimed calls per contender after the check")
    r.add_argument("--out", metavar="DIR", help="output folder (default bench/out/<UTC date-time>-<set>)")
    r.add_argument("--device", type=int, default=0)
    r.add_argument("--db", help="kforge database of the tuned contender (default $KFORGE_DB, else ./kforge.db)")
    r.add_argument("--contenders", help="comma list to run only these (default all): kforge-tuned, "
                   "kforge-default, kforge-default#2, sdpa-cudnn, sdpa-flash, flex; KDA sets: "
                   "torch-chunked, torch-chunked-graph, torch-naive, fla-chunk, fla-recurrent instead of the SDPA/flex ones")
    r.add_argument("--shapes", help="only shapes whose id contains one of these comma-separated strings")
    r.add_argument("--band-floor", type=float, default=stats.DEFAULT_BAND_FLOOR,
                   help="the narrowest noise band (default 0.01 = 1%%)")
    r.add_argument("--flush-mib", type=int, default=None, help="L2 flush buffer (default max(2x L2, 128 MiB))")
    r.add_argument("--cushion-cycles", type=int, default=200000,
                   help="GPU spin before each sample that hides the host launch cost (0: none)")
    r.add_argument("--timing", choices=("sustained", "burst"), default="sustained",
                   help="sustained (default): back-to-back bursts over rotating inputs after a warm-up, as "
                        "kforge tune; burst: one call a sample after an L2 flush and a spin")
    r.add_argument("--seed", type=int, default=1234)
    r.add_argument("--time-budget", type=float, default=0,
                   help="seconds: start no new shape unless the time left covers the longest shape so far (0: "
                        "no limit); the run is marked incomplete")
    r.add_argument("--results-md", default=RESULTS_MD, help="markdown file the table is appended to")
    r.add_argument("--no-append", action="store_true", help="do not append to the results markdown")
    r.add_argument("--no-plots", action="store_true")
    r.add_argument("--verbose", action="store_true", help="tracebacks of contenders that fail")
    r.add_argument("--dry-run-cpu", action="store_true", help=argparse.SUPPRESS)  # tests: the pipeline on the CPU
    sub.add_parser("sets", help="list the sets and their shapes")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = _parser()
    a = p.parse_args(argv)
    if a.markdown_from:
        res = report.load(a.markdown_from)
        text = report.markdown(res, json_path=a.markdown_from)
        sys.stdout.write(text)
        if a.append_to:
            report.append(a.append_to, text)
        return 0
    if a.plots_from:
        from . import plots
        res = report.load(a.plots_from)
        out = a.out or os.path.dirname(os.path.abspath(a.plots_from))
        for path in plots.plot(res, out):
            print(path)
        return 0
    if a.cmd == "sets":
        for name in sets.available():
            shs = sets.load(name)
            print(f"{name}: {len(shs)} shapes")
            for s in shs:
                print(f"  {s.id:48s} {'table ' if s.table else '      '}{s.series or ''}")
        return 0
    if a.cmd != "run":
        p.print_help()
        return 2
    return _run(a, argv)


def _run(a, argv):
    shapes = sets.load(a.set)
    if a.shapes:
        keys = [k.strip() for k in a.shapes.split(",") if k.strip()]
        shapes = [s for s in shapes if any(k in s.id for k in keys)]
        if not shapes:
            print(f"error: no shape of set {a.set} matches {a.shapes!r}", file=sys.stderr)
            return 2
    # the design.md reference rows first, the plot-only lengths after (a time budget cuts those)
    shapes = [s for s in shapes if s.table] + [s for s in shapes if not s.table]
    if a.contenders:
        a.contenders = [c.strip() for c in a.contenders.split(",") if c.strip()]
    if a.rounds * a.samples < 20:
        print(f"warning: {a.rounds} rounds x {a.samples} samples = {a.rounds * a.samples} < 20 samples "
              "per contender (the measuring rule asks for >= 20)", file=sys.stderr)
    if not a.db:
        from .harness import default_db
        a.db = default_db()
    if not a.out:
        a.out = os.path.join(HERE, "out", time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + a.set)
    command = "python -m bench " + " ".join(shlex.quote(x) for x in argv)
    from . import harness
    res, jpath = harness.run(shapes, a, command)
    repo = os.path.dirname(HERE)
    ap = os.path.abspath(jpath)
    rel = os.path.relpath(ap, repo) if ap.startswith(repo + os.sep) else ap
    text = report.markdown(res, json_path=rel)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text)
    if not a.no_append:
        report.append(a.results_md, text)
    if not a.no_plots:
        try:
            from . import plots
            for path in plots.plot(res, a.out):
                print("plot:", path)
        except Exception as e:
            print(f"plots failed (the JSON is complete; retry with --plots-from): {type(e).__name__}: {e}",
                  file=sys.stderr)
    print(text)
    print("results:", jpath)
    return 0
