#!/usr/bin/env python3
"""tools/build_times.py's summary of an nvcc --time log, on a log written here (no nvcc)."""

import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import unittest

_TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
sys.path.insert(0, _TOOLS)  # the tool imports ncu_compare, as it does run from tools/
_spec = importlib.util.spec_from_file_location("build_times",
                                               os.path.join(_TOOLS, "build_times.py"))
build_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_times)

HEADER = ("source file name , phase name , phase input files , phase output file , arch , tool, "
          "metric , unit")
SM80 = "/b/generated/fa_fwd_sm80_bf16_hd128_0.cu"
SM90 = "/b/generated/fa_fwd_sm90a_fp16_hd128_1.cu"
# Two kernel files of head dim 128 (one per family) and one other source: sm80's cicc runs once
# per arch (3000 + 2000 ms), its ptxas 500 ms; sm90's cicc 1500 ms, ptxas 1000 ms, gcc 250 ms in
# two rows; api.cu 0.5 s given in seconds; a header row repeated midway (a second nvcc's) and a
# row without a unit, both skipped.
LOG = [
    HEADER,
    f"{SM80} , cicc , a.ii , a.ptx , compute_80 , nvcc , 3000.0 , ms",
    f"{SM80} , cicc , a.ii , b.ptx , compute_90 , nvcc , 2000.0 , ms",
    f"{SM80} , ptxas , a.ptx , a.cubin , sm_80 , nvcc , 500.0 , ms",
    HEADER,
    f"{SM90} , gcc (preprocessing 4) , c.cu , c.ii , compute_90a , nvcc , 125.0 , ms",
    f"{SM90} , gcc (compiling) , c.cpp , c.o ,  , nvcc , 125.0 , ms",
    f"{SM90} , cicc , c.ii , c.ptx , compute_90a , nvcc , 1500.0 , ms",
    f"{SM90} , ptxas , c.ptx , c.cubin , sm_90a , nvcc , 1000.0 , ms",
    "/src/api.cu , cicc , d.ii , d.ptx , compute_90 , nvcc , 0.5 , s",
    "/src/api.cu , ptxas , d.ptx , d.cubin , sm_90 , nvcc , 7 ,",
]


def run(lines, *args):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "time.csv")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = build_times.main([path, *args])
        return status, out.getvalue(), err.getvalue()


def section(text, title):
    """The rows (lists of cells) of the table under `title:` in the text output."""
    lines = text.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [line.split() for line in lines[1:]]


class BuildTimesTest(unittest.TestCase):
    def test_totals_and_phases(self):
        status, out, _ = run(LOG)
        self.assertEqual(status, 0)
        self.assertIn("3 sources, 8.8 s of compile time", out)
        phases = {(r[0], r[1]): r[2:] for r in section(out, "phase")}
        self.assertEqual(phases[("cicc", "compute_80")], ["3.0", "34.3%"])
        self.assertEqual(phases[("cicc", "compute_90")], ["2.5", "28.6%"])  # sm80's and api.cu's
        self.assertEqual(phases[("gcc", "compute_90a")], ["0.1", "1.4%"])
        self.assertEqual(phases[("gcc", "-")], ["0.1", "1.4%"])  # a host phase has no arch
        self.assertNotIn(("ptxas", "sm_90"), phases)  # the row without a unit
        self.assertEqual(section(out, "phase")[0][:2], ["cicc", "compute_80"])  # largest first

    def test_kernel_files_by_family_and_dim(self):
        _, out, _ = run(LOG)
        rows = section(out, "kernel files")
        self.assertEqual(rows[0], ["sm80", "128", "1", "5.5", "5.0", "0.5"])
        self.assertEqual(rows[1], ["sm90a", "128", "1", "2.8", "1.5", "1.0"])
        self.assertEqual(rows[2], ["other", "-", "1", "0.5", "0.5", "0.0"])

    def test_file_names_with_and_without_a_dtype(self):
        # Since 2026-11-29 a file holds a head dim's dtypes together (no dtype in its name), and
        # the mma.sync tiles without sm_90 code are family "sm80no90".
        for name, family, dim in (("fa_fwd_sm80no90_hd256_0.cu", "sm80no90", "256"),
                                  ("fa_fwd_sm90a_hd64_2.cu", "sm90a", "64"),
                                  ("fa_fwd_sm80_bf16_hd128_0.cu", "sm80", "128")):
            m = build_times.KERNEL_FILE.search("/b/generated/" + name)
            self.assertIsNotNone(m, name)
            self.assertEqual((m["family"], m["dim"]), (family, dim))

    def test_top_files(self):
        _, out, _ = run(LOG, "--top", "2")
        rows = section(out, "files (top 2)")
        self.assertEqual([r[0] for r in rows], ["fa_fwd_sm80_bf16_hd128_0.cu",
                                                "fa_fwd_sm90a_fp16_hd128_1.cu"])

    def test_markdown(self):
        _, out, _ = run(LOG, "--markdown")
        self.assertIn("| phase | arch | seconds | share |", out)
        self.assertIn("| sm80 | 128 | 1 | 5.5 | 5.0 | 0.5 |", out)

    def test_a_log_without_timed_rows_fails(self):
        status, _, err = run([HEADER])
        self.assertEqual(status, 1)
        self.assertIn("no timed rows", err)


if __name__ == "__main__":
    unittest.main()
