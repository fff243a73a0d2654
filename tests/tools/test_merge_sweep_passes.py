#!/usr/bin/env python3
"""tools/merge_sweep_passes.py: every shipped merged sweep regenerates byte for byte from its
passes (docs/data/<name>-pass<N>.csv), the means are the passes' means, and passes that do not
hold the same points are refused by name with nothing written."""

import collections
import csv
import glob
import os
import re
import subprocess
import sys
import tempfile
import unittest

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_TOOL = os.path.join(_ROOT, "tools", "merge_sweep_passes.py")
_HEADER = ["kernel", "dtype", "head_dim", "causal", "seqlen", "batch", "heads", "ms", "tflops"]


def run_tool(args):
    return subprocess.run([sys.executable, _TOOL, *args], cwd=_ROOT, capture_output=True,
                          text=True)


def write_pass(path, rows, value_dims=None):
    """rows: (kernel, seqlen, ms, tflops) at d 64, non-causal; with value_dims, a head_dim_v
    column holding value_dims[i] for row i."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(_HEADER + (["head_dim_v"] if value_dims else []))
        for i, (kernel, s, ms, tflops) in enumerate(rows):
            w.writerow([kernel, "bf16", 64, 0, s, 16384 // s, 32, ms, tflops] +
                       ([value_dims[i]] if value_dims else []))


class ShippedSweeps(unittest.TestCase):
    def test_every_merged_sweep_regenerates_from_its_passes(self):
        groups = collections.defaultdict(list)
        for path in glob.glob(os.path.join(_ROOT, "docs", "data", "*-pass[0-9]*.csv")):
            m = re.fullmatch(r"(.*)-pass(\d+)\.csv", path)
            if m:
                groups[m.group(1) + ".csv"].append((int(m.group(2)), path))
        self.assertTrue(groups, "no sweep passes found under docs/data")
        for merged, passes in groups.items():
            self.assertTrue(os.path.exists(merged), f"{merged}: passes without their merge")
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "merged.csv")
                r = run_tool([*(p for _, p in sorted(passes)), "--out", out])
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(out) as a, open(merged) as b:
                    self.assertEqual(a.read(), b.read(), f"{merged} differs from its passes")


class Merge(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.a = os.path.join(self.tmp.name, "a.csv")
        self.b = os.path.join(self.tmp.name, "b.csv")
        self.out = os.path.join(self.tmp.name, "out.csv")

    def tearDown(self):
        self.tmp.cleanup()

    def assert_refused(self, *said):
        """Merging a and b fails with status 2, says each of `said`, and writes nothing."""
        r = run_tool([self.a, self.b, "--out", self.out])
        self.assertEqual(r.returncode, 2, r.stderr)
        for text in said:
            self.assertIn(text, r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_each_point_is_the_mean_of_the_passes_in_the_first_passes_order(self):
        write_pass(self.a, [("k2", 512, 0.5, 300.0), ("k1", 512, 0.25, 600.0)])
        write_pass(self.b, [("k1", 512, 0.75, 200.0), ("k2", 512, 0.25, 500.0)])
        r = run_tool([self.a, self.b, "--out", self.out])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out, newline="") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(x["kernel"], x["ms"], x["tflops"]) for x in rows],
                         [("k2", "0.3750", "400.0"), ("k1", "0.5000", "400.0")])

    def test_a_point_missing_from_a_pass_is_refused_by_name(self):
        write_pass(self.a, [("k1", 512, 0.5, 300.0), ("k1", 1024, 0.5, 300.0)])
        write_pass(self.b, [("k1", 512, 0.5, 300.0)])
        self.assert_refused("'1024'", "lacks")

    def test_a_point_only_a_later_pass_has_is_refused(self):
        write_pass(self.a, [("k1", 512, 0.5, 300.0)])
        write_pass(self.b, [("k1", 512, 0.5, 300.0), ("k3", 512, 0.5, 300.0)])
        self.assert_refused("'k3'")

    def test_a_cut_short_row_is_refused_by_line(self):
        write_pass(self.a, [("k1", 512, 0.5, 300.0), ("k1", 1024, 0.5, 300.0)])
        write_pass(self.b, [("k1", 512, 0.5, 300.0), ("k1", 1024, 0.5, 300.0)])
        with open(self.b) as f:
            text = f.read()
        with open(self.b, "w") as f:
            f.write(text[: text.rindex(",", 0, len(text) - 1)] + "\n")  # drop the last field
        self.assert_refused("b.csv:3")

    def test_a_point_twice_in_one_pass_is_refused(self):
        write_pass(self.a, [("k1", 512, 0.5, 300.0), ("k1", 512, 0.4, 310.0)])
        write_pass(self.b, [("k1", 512, 0.5, 300.0)])
        self.assert_refused("twice")

    def test_points_of_two_value_head_dims_stay_apart_and_keep_the_column(self):
        write_pass(self.a, [("k1", 512, 0.5, 300.0), ("k1", 512, 0.25, 600.0)], [64, 32])
        write_pass(self.b, [("k1", 512, 0.25, 600.0), ("k1", 512, 0.75, 200.0)], [32, 64])
        r = run_tool([self.a, self.b, "--out", self.out])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out, newline="") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(x["head_dim_v"], x["ms"], x["tflops"]) for x in rows],
                         [("64", "0.6250", "250.0"), ("32", "0.2500", "600.0")])

    def test_passes_with_and_without_the_value_head_dim_are_refused(self):
        write_pass(self.a, [("k1", 512, 0.5, 300.0)], [64])
        write_pass(self.b, [("k1", 512, 0.5, 300.0)])
        self.assert_refused("lacks the column head_dim_v")

    def test_one_pass_alone_is_refused(self):
        write_pass(self.a, [("k1", 512, 0.5, 300.0)])
        r = run_tool([self.a, "--out", self.out])
        self.assertEqual(r.returncode, 2)
        self.assertIn("two passes", r.stderr)
        self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
    unittest.main()
