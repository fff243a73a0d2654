#!/usr/bin/env python3
"""tools/generate_kernels.py's narrow head dims (FA_NARROW_HEAD_DIMS): each lands on the smallest
built head dim that holds it, in ascending order of work, as the registration's NarrowList; bad
entries are refused by name, and the generated files carry the pairs."""

import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_TOOL = os.path.join(_ROOT, "tools", "generate_kernels.py")
_spec = importlib.util.spec_from_file_location("generate_kernels", _TOOL)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


class NarrowHeadDims(unittest.TestCase):
    def test_entries_round_s_up_to_16_columns(self):
        self.assertEqual(gen.parse_narrow("40;80;192:128;8;;80"),
                         [(16, 8), (48, 40), (80, 80), (192, 128)])

    def test_bad_entries_are_refused_by_name(self):
        for bad in ("12", "264", "0", "x", "128:136", "96:", "1:2:3", "-8"):
            with self.assertRaises(ValueError) as e:
                gen.parse_narrow(f"80;{bad}")
            self.assertIn(f"'{bad}'", str(e.exception))

    def test_pairs_go_to_the_smallest_built_dim_that_holds_them(self):
        pairs = gen.parse_narrow(gen.DEFAULT_NARROW_HEAD_DIMS)
        by_dim = gen.narrow_pairs(pairs, [64, 128, 192, 256])
        self.assertEqual(by_dim[64], [(16, 16), (32, 32), (48, 48), (64, 64)])
        self.assertEqual(by_dim[128], [(80, 80), (96, 96), (112, 112), (128, 128)])
        self.assertEqual(by_dim[192], [(144, 144), (160, 160), (192, 128), (176, 176), (192, 192)])
        self.assertEqual(by_dim[256], [(224, 224), (256, 256)])
        # Without d 64 and 192 their pairs move up; a built dim's own (128) is its pair at the
        # kernel's width.
        by_dim = gen.narrow_pairs(gen.parse_narrow("40;96;128;160;192:128"), [128, 256])
        self.assertEqual(by_dim, {128: [(48, 40), (96, 96), (128, 128)],
                                  256: [(160, 160), (192, 128)]})
        self.assertEqual(gen.narrow_pairs(gen.parse_narrow("128"), [256]), {256: [(128, 128)]})
        # Above every built dim: dropped.
        self.assertEqual(gen.narrow_pairs(gen.parse_narrow("224"), [64, 128]), {})

    def test_more_pairs_than_a_list_holds_are_refused(self):
        # The default fits a build of any one head dim (every pair on it).
        for d in gen.SUPPORTED_HEAD_DIMS:
            by_dim = gen.narrow_pairs(gen.parse_narrow(gen.DEFAULT_NARROW_HEAD_DIMS), [d])
            self.assertLessEqual(len(by_dim.get(d, [])), gen.MAX_NARROW_PAIRS)
        many = ";".join(f"{d}:{dv}" for d in range(136, 256, 8) for dv in (40, 72, 104, 128))
        with self.assertRaises(ValueError) as e:
            gen.narrow_pairs(gen.parse_narrow(many), [256])
        self.assertIn("head dim 256", str(e.exception))

    def test_registrations_carry_the_pairs(self):
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([sys.executable, _TOOL, "--out", out, "--dtypes", "bf16;e4m3",
                                "--head-dims", "128", "--narrow-head-dims", "80;96", "--sm90",
                                "--choice-tables",
                                os.path.join(_ROOT, "src", "cuda", "heuristic_sm90.txt")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            text = "".join(open(p).read() for p in glob.glob(os.path.join(out, "*.cu")))
            sm90 = [l for l in text.splitlines() if "sm90::register_kernel" in l]
            with_pairs = [l for l in sm90 if "NarrowList{2, {{80, 80}, {96, 96}}}" in l]
            self.assertTrue(with_pairs)
            # The FP8 kernels (e4m3 Q, K and V) take none; the mma.sync family has no argument.
            self.assertTrue(all("DType::kE4M3" in l for l in sm90 if l not in with_pairs))
            self.assertNotIn("NarrowList", "".join(l for l in text.splitlines()
                                                    if "sm80::register_kernel" in l))
            r = subprocess.run([sys.executable, _TOOL, "--out", out, "--head-dims", "128",
                                "--narrow-head-dims", "80;84"], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("'84'", r.stderr)
            # A build of one head dim without the sm90 family (the packages' reduced build) and
            # one with it both take the default list.
            for extra in ([], ["--sm90"]):
                r = subprocess.run([sys.executable, _TOOL, "--out", out, "--head-dims", "128",
                                    "--dtypes", "bf16", *extra], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
