#!/usr/bin/env python3
"""tools/padded_dims.py: each padded dim is set against the smallest compiled dim above it at the
points both hold, value-dim rows are left out, and bad --compiled lists are refused by name."""

import csv
import os
import subprocess
import sys
import tempfile
import unittest

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_TOOL = os.path.join(_ROOT, "tools", "padded_dims.py")
_HEADER = ["kernel", "dtype", "head_dim", "causal", "seqlen", "batch", "heads", "ms", "tflops",
           "head_dim_v"]


def run_tool(args):
    return subprocess.run([sys.executable, _TOOL, *args], cwd=_ROOT, capture_output=True,
                          text=True)


class PaddedDims(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.csv = os.path.join(self.dir.name, "dims.csv")
        # (head_dim, head_dim_v, causal, seqlen, tflops)
        rows = [(72, 72, 0, 512, 270.0), (72, 72, 1, 512, 180.0), (72, 72, 0, 1024, 300.0),
                (80, 80, 0, 512, 300.0), (80, 80, 1, 512, 200.0),  # no 1024 point: left out
                (88, 88, 0, 512, 330.0), (96, 96, 0, 512, 400.0),
                (96, 72, 0, 512, 999.0),  # a value head dim below: not a padded-dim row
                (136, 136, 0, 512, 100.0)]  # no compiled dim above it in the file
        with open(self.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(_HEADER)
            for d, dv, causal, s, t in rows:
                w.writerow(["k", "bf16", d, causal, s, 16384 // s, 32, 1.0, t, dv])

    def tearDown(self):
        self.dir.cleanup()

    def test_ratios_against_the_next_compiled_dim(self):
        out = os.path.join(self.dir.name, "out.csv")
        r = run_tool([self.csv, "--compiled", "96,80,144", "--csv-out", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, newline="") as f:
            got = [(int(x["head_dim"]), int(x["compiled"]), int(x["causal"]), int(x["seqlen"]),
                    float(x["ratio"])) for x in csv.DictReader(f)]
        self.assertEqual(got, [(72, 80, 0, 512, 0.9), (72, 80, 1, 512, 0.9),
                               (88, 96, 0, 512, 0.825)])
        lines = r.stdout.splitlines()
        self.assertTrue(lines[1].split()[:5] == ["72", "80", "2", "0.900", "0.900"], lines)
        self.assertTrue(lines[2].split()[:5] == ["88", "96", "1", "0.825", "0.825"], lines)
        self.assertEqual(len(lines), 3)

    def test_bad_compiled_lists_are_refused(self):
        for bad in ("", "80,x", "0,96"):
            r = run_tool([self.csv, "--compiled", bad])
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertIn("--compiled", r.stderr)

    def test_nothing_to_compare_is_an_error(self):
        r = run_tool([self.csv, "--compiled", "512"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("holds no dim", r.stderr)


if __name__ == "__main__":
    unittest.main()
