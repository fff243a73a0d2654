#!/usr/bin/env python3
"""tools/bench_clocks.py's point parsing, its reading of a flashattn_bench CSV call and its
per-point summary (medians, ratios to the first dtype, share of the tensor peak per clock), on
data written here (no GPU, no nvidia-smi)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import bench_clocks  # noqa: E402

BENCH_OUT = """kernel,dtype,head_dim,causal,seqlen,batch,heads,ms,tflops,head_dim_v
"(E4M3, 128, 128, 192, 12): sm90+stages_2+overlap+persistent",e4m3,128,0,8192,2,16,1.2268,896.2,128
"""


def row(r, d, s, c, dt, tf, mhz, w):
    return dict(round=r, head_dim=d, seqlen=s, causal=c, dtype=dt, tflops=tf, sm_mhz=mhz,
                watts=w, samples=10, reasons="0x4", kernel="k")


class Points(unittest.TestCase):
    def test_parses_each_point(self):
        self.assertEqual(bench_clocks.parse_points("128:2048:0,256:8192:1"),
                         [(128, 2048, 0), (256, 8192, 1)])

    def test_refuses_bad_entries(self):
        for text in ("128:2048", "128:2048:2", "128:2048:01", "a:1:0", ""):
            with self.assertRaises(ValueError):
                bench_clocks.parse_points(text)


class BenchOutput(unittest.TestCase):
    def test_reads_the_csv_row_with_commas_in_the_kernel(self):
        tf, kernel = bench_clocks.bench_tflops(BENCH_OUT)
        self.assertEqual(tf, 896.2)
        self.assertEqual(kernel, "(E4M3, 128, 128, 192, 12): sm90+stages_2+overlap+persistent")

    def test_takes_the_last_row(self):
        two = BENCH_OUT + '"(E4M3, 128, 128, 128, 12): sm90",e4m3,128,0,2048,8,16,0.37,750.1,128\n'
        self.assertEqual(bench_clocks.bench_tflops(two), (750.1, "(E4M3, 128, 128, 128, 12): sm90"))

    def test_refuses_output_without_a_row(self):
        with self.assertRaises(ValueError):
            bench_clocks.bench_tflops("libflashattn 0.3.0 on NVIDIA H200\n")


class Span(unittest.TestCase):
    def test_the_timed_windows_past_the_settling_less_the_exit(self):
        # A call of 10 s whose two 1.5 s windows end at its return: samples from 1 s into them.
        start, end = bench_clocks.sampled_span(100.0, 110.0, 1500.0, 1000.0)
        self.assertAlmostEqual(start, 108.0)
        self.assertAlmostEqual(end, 109.9)

    def test_never_before_the_call_and_never_empty(self):
        start, end = bench_clocks.sampled_span(100.0, 101.0, 1500.0, 0.0)
        self.assertEqual((start, end), (100.0, 100.9))
        start, end = bench_clocks.sampled_span(100.0, 101.0, 100.0, 5000.0)
        self.assertAlmostEqual(end - start, 0.05)


class Summary(unittest.TestCase):
    def test_medians_and_ratios_to_the_first_dtype(self):
        rows = [row(0, 128, 8192, 0, "bf16", 600.0, 1600.0, 690.0),
                row(1, 128, 8192, 0, "bf16", 620.0, 1700.0, 692.0),
                row(2, 128, 8192, 0, "bf16", 640.0, 1650.0, 691.0),
                row(0, 128, 8192, 0, "e4m3", 900.0, 1800.0, 690.0),
                row(1, 128, 8192, 0, "e4m3", 880.0, 1820.0, 691.0),
                row(2, 128, 8192, 0, "e4m3", 910.0, 1810.0, 689.0)]
        got = bench_clocks.summary(rows, ["bf16", "e4m3"], 132)
        self.assertEqual([g["dtype"] for g in got], ["bf16", "e4m3"])
        bf16, e4m3 = got
        self.assertEqual((bf16["tflops"], bf16["sm_mhz"], bf16["watts"]), (620.0, 1650.0, 691.0))
        self.assertEqual((e4m3["tflops"], e4m3["sm_mhz"]), (900.0, 1810.0))
        self.assertAlmostEqual(e4m3["speed"], 900.0 / 620.0)
        self.assertAlmostEqual(e4m3["clock"], 1810.0 / 1650.0)
        self.assertAlmostEqual(e4m3["per_clock"], (900.0 / 620.0) / (1810.0 / 1650.0))
        self.assertAlmostEqual(bf16["speed"], 1.0)
        # 620 TFLOP/s at 1650 MHz on 132 SMs of 4096 FLOP a cycle; e4m3's peak is 8192.
        self.assertAlmostEqual(bf16["of_peak_per_clock"], 620e12 / (1650e6 * 132 * 4096))
        self.assertAlmostEqual(e4m3["of_peak_per_clock"], 900e12 / (1810e6 * 132 * 8192))

    def test_calls_without_samples_are_left_out_and_points_keep_their_order(self):
        rows = [row(0, 256, 2048, 1, "e4m3", 800.0, 1700.0, 690.0),
                row(0, 128, 512, 0, "e4m3", 500.0, "", ""),
                row(0, 128, 512, 0, "e4m3", 510.0, 1900.0, 650.0)]
        got = bench_clocks.summary(rows, ["bf16", "e4m3"], 132)
        self.assertEqual([g["point"] for g in got], [(256, 2048, 1), (128, 512, 0)])
        self.assertEqual(got[1]["tflops"], 510.0)
        self.assertNotIn("speed", got[0])  # no bf16 call at that point


if __name__ == "__main__":
    unittest.main()
