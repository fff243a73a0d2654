#!/usr/bin/env python3
"""tools/compile_sm90.py's reading of ptxas -v and its comparison of two runs, on logs and files
written here (no nvcc, no GPU)."""

import csv
import importlib.util
import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                     "compile_sm90.py")
_spec = importlib.util.spec_from_file_location("compile_sm90", _TOOL)
compile_sm90 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_sm90)

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_K1' for 'sm_90a'
ptxas info    : Function properties for _K1
    128 bytes stack frame, 188 bytes spill stores, 208 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers, 128 bytes cumulative stack size
ptxas info    : Compiling entry function '_K2' for 'sm_90a'
ptxas info    : Function properties for _K2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for _K3
ptxas info    : Used 40 registers
"""


def write_run(folder, spills, cubins):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "spills.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["function", "file", "spill_stores", "spill_loads",
                                          "stack_bytes"])
        w.writeheader()
        for name, stores in spills.items():
            w.writerow({"function": name, "file": "a.cubin", "spill_stores": stores,
                        "spill_loads": stores, "stack_bytes": stores})
    for name, data in cubins.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


class PtxasLog(unittest.TestCase):
    def test_spills_per_function(self):
        # _K3 has properties but no spill line: not reported rather than guessed.
        self.assertEqual(compile_sm90.ptxas_spills(LOG), {"_K1": (188, 208, 128), "_K2": (0, 0, 0)})

    def test_summary_counts_spilling_kernels_and_bytes(self):
        rows = {"a": {"spill_stores": "0"}, "b": {"spill_stores": "12"}, "c": {"spill_stores": "4"}}
        self.assertEqual(compile_sm90.summary(rows), (3, 2, 16))


class Compare(unittest.TestCase):
    def test_changed_kernels_and_identical_cubins(self):
        with tempfile.TemporaryDirectory() as tmp:
            base, this = os.path.join(tmp, "base"), os.path.join(tmp, "this")
            write_run(base, {"_K1": 188, "_K2": 0, "_Gone": 8},
                      {"same.cubin": b"\x01\x02", "diff.cubin": b"\x01"})
            write_run(this, {"_K1": 100, "_K2": 0, "_New": 4},
                      {"same.cubin": b"\x01\x02", "diff.cubin": b"\x02"})
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(compile_sm90.compare(this, base), 0)
            text = out.getvalue()
            self.assertIn("   188 -> 100    _K1", text)
            self.assertIn("     8 -> -      _Gone", text)
            self.assertIn("     - -> 4      _New", text)
            self.assertNotIn("_K2", text)  # unchanged
            self.assertIn("base: 3 kernels, 2 spill, 196 bytes; this: 3 kernels, 2 spill, 104 "
                          "bytes", text)
            self.assertIn("cubins byte for byte the base's: same.cubin\n", text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
