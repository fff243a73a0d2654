#!/usr/bin/env python3
"""tools/make_heuristic.py: every shipped choice table regenerates byte for byte from the sweeps
and options its header names, and the options behave as documented on sweeps written here."""

import csv
import glob
import os
import re
import subprocess
import sys
import tempfile
import unittest

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_TOOL = os.path.join(_ROOT, "tools", "make_heuristic.py")


def run_tool(args, cwd=_ROOT):
    return subprocess.run([sys.executable, _TOOL, *args], cwd=cwd, capture_output=True,
                          text=True)


def header_command(path):
    """The sweeps and options a table's header records."""
    sweeps, options = [], []
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f if line.startswith("#")]
    arch = re.match(r"# Kernel choice for sm_(\d+)", lines[0]).group(1)
    for line in lines[1:]:
        m = re.match(r"#   (\S+\.csv)$", line)
        if m:
            sweeps.append(m.group(1))
            continue
        m = re.match(r"# with (.*) \(a later sweep's", line)
        if m:
            options = m.group(1).split()
            continue
        m = re.match(r"# --exclude '(.*)'$", line)
        if m:
            options += ["--exclude", m.group(1)]
    return sweeps, ["--arch", arch, *options]


def write_sweep(path, rows):
    """rows: (kernel, head_dim, causal, seqlen, tflops)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "dtype", "head_dim", "causal", "seqlen", "batch", "heads", "ms",
                    "tflops"])
        for kernel, d, causal, s, tflops in rows:
            w.writerow([f"(BF16, {kernel}", "bf16", d, causal, s, 1, 1, 1.0, tflops])


def picks(path):
    with open(path) as f:
        return [line.split(" | ")[1].strip() for line in f if line.startswith("pick")]


class ShippedTables(unittest.TestCase):
    def test_every_table_regenerates_from_its_header(self):
        tables = glob.glob(os.path.join(_ROOT, "src", "cuda", "heuristic_sm*.txt"))
        self.assertTrue(tables, "no choice table found")
        for table in tables:
            sweeps, options = header_command(table)
            self.assertTrue(sweeps, f"{table}: header names no sweep")
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "table.txt")
                r = run_tool([*sweeps, *options, "--out", out])
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(out) as a, open(table) as b:
                    self.assertEqual(a.read(), b.read(), f"{table} differs from its sweeps")


class KeepEarlier(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.first = os.path.join(self.tmp.name, "first.csv")
        self.later = os.path.join(self.tmp.name, "later.csv")
        self.out = os.path.join(self.tmp.name, "table.txt")
        # Two pairs; the later sweep reverses both pairs' winners.
        write_sweep(self.first, [("64, a): x", 64, 0, 512, 300), ("64, b): x", 64, 0, 512, 200),
                                 ("64, a): x", 64, 1, 512, 300), ("64, b): x", 64, 1, 512, 200)])
        write_sweep(self.later, [("64, a): x", 64, 0, 512, 200), ("64, b): x", 64, 0, 512, 300),
                                 ("64, a): x", 64, 1, 512, 200), ("64, b): x", 64, 1, 512, 300)])

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_later_sweep_replaces_every_pair_by_default(self):
        r = run_tool([self.first, self.later, "--arch", "80", "--out", self.out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(picks(self.out), ["64, b): x", "64, b): x"])

    def test_a_kept_pair_keeps_the_first_sweeps_points(self):
        r = run_tool([self.first, self.later, "--arch", "80", "--keep-earlier", "64:1",
                      "--out", self.out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(picks(self.out), ["64, b): x", "64, a): x"])
        with open(self.out) as f:
            self.assertIn("--keep-earlier 64:1", f.read())

    def test_a_pair_only_a_later_sweep_has_is_taken_from_it(self):
        write_sweep(self.first, [("64, a): x", 64, 0, 512, 300)])
        r = run_tool([self.first, self.later, "--arch", "80", "--keep-earlier", "64:1",
                      "--out", self.out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(picks(self.out), ["64, b): x", "64, b): x"])

    def test_an_excluded_kernel_is_named_nowhere_and_recorded_in_the_header(self):
        r = run_tool([self.first, self.later, "--arch", "80", "--exclude", "64, b): x",
                      "--out", self.out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(picks(self.out), ["64, a): x", "64, a): x"])
        with open(self.out) as f:
            text = f.read()
        self.assertIn("# --exclude '64, b): x'", text)
        self.assertNotIn("| 64, b): x", text)

    def test_an_exclusion_that_names_no_kernel_is_refused(self):
        r = run_tool([self.first, "--arch", "80", "--exclude", "64, c): x", "--out", self.out])
        self.assertEqual(r.returncode, 2)
        self.assertIn("64, c): x", r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_a_malformed_pair_is_refused_by_name(self):
        r = run_tool([self.first, "--arch", "80", "--keep-earlier", "128", "--out", self.out])
        self.assertEqual(r.returncode, 2)
        self.assertIn("'128'", r.stderr)
        self.assertFalse(os.path.exists(self.out))


class ValueHeadDim(unittest.TestCase):
    def test_points_of_another_value_head_dim_get_their_own_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            sweep, out = os.path.join(tmp, "s.csv"), os.path.join(tmp, "t.txt")
            with open(sweep, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["kernel", "dtype", "head_dim", "causal", "seqlen", "batch", "heads",
                            "ms", "tflops", "head_dim_v"])
                # At 192 / 192 the 112-key tile wins; at 192 / 128 the 128-key one. An mma.sync
                # kernel timed at both is the fallback of 192 / 192 only (the choice takes those
                # rows for 192 / 128 too).
                for kernel, dv, tflops in [("192, 128, 112, 12): sm90+stages_2", 192, 500),
                                           ("192, 128, 128, 12): sm90+stages_2", 192, 0.5),
                                           ("192, 128, 64, 4): async", 192, 200),
                                           ("192, 128, 112, 12): sm90+stages_2", 128, 400),
                                           ("192, 128, 128, 12): sm90+stages_2", 128, 450),
                                           ("192, 128, 64, 4): async", 128, 300)]:
                    w.writerow([f"(BF16, {kernel}", "bf16", 192, 0, 512, 1, 1, 1.0, tflops, dv])
            r = run_tool([sweep, "--arch", "90", "--candidates", "1", "--out", out])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                rows = [line.strip() for line in f if not line.startswith("#")]
            self.assertEqual(rows, ["pick 192 0 512 | 192, 128, 112, 12): sm90+stages_2",
                                    "fallback 192 0 512 | 192, 128, 64, 4): async",
                                    "candidate 192 0 | 192, 128, 112, 12): sm90+stages_2",
                                    "pick 192:128 0 512 | 192, 128, 128, 12): sm90+stages_2",
                                    "candidate 192:128 0 | 192, 128, 128, 12): sm90+stages_2"])


class PadRows(unittest.TestCase):
    """Points at head dims below their kernels' (96 and 112 on d 128's) make the pad rows."""

    def table(self, *options):
        with tempfile.TemporaryDirectory() as tmp:
            sweep, out = os.path.join(tmp, "s.csv"), os.path.join(tmp, "t.txt")
            rows = []
            for s in (512, 1024):
                # At d 128 itself a wins; the mma.sync kernel m is the fallback.
                rows += [("128, a): sm90+x", 128, 0, s, 300), ("128, b): sm90+x", 128, 0, s, 200),
                         ("128, c): sm90+x", 128, 0, s, 100), ("128, m): async", 128, 0, s, 50)]
            for d in (96, 112):
                # Below it b wins at 512 and c at 1024; z, fastest, is not among the table's
                # kernels for d 128 (a pad row adds none to the build).
                rows += [("128, a): sm90+x", d, 0, 512, 100), ("128, b): sm90+x", d, 0, 512, 300),
                         ("128, c): sm90+x", d, 0, 512, 250), ("128, z): sm90+x", d, 0, 512, 900),
                         ("128, a): sm90+x", d, 0, 1024, 100), ("128, b): sm90+x", d, 0, 1024, 260),
                         ("128, c): sm90+x", d, 0, 1024, 300), ("128, z): sm90+x", d, 0, 1024, 900)]
            write_sweep(sweep, rows)
            r = run_tool([sweep, "--arch", "90", *options, "--out", out])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                return [line.strip() for line in f if line.startswith("pad")]

    def test_per_length_the_better_of_the_two_best_kernels(self):
        self.assertEqual(self.table(), ["pad 128 0 512 | 128, b): sm90+x",
                                        "pad 128 0 1024 | 128, c): sm90+x"])

    def test_one_pad_kernel_is_the_best_over_every_point(self):
        self.assertEqual(self.table("--pad-kernels", "1"), ["pad 128 0 512 | 128, b): sm90+x",
                                                            "pad 128 0 1024 | 128, b): sm90+x"])

    def test_twins_count_as_one_pad_kernel(self):
        # b and b+persistent run their pairs on one code (code_of): one --pad-kernels slot
        # holds both, so at 1024 the twin beats c.
        with tempfile.TemporaryDirectory() as tmp:
            sweep, out = os.path.join(tmp, "s.csv"), os.path.join(tmp, "t.txt")
            rows = []
            for s in (512, 1024):
                rows += [("128, b): sm90+x", 128, 0, s, 300),
                         ("128, b): sm90+x+persistent", 128, 0, s, 200),
                         ("128, c): sm90+x", 128, 0, s, 100), ("128, m): async", 128, 0, s, 50)]
            for d in (96, 112):
                rows += [("128, b): sm90+x", d, 0, 512, 300),
                         ("128, b): sm90+x+persistent", d, 0, 512, 100),
                         ("128, c): sm90+x", d, 0, 512, 200),
                         ("128, b): sm90+x", d, 0, 1024, 100),
                         ("128, b): sm90+x+persistent", d, 0, 1024, 300),
                         ("128, c): sm90+x", d, 0, 1024, 200)]
            write_sweep(sweep, rows)
            r = run_tool([sweep, "--arch", "90", "--pad-kernels", "1", "--out", out])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                pad = [line.strip() for line in f if line.startswith("pad")]
        self.assertEqual(pad, ["pad 128 0 512 | 128, b): sm90+x",
                               "pad 128 0 1024 | 128, b): sm90+x+persistent"])

    def test_a_zero_count_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = run_tool([os.path.join(tmp, "none.csv"), "--arch", "90", "--pad-kernels", "0",
                          "--out", os.path.join(tmp, "t.txt")])
            self.assertEqual(r.returncode, 2)
            self.assertIn("--pad-kernels 0", r.stderr)


if __name__ == "__main__":
    unittest.main()
