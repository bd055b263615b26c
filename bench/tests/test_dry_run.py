"""The whole harness pipeline on the CPU (`python -m bench run --dry-run-cpu`, set tiny):
inputs, reference, contenders that refuse (kforge without a GPU, SDPA cuDNN on the CPU)
recorded as unsupported with their messages, SDPA flash skipped on the window rows (it takes
no mask), timed rounds with a host clock, JSON, markdown. Needs torch (CPU is enough);
skipped without it."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


@unittest.skipUnless(HAVE_TORCH, "skipped: torch not installed (the dry run needs torch; the GPU run is the lead's)")
class TestDryRun(unittest.TestCase):
    def test_dry_run(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
            env["KFORGE_DB"] = os.path.join(d, "none.db")
            cmd = [sys.executable, "-m", "bench", "run", "--set", "tiny", "--dry-run-cpu", "--rounds", "2",
                   "--samples", "3", "--out", d, "--no-append", "--no-plots", "--contenders",
                   "kforge-tuned,kforge-default,kforge-default#2,sdpa-cudnn,sdpa-flash,sdpa-math"]
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            with open(os.path.join(d, "results.json")) as f:
                res = json.load(f)
            self.assertEqual(res["schema"], "kforge-bench/1")
            self.assertIn("dry_run", res)
            self.assertEqual(len(res["shapes"]), 7)
            self.assertEqual([e["shape"]["window"] for e in res["shapes"]], [None] * 5 + [100, 256])
            for e in res["shapes"]:
                st = {c["name"]: c for c in e["contenders"]}
                if e["shape"]["window"] is not None:  # the masked math backend against the windowed reference
                    self.assertEqual(st["sdpa-flash"]["status"], "skipped", st["sdpa-flash"])
                    self.assertIn("takes no attn_mask", st["sdpa-flash"]["message"])
                self.assertEqual(st["sdpa-math"]["status"], "ok", st["sdpa-math"])
                self.assertEqual(len(st["sdpa-math"]["rounds"]), 2)
                self.assertEqual([len(r) for r in st["sdpa-math"]["rounds"]], [3, 3])
                self.assertLess(st["sdpa-math"]["rel_err"], 1e-2)
                self.assertEqual(st["kforge-tuned"]["status"], "unsupported")
                self.assertIn("no tuning database", st["kforge-tuned"]["message"])
                self.assertEqual(st["sdpa-cudnn"]["status"], "unsupported")
                self.assertTrue(st["sdpa-cudnn"]["message"])
                self.assertEqual(st["kforge-default"]["status"], "unsupported")
                self.assertTrue(st["kforge-default"]["message"])  # kf_open's message, or a missing library
            with open(os.path.join(d, "results.md")) as f:
                md = f.read()
            self.assertIn("> **DRY RUN**", md)
            self.assertIn("| decode B2 32/8 D128 Sq1 Skv1K | kforge tuned |", md)
            self.assertIn("| prefill causal win100 B1 8/2 D64 S512 | kforge tuned |", md)
            self.assertIn("| decode causal win256 B2 8/2 D64 Sq4 Skv2K | kforge tuned |", md)
            self.assertIn("- window rows (`winW`", md)


if __name__ == "__main__":
    unittest.main()
