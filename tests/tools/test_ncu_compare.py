#!/usr/bin/env python3
"""tools/ncu_compare.py's reading of an Nsight Compute raw page, on a report written here (no
ncu, no GPU)."""

import contextlib
import importlib.util
import io
import os
import tempfile
import unittest

_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                     "ncu_compare.py")
_spec = importlib.util.spec_from_file_location("ncu_compare", _TOOL)
ncu_compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ncu_compare)

STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
HEADER = ["ID", "Kernel Name", "gpu__time_duration.sum", "gpc__cycles_elapsed.max",
          "launch__grid_size", "lts__d_sectors.avg.pct_of_peak_sustained_elapsed",
          "lts__d_sectors.max.pct_of_peak_sustained_elapsed",
          "lts__d_sectors.sum.pct_of_peak_sustained_elapsed",
          "dram__bytes.sum", "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
          "l1tex__data_bank_conflicts.avg",
          STALL.format("wait"), STALL.format("gmma"), STALL.format("selected"),
          STALL.format("barrier")]
UNITS = ["", "", "us", "cycle", "", "%", "%", "%", "Mbyte", "%", "", "inst", "inst", "inst",
         "inst"]
# Kernel a against b: dram__bytes (no .avg sibling) a factor 2.5 apart, the ALU pipe 1.54, L2
# sectors 1.05; the .max roll-up differs by 2x but is a roll-up of a listed average; the bank
# conflicts are missing for b (no value is a difference of its own).
ROW_A = ["0", "ours", "423.84", "675,963", "132", "40.0", "60.0", "40.0", "100", "20.0", "7",
         "2.08", "0.10", "1.00", "0.51"]
ROW_B = ["1", "theirs", "389.16", "638,767", "1,024", "38.0", "30.0", "38.0", "40", "13.0", "",
         "1.29", "0.38", "1.00", "0.47"]


def write(rows):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    with f:
        for row in rows:
            f.write(",".join(f'"{cell}"' for cell in row) + "\n")
    return f.name


class NcuCompareTest(unittest.TestCase):
    def setUp(self):
        self.path = write([HEADER, UNITS, ROW_A, ROW_B])

    def tearDown(self):
        os.unlink(self.path)

    def test_summary_rows_and_stalls_in_order(self):
        names, units, kernels = ncu_compare.read_report(self.path)
        rows = dict(ncu_compare.summary_rows(names, units, kernels))
        self.assertEqual(rows["duration (us)"], ["423.8", "389.2"])  # the report's unit
        self.assertEqual(rows["elapsed cycles (cycle)"], ["675963", "638767"])
        self.assertEqual(rows["grid"], ["132", "1024"])  # no unit: none shown
        self.assertFalse([label for label in rows if label.startswith("clock")])  # not reported
        labels = [label for label, _ in ncu_compare.summary_rows(names, units, kernels)]
        stalls = [label for label in labels if label.startswith("stall: ")]
        # Largest first by the first kernel's value; the issuing warp's own "selected" left out.
        self.assertEqual(stalls, ["stall: wait", "stall: barrier", "stall: gmma"])
        self.assertEqual(rows["stall: gmma"], ["0.10", "0.38"])

    def test_differing_metrics(self):
        names, units, kernels = ncu_compare.read_report(self.path)
        found = ncu_compare.differing(names, units, kernels, 10)
        metrics = [m for m, _, _, _ in found]
        # Largest spread first; the missing value counts as infinitely far.
        self.assertEqual(metrics, ["l1tex__data_bank_conflicts.avg", "dram__bytes.sum",
                                   "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active"])
        self.assertEqual(found[0][2], [7.0, None])
        self.assertEqual(found[1][1], "Mbyte")
        self.assertAlmostEqual(found[1][3], 2.5)
        self.assertAlmostEqual(found[2][3], 20 / 13)
        # Lower the threshold and the 5% one appears, the roll-ups and ID still do not.
        metrics = [m for m, _, _, _ in ncu_compare.differing(names, units, kernels, 4)]
        self.assertIn("lts__d_sectors.avg.pct_of_peak_sustained_elapsed", metrics)
        for hidden in ("ID", "lts__d_sectors.max.pct_of_peak_sustained_elapsed",
                       "lts__d_sectors.sum.pct_of_peak_sustained_elapsed",
                       "gpu__time_duration.sum", STALL.format("wait")):
            self.assertNotIn(hidden, metrics)
        # Above or below the first kernel alike: a factor of 2.5 either way.
        self.assertAlmostEqual(ncu_compare.spread([40.0, 100.0]), 2.5)
        self.assertAlmostEqual(ncu_compare.spread([100.0, 40.0]), 2.5)
        self.assertEqual(ncu_compare.spread([0.0, 1.0]), float("inf"))
        self.assertEqual(ncu_compare.spread([3.0, 3.0, 3.0]), 1.0)

    def test_main_prints_labels_and_checks_names(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ncu_compare.main([self.path, "--names", "ours,fa4", "--differ", "10", "--markdown"])
        text = out.getvalue()
        self.assertIn("| metric | ours | fa4 |", text)
        self.assertIn("| stall: wait | 2.08 | 1.29 |", text)
        self.assertIn("| metric | unit | ours | fa4 | fa4 / ours |", text)
        self.assertIn("| dram__bytes.sum | Mbyte | 100 | 40 | 0.40 |", text)
        self.assertIn("| l1tex__data_bank_conflicts.avg |  | 7 | - | - |", text)
        # Plain text: columns aligned under the header.
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ncu_compare.main([self.path, "--names", "a,b"])
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0].split(), ["metric", "a", "b"])
        row = next(line for line in lines if line.startswith("duration (us)"))
        self.assertEqual(row.index("423.8"), lines[0].index("a"))
        with self.assertRaises(SystemExit) as e:
            ncu_compare.main([self.path, "--names", "one"])
        self.assertIn("1 labels for 2 kernels", str(e.exception.code))

    def test_one_kernel_is_shown_but_not_compared(self):
        single = write([HEADER, UNITS, ROW_A])
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                ncu_compare.main([single])
            self.assertIn("423.8", out.getvalue())
            with self.assertRaises(SystemExit) as e:
                ncu_compare.main([single, "--differ", "10"])
            self.assertIn("has one", str(e.exception.code))
            names, units, kernels = ncu_compare.read_report(single)
            with self.assertRaises(ValueError):
                ncu_compare.differing(names, units, kernels, 10)
        finally:
            os.unlink(single)

    def test_a_report_without_kernels_is_refused(self):
        empty = write([HEADER, UNITS])
        try:
            with self.assertRaises(ValueError):
                ncu_compare.read_report(empty)
            with self.assertRaises(SystemExit) as e:
                ncu_compare.main([empty])
            self.assertIn("kernel rows", str(e.exception.code))
        finally:
            os.unlink(empty)


if __name__ == "__main__":
    unittest.main()
