#!/usr/bin/env python3
"""tools/dtype_clocks.py's reading of nvidia-smi's samples and its per-window means, on sample
files written here (no GPU, no nvidia-smi, no torch)."""

import datetime
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import dtype_clocks  # noqa: E402


def stamp(seconds):
    """nvidia-smi's timestamp for `seconds` past 10:00:00 on a fixed day, local time."""
    t = datetime.datetime(2026, 11, 29, 10, 0, 0) + datetime.timedelta(seconds=seconds)
    return t.strftime("%Y/%m/%d %H:%M:%S.") + "%03d" % (t.microsecond // 1000)


class Samples(unittest.TestCase):
    def parse(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(text)
        try:
            return dtype_clocks.samples(f.name)
        finally:
            os.unlink(f.name)

    def test_rows_with_and_without_reasons(self):
        got = self.parse(f"{stamp(0.0)}, 1980, 120.50, 40, 0x0000000000000001\n"
                         f"{stamp(0.02)}, 1755, 689.90, 52\n")
        self.assertEqual(len(got), 2)
        self.assertAlmostEqual(got[1][0] - got[0][0], 0.02, places=6)
        self.assertEqual(got[0][1:], (1980.0, 120.5, "0x0000000000000001"))
        self.assertEqual(got[1][1:], (1755.0, 689.9, ""))

    def test_unreadable_lines_are_skipped(self):
        got = self.parse("timestamp, clocks.sm [MHz]\n"
                         f"{stamp(1.0)}, [N/A], 500.0, 40\n"
                         "\n"
                         f"{stamp(1.5)}, 1600, 650.0, 60, 0x4\n")
        self.assertEqual([g[1] for g in got], [1600.0])


class WindowStats(unittest.TestCase):
    def test_means_over_the_window_past_its_first_50_ms(self):
        base = 1000.0
        got = [(base + 0.01, 100.0, 10.0, "a"),   # inside the first 50 ms: left out
               (base + 0.10, 1500.0, 600.0, "0x4"),
               (base + 0.20, 1700.0, 700.0, "0x4"),
               (base + 0.30, 1600.0, 650.0, "0x1"),
               (base + 0.50, 9999.0, 1.0, "z")]   # after the window
        mhz, watts, n, reasons = dtype_clocks.window_stats(got, base, base + 0.4)
        self.assertEqual((mhz, watts, n), (1600.0, 650.0, 3))
        self.assertEqual(reasons, "0x1 0x4")

    def test_no_sample_inside(self):
        self.assertEqual(dtype_clocks.window_stats([(5.0, 1.0, 1.0, "")], 0.0, 1.0),
                         ("", "", 0, ""))


class Sampling(unittest.TestCase):
    """The sampler is stopped when the block ends, also when it raises (nvidia-smi stood in
    for by an object that records its stop)."""

    def setUp(self):
        self.stopped = []
        test = self

        class FakeSmi:
            def terminate(self):
                test.stopped.append("terminate")

            def wait(self):
                test.stopped.append("wait")

        self.saved = dtype_clocks.sampler, dtype_clocks.time.sleep
        dtype_clocks.sampler = lambda path: FakeSmi()
        dtype_clocks.time.sleep = lambda seconds: None

    def tearDown(self):
        dtype_clocks.sampler, dtype_clocks.time.sleep = self.saved

    def test_stops_after_the_block(self):
        with dtype_clocks.sampling("unused.csv"):
            self.assertEqual(self.stopped, [])
        self.assertEqual(self.stopped, ["terminate", "wait"])

    def test_stops_when_the_block_raises(self):
        with self.assertRaises(SystemExit):
            with dtype_clocks.sampling("unused.csv"):
                raise SystemExit("a benchmark call failed")
        self.assertEqual(self.stopped, ["terminate", "wait"])


if __name__ == "__main__":
    unittest.main()
