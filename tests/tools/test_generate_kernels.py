#!/usr/bin/env python3
"""tools/generate_kernels.py's narrow head dims (FA_NARROW_HEAD_DIMS): each lands on the smallest
built head dim that holds it, in ascending order of work, as the registration's NarrowList on the
kernels of the choice table's pad rows; bad entries are refused by name, and the generated files
carry the pairs; the mma.sync family's prefill tiles get no sm_90 code where the Hopper family is
built."""

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

    def test_files_keep_twins_together_and_even(self):
        # d 128's 16-bit sm90 tiles: the non-persistent ones run their pairs on their persistent
        # twins' code (sm90_code), so each twin pair lands in one file, where it compiles once.
        names = ["128, 128, 128, 12): sm90+stages_2+overlap",
                 "128, 128, 128, 12): sm90+stages_2+overlap+persistent",
                 "128, 128, 128, 12): sm90+stages_2+overlap+pingpong",
                 "128, 128, 128, 12): sm90+stages_2+overlap+pingpong+persistent",
                 "128, 128, 128, 12): sm90+stages_3+overlap+pingpong+persistent",
                 "128, 128, 176, 12): sm90+stages_2+overlap",
                 "128, 128, 176, 12): sm90+stages_2+overlap+persistent"]
        members = [gen.parse_short_name("(BF16, " + n) for n in names]
        parts = gen.file_parts(members, 3)
        self.assertEqual(sorted(c for part in parts for c in part), sorted(members))
        self.assertEqual([len(part) for part in parts], [2, 3, 2])
        for part in parts:
            codes = {gen.sm90_code(c) for c in part}
            self.assertTrue(all(gen.sm90_code(c) not in codes
                                for other in parts if other is not part for c in other))
        # An e4m3 tile is its own code; the even split holds without twins.
        fp8 = gen.parse_short_name("(E4M3, 128, 128, 128, 12): sm90+stages_2+overlap")
        self.assertEqual(gen.sm90_code(fp8), fp8)
        self.assertEqual([len(p) for p in gen.file_parts(members[2:5] + [fp8], 2)], [2, 2])

    def test_registrations_carry_the_pairs(self):
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([sys.executable, _TOOL, "--out", out, "--dtypes", "bf16;e4m3",
                                "--head-dims", "128", "--narrow-head-dims", "80;96", "--sm90",
                                "--choice-tables",
                                os.path.join(_ROOT, "src", "cuda", "heuristic_sm90.txt")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            text = "".join(open(p).read() for p in glob.glob(os.path.join(out, "*.cu")))
            lines = text.splitlines()
            sm90 = [l for l in lines if "sm90::register_kernel" in l]
            with_pairs = [l for l in sm90 if "NarrowList{2, {{80, 80}, {96, 96}}}" in l]
            # The kernels of the table's pad rows of d 128 carry them, no other bf16 one; the
            # FP8 kernels (e4m3 Q, K and V) take none; the mma.sync family has no argument.
            table = gen.read_choice_table(os.path.join(_ROOT, "src", "cuda", "heuristic_sm90.txt"))
            pad = {row[5].short_name() for row in table if row[0] == "pad" and row[1] == 128}
            self.assertTrue(pad)
            named = {lines[i - 1].removeprefix("  // ") for i, l in enumerate(lines)
                     if l in with_pairs}
            self.assertEqual(named, pad)
            self.assertTrue(all("DType::kE4M3" in l or "DType::kBF16" in l for l in sm90))
            self.assertTrue(all("NarrowList" not in l for l in sm90 if "DType::kE4M3" in l))
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


class PairPlacement(unittest.TestCase):
    """kernel_pairs(): the narrow pairs go on the kernels of the table's pad rows."""

    def setUp(self):
        k = lambda name: gen.parse_short_name("(BF16, " + name)  # noqa: E731
        self.pad = k("128, 128, 128, 12): sm90+stages_2+overlap")
        self.other = k("128, 128, 128, 12): sm90+stages_2+overlap+persistent")
        self.d192 = k("192, 128, 96, 12): sm90+stages_2+overlap")
        self.d192_v128 = k("192, 128, 96, 12): sm90+stages_2+overlap+pingpong")
        self.tables = {90: [("pick", 64, 64, 0, 512, k("64, 128, 128, 12): sm90+stages_2")),
                            ("pick", 128, 128, 0, 512, self.other),
                            ("candidate", 128, 128, 0, None, self.pad),
                            ("pad", 128, 128, 0, 512, self.pad),
                            ("pick", 192, 192, 0, 512, self.d192),
                            ("pick", 192, 128, 0, 512, self.d192_v128)]}
        self.by_dim = gen.narrow_pairs(gen.parse_narrow(gen.DEFAULT_NARROW_HEAD_DIMS),
                                       [64, 128, 192, 256])

    def pairs(self, c, by_dim=None, dtype="fp16"):
        c = gen.with_dtype(c, gen.DTYPE_CODES[dtype])  # the table's dtype is a placeholder
        return gen.kernel_pairs(c, by_dim or self.by_dim, self.tables)

    def test_the_pad_rows_kernels_carry_every_pair_the_others_none(self):
        self.assertEqual(self.pairs(self.pad), self.by_dim[128])
        self.assertEqual(self.pairs(self.other), [])

    def test_a_head_dim_without_pad_rows_puts_them_on_every_kernel(self):
        self.assertEqual(self.pairs(self.d192), self.by_dim[192])

    def test_pad_rows_for_one_mask_of_two_put_them_on_every_kernel(self):
        # Causal d 128 problems would take the picks (no causal pad rows): any kernel.
        self.tables[90].append(("pick", 128, 128, 1, 512, self.other))
        self.assertEqual(self.pairs(self.other), self.by_dim[128])
        self.tables[90].append(("pad", 128, 128, 1, 512, self.pad))
        self.assertEqual(self.pairs(self.other), [])

    def test_a_kernel_of_a_value_head_dims_rows_carries_that_pair(self):
        self.tables[90].append(("pad", 192, 192, 0, 512, self.d192))
        self.assertEqual(self.pairs(self.d192), self.by_dim[192])
        self.assertEqual(self.pairs(self.d192_v128), [(192, 128)])

    def test_pairs_the_table_sends_to_a_smaller_dim_go_on_every_kernel(self):
        # A build without d 64: its pairs land on d 128, where the choice runs them on any
        # kernel (the table's d 64 rows name kernels the build lacks).
        by_dim = gen.narrow_pairs(gen.parse_narrow(gen.DEFAULT_NARROW_HEAD_DIMS), [128, 256])
        self.assertEqual(self.pairs(self.other, by_dim), [(16, 16), (32, 32), (48, 48), (64, 64)])
        self.assertEqual(self.pairs(self.pad, by_dim), by_dim[128])


class MmaSyncOnSm90(unittest.TestCase):
    """With the Hopper family, the mma.sync prefill tiles go to sources_sm80_no90.txt (compiled
    for the other archs), its decode tiles stay in sources_sm80.txt (every arch)."""

    def generate(self, out, *extra):
        r = subprocess.run([sys.executable, _TOOL, "--out", out, "--dtypes", "bf16",
                            "--head-dims", "128;256", "--choice-tables",
                            os.path.join(_ROOT, "src", "cuda", "heuristic_sm90.txt"), *extra],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        kernels = open(os.path.join(out, "kernels.txt")).read().splitlines()
        def names(listing):
            text = "".join(open(p).read() for p in open(os.path.join(out, listing)).read().split()
                           if p.endswith(".cu"))
            return {l.removeprefix("  // ") for l in text.splitlines() if l.startswith("  // (")}
        return kernels, names("sources_sm80.txt"), names("sources_sm80_no90.txt")

    def prefill_built(self, out):
        return open(os.path.join(out, "mma_sync_prefill.txt")).read()

    def test_prefill_tiles_skip_sm90_decode_tiles_do_not(self):
        with tempfile.TemporaryDirectory() as out:
            kernels, every, no90 = self.generate(out, "--sm90", "--archs", "80;90")
            mma = {k for k in kernels if "sm90" not in k}
            self.assertEqual(every | no90, mma)
            self.assertFalse(every & no90)
            # 64 query rows on 4 warps: the decode tiles (sm80/family.cpp's decode_rank).
            tiles = lambda names: [gen.parse_short_name(k) for k in names]  # noqa: E731
            self.assertTrue(every and all(c.B_r == 64 and c.n_warps == 4 for c in tiles(every)))
            self.assertTrue(no90 and all(c.B_r != 64 for c in tiles(no90)))
            # The table's fallback rows name them: d 128's 128 x 64 tile, d 256's two.
            self.assertIn("(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles", no90)
            self.assertEqual(self.prefill_built(out), "ON\n")

    def test_without_the_hopper_family_or_with_all_every_tile_is_everywhere(self):
        for extra in (["--archs", "80;90"], ["--sm90", "--archs", "80;90", "--mma-sync-sm90", "all"]):
            with tempfile.TemporaryDirectory() as out:
                kernels, every, no90 = self.generate(out, *extra)
                self.assertEqual(no90, set())
                self.assertEqual(every, {k for k in kernels if "sm90" not in k})
                self.assertEqual(self.prefill_built(out), "ON\n")

    def test_sm90_alone_leaves_the_prefill_tiles_out(self):
        with tempfile.TemporaryDirectory() as out:
            kernels, every, no90 = self.generate(out, "--sm90", "--archs", "90")
            self.assertEqual(no90, set())
            self.assertTrue(every)
            self.assertTrue(all(gen.parse_short_name(k).B_r == 64 for k in every))
            self.assertEqual(self.prefill_built(out), "OFF\n")


if __name__ == "__main__":
    unittest.main()
