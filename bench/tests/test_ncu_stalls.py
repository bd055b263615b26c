"""tests/ncu_stalls.py: the stall reasons read from an Nsight Compute raw CSV (the device scripts' summary line)."""
import contextlib
import csv
import importlib.util
import io
import os
import tempfile
import unittest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "ncu_stalls.py")
_spec = importlib.util.spec_from_file_location("ncu_stalls", _PATH)
ncu_stalls = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ncu_stalls)


def _run(rows):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.raw.csv")
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(rows)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ncu_stalls.main(["ncu_stalls.py", path, "2"])
        return out.getvalue().strip()


class NcuStalls(unittest.TestCase):
    def test_sampled_counters_largest_first_not_issued_left_out(self):
        head = ["ID", "Kernel Name", "smsp__pcsamp_warps_issue_stalled_barrier",
                "smsp__pcsamp_warps_issue_stalled_long_scoreboard",
                "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued",
                "smsp__pcsamp_warps_issue_stalled_wait"]
        line = _run([head, [""] * 6, ["0", "kf_attn_prefill", "1,000", "3000", "9000", "500"]])
        self.assertEqual(line, "kf_attn_prefill: long_scoreboard 66.7%, barrier 22.2%")

    def test_per_issue_averages_where_no_sampling(self):
        head = ["Kernel Name", "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
                "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"]
        line = _run([head, ["", "", ""], ["k", "0.5", "1.5"]])
        self.assertEqual(line, "k: math_pipe_throttle 75.0%, wait 25.0%")

    def test_a_report_without_counters_says_so(self):
        line = _run([["Kernel Name", "gpu__time_duration.sum"], ["", "ns"], ["k", "1000"]])
        self.assertEqual(line, "k: no stall counters in this report")


if __name__ == "__main__":
    unittest.main()
