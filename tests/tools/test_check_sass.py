#!/usr/bin/env python3
"""tools/check_sass.py's reading of SASS, on listings written here in cuobjdump's format (so it
runs without cuobjdump or a GPU): the key-loop shapes it must pass and the ones it must fail (the
softmax's place, descriptors moved into uniform registers per HGMMA, local memory), and the
command line with --csv over a stand-in cuobjdump."""

import csv
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                     "check_sass.py")
_spec = importlib.util.spec_from_file_location("check_sass", _TOOL)
check_sass = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_sass)


def mangled(d=128, b_c=128, consumers=2, overlap=1, pingpong=0, persistent=1, general=0,
            narrow=(0, 0), e4m3=0, dtype=2):
    """An sm90 forward kernel's mangled name, as nvcc spells it."""
    return ("_ZN2fa4cuda4sm9014forward_kernelINS1_4TileILNS_5DTypeE%dELi%dELi%dELi2ELi%dELb%dELb%d"
            "ELb%dEEELb%dELi%dELi%dELb%dEEEvNS1_6ParamsE" % (dtype, d, b_c, consumers, overlap,
                                                           pingpong, persistent, general,
                                                           narrow[0], narrow[1], e4m3))


def listing(functions):
    """cuobjdump -sass text: (name, [instruction, ...]) pairs, addresses made up."""
    out = ["", "Fatbin elf code:", "================", "arch = sm_90a", ""]
    for name, body in functions:
        out.append("\t\tFunction : " + name)
        out.append("\t.headerflags\t@\"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS\"")
        for i, ins in enumerate(body):
            out.append("        /*%04x*/                   %s ;   /* 0x000000000000794d */" %
                       (16 * i, ins))
        out.append("        ..........")
    return "\n".join(out) + "\n"


W1 = "WARPGROUP.DEPBAR.LE gsb0, 0x1"
W0 = "WARPGROUP.DEPBAR.LE gsb0, 0x0"
QK = "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24, gsb0"
EXP = "MUFU.EX2 R26, R26"


def loop(exps_under, exps_after):
    """A key loop: Q K^T and P V issued, the wait for Q K^T, `exps_under` exponentials, the wait
    for P V in both arms of a branch, `exps_after` exponentials, then the next issue."""
    return ([QK, QK, W1] + [EXP] * exps_under + ["@P0 BRA 0x100", W0, "BRA 0x200", W0] +
            [EXP] * exps_after + ["F2FP.BF16.F32.PACK_AB R120, R25, R24", QK])


FP8_QK = "QGMMA.64x128x32.F32.E4M3.E4M3 R24, R96, gdesc[UR16], R24, gsb0"
MAX = "FMNMX R11, R24, R11, !PT"


def fp8_loop(maxima, exps_under, exps_after):
    """An FP8 kernel's key loop: Q K^T and P V issued (QGMMA), the wait for Q K^T, `maxima`
    FMNMX and `exps_under` exponentials, the wait for P V in both arms of a branch,
    `exps_after` exponentials and P's packing, then the next issue."""
    return ([FP8_QK, FP8_QK, W1] + [MAX] * maxima + [EXP] * exps_under +
            ["@P0 BRA 0x100", W0, "BRA 0x200", W0] + [EXP] * exps_after +
            ["F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R152, R153, RZ, RZ", FP8_QK])


class KernelRows(unittest.TestCase):
    def rows(self, functions, frames=None):
        return check_sass.kernel_rows(listing(functions), frames or {})

    def test_softmax_between_the_waits_passes(self):
        (row,) = self.rows([(mangled(), [QK, W0] + [EXP] * 66 + loop(66, 0) + [QK, W0])])
        self.assertTrue(row["ok"])
        self.assertEqual(row["exp_under_pv"], 66)
        self.assertEqual(row["exp_after_pv"], 0)
        self.assertEqual(row["kernel"],
                         "(BF16, 128, 128, 128, 12): sm90+stages_2+overlap+persistent")
        self.assertEqual(row["variant"], "plain")

    def test_wait_hoisted_above_the_softmax_fails(self):
        # 0e61fba's shape: the P V wait right after the Q K^T wait, every exponential after it.
        (row,) = self.rows([(mangled(), [QK, W0] + [EXP] * 66 + loop(0, 66) + [QK, W0])])
        self.assertFalse(row["ok"])
        self.assertEqual(row["exp_under_pv"], 0)
        self.assertEqual(row["exp_after_pv"], 66)

    def test_epilogue_exponentials_after_the_loops_wait_pass(self):
        # An FP8 general kernel's layout: after the loop's closing wait, a sink's two
        # exponentials, then O's stores, then the next tile's Q K^T.
        body = loop(128, 0)[:-2] + ["FADD R0, R24, -R11", EXP, EXP, "STSM.16.M88.4 [R3], R4",
                                   "UTMASTG.4D [UR8], [UR4]", QK]
        row = self.rows([(mangled(general=1), body)])[0]
        self.assertEqual(row["exp_after_pv"], 0)
        self.assertTrue(row["ok"])

    def test_exponentials_before_a_store_still_count_when_an_issue_comes_first(self):
        # The hoisted wait's softmax, then the next issue, then (later) a store: counted.
        body = loop(0, 64) + ["STG.E.128 [R2.64], R4"]
        row = self.rows([(mangled(), body)])[0]
        self.assertEqual(row["exp_after_pv"], 64)
        self.assertFalse(row["ok"])

    def test_tanh_exponentials_alone_do_not_pass_a_general_kernel(self):
        # 0e61fba's general kernels: soft-capping's B_c / 2 tanh exponentials between the waits,
        # the softmax's after the second one; with the softmax moved up, both between.
        (bad,) = self.rows([(mangled(general=1), loop(64, 0))])
        self.assertFalse(bad["ok"])
        (good,) = self.rows([(mangled(general=1), loop(130, 0))])
        self.assertTrue(good["ok"])

    def test_one_path_overlapped_and_another_not_fails(self):
        (row,) = self.rows([(mangled(general=1), loop(130, 0) + loop(64, 66))])
        self.assertFalse(row["ok"])
        self.assertEqual(row["variant"], "general")

    def test_too_few_exponentials_under_p_v_fails(self):
        (row,) = self.rows([(mangled(b_c=176), loop(80, 0))])  # a 176-key block needs 88
        self.assertFalse(row["ok"])

    def test_fp8_d_256_plain_kernels_run_their_exponentials_after_the_wait(self):
        # kernel.cuh's kSplitSoftmax: the row maxima (and a moved row's rescale) before the wait
        # for P V, the 64 exponentials of a 128-key block after it, up to the next QGMMA; under
        # it they fail, as do a 16-bit d 256 kernel or the FP8 general instantiation laid out
        # that way, and a split kernel whose wait ptxas moved above its maxima.
        fp8 = mangled(d=256, b_c=128, dtype=4)
        (split,) = self.rows([(fp8, fp8_loop(68, 2, 64))])
        self.assertTrue(split["ok"])
        self.assertEqual((split["max_under_pv"], split["exp_under_pv"], split["exp_after_pv"]),
                         (68, 2, 64))
        self.assertEqual(split["kernel"],
                         "(E4M3, 256, 128, 128, 12): sm90+stages_2+overlap+persistent")
        (under,) = self.rows([(fp8, fp8_loop(68, 64, 0))])
        self.assertFalse(under["ok"])
        (hoisted,) = self.rows([(fp8, fp8_loop(0, 0, 66))])
        self.assertFalse(hoisted["ok"])
        (bf16,) = self.rows([(mangled(d=256, b_c=128), fp8_loop(68, 2, 64))])
        self.assertFalse(bf16["ok"])
        (general,) = self.rows([(mangled(d=256, b_c=128, dtype=4, general=1),
                                 fp8_loop(68, 2, 64))])
        self.assertFalse(general["ok"])
        (d128,) = self.rows([(mangled(d=128, b_c=192, dtype=4), fp8_loop(100, 96, 0))])
        self.assertTrue(d128["ok"])

    def test_a_qgmma_ends_the_count_and_its_descriptors_are_checked(self):
        # Exponentials after an FP8 kernel's next issue are the next block's, not this one's;
        # an R2UR before a QGMMA past its group's first counts as a moved descriptor.
        body = fp8_loop(100, 96, 0) + [EXP] * 8
        (row,) = self.rows([(mangled(d=128, b_c=192, dtype=4), body)])
        self.assertEqual(row["exp_after_pv"], 0)
        arrive, r2ur = "WARPGROUP.ARRIVE", "R2UR UR18, R16"
        moved = [arrive, FP8_QK, r2ur, FP8_QK, r2ur, FP8_QK] + fp8_loop(100, 96, 0)
        (row,) = self.rows([(mangled(d=128, b_c=192, dtype=4), moved)])
        self.assertEqual((row["hgmma_r2ur"], row["hgmma_counted"]), (2, 5))
        self.assertFalse(row["ok"])

    def test_kernels_without_overlap_are_not_checked(self):
        # A block's Q K^T as a group of wgmmas, its wait, the softmax, then P V's group and
        # its wait.
        body = [QK] * 4 + [W0] + [EXP] * 34 + [QK] * 4 + [W0]
        (row,) = self.rows([(mangled(d=256, b_c=64, overlap=0, persistent=0), body)])
        self.assertTrue(row["ok"])
        self.assertFalse(row["overlap"])
        self.assertEqual(row["kernel"], "(BF16, 256, 128, 64, 12): sm90+stages_2")

    def test_wgmmas_waited_for_one_by_one_fail(self):
        # ptxas's serialization (C7515 / C7512): a wait after every product of a group.
        arrive = "WARPGROUP.ARRIVE"
        group = [arrive, QK, QK, QK, QK, "WARPGROUP.DEPBAR.LE gsb0, 0x0"]
        serial = [arrive] + [QK, "WARPGROUP.DEPBAR.LE gsb0, 0x0"] * 4
        (good,) = self.rows([(mangled(), group + loop(66, 0) + group)])
        self.assertTrue(good["serial_ok"])
        self.assertEqual((good["hgmma_waited"], good["hgmma_gaps"]), (2, 10))
        self.assertTrue(good["ok"])
        (bad,) = self.rows([(mangled(), serial + loop(66, 0) + serial)])
        self.assertFalse(bad["serial_ok"])
        self.assertEqual((bad["hgmma_waited"], bad["hgmma_gaps"]), (8, 10))
        self.assertFalse(bad["ok"])
        # The same for an FP8 kernel's QGMMAs.
        (fp8,) = self.rows([(mangled(dtype=4), [arrive] + [FP8_QK, W0] * 6)])
        self.assertFalse(fp8["serial_ok"])

    def test_variants_dtypes_and_other_functions(self):
        rows = self.rows([
            ("_ZN2fa4cuda4sm8014forward_kernelILi1EEEvv", loop(0, 66)),  # not sm90: ignored
            (mangled(d=64, b_c=128, consumers=3, pingpong=0, e4m3=1, general=1), loop(130, 0)),
            (mangled(d=128, b_c=192, narrow=(96, 96), pingpong=1, dtype=1), loop(96, 0)),
        ])
        self.assertEqual(len(rows), 2)
        self.assertEqual(rows[0]["variant"], "e4m3")
        self.assertEqual(rows[0]["kernel"],
                         "(BF16, 64, 192, 128, 16): sm90+stages_2+overlap+persistent")
        self.assertEqual(rows[1]["variant"], "narrow 96:96")
        self.assertEqual(rows[1]["kernel"],
                         "(FP16, 128, 128, 192, 12): sm90+stages_2+overlap+pingpong+persistent")
        self.assertTrue(all(r["ok"] for r in rows))

    def test_descriptors_moved_per_hgmma_fail_at_d_128(self):
        # The second Q buffer's first forms: an R2UR (descriptor into a uniform register) before
        # every HGMMA of the key loop but the first of each group.
        arrive, r2ur = "WARPGROUP.ARRIVE", "R2UR UR18, R16"
        moved = [arrive, r2ur, QK, r2ur, QK, "IADD3 R16, R16, 0x2, RZ", r2ur, QK]
        (bad,) = self.rows([(mangled(), moved + loop(66, 0))])
        self.assertFalse(bad["ok"])
        self.assertEqual(bad["hgmma_r2ur"], 2)
        self.assertEqual(bad["hgmma_counted"], 2 + 3)  # the group's last two, the loop's three
        # Before a group's first HGMMA (its descriptors built for the block) it is not counted.
        (good,) = self.rows([(mangled(), [arrive, r2ur, QK, QK, QK] + loop(66, 0))])
        self.assertTrue(good["ok"])
        self.assertEqual(good["hgmma_r2ur"], 0)
        # d 256 builds a descriptor per step by design: counted, not failed.
        (wide,) = self.rows([(mangled(d=256, b_c=80), moved + loop(40, 0))])
        self.assertTrue(wide["ok"])
        self.assertEqual(wide["hgmma_r2ur"], 2)

    def test_stack_frames_from_res_usage(self):
        name = mangled()
        text = ("\nResource usage:\n Common:\n  GLOBAL:0\n Function %s:\n  REG:168 STACK:88 "
                "SHARED:0 LOCAL:0 CONSTANT[0]:1536 TEXTURE:0 SURFACE:0 SAMPLER:0\n" % name)
        frames = check_sass.stack_frames(text)
        self.assertEqual(frames, {name: 88})
        (row,) = self.rows([(name, loop(66, 0))], frames)
        self.assertEqual(row["stack_bytes"], 88)

    def test_local_memory_counted_per_side_of_the_register_split(self):
        # The consumers' code first (after their TRY_ALLOC), the producer's from its DEALLOC.
        body = (["STL [R1+0x8], R2", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0"] + loop(66, 0) +
                ["LDL.LU R3, [R1+0x8]", "EXIT", "USETMAXREG.DEALLOC.CTAPOOL 0x18",
                 "STL [R1], R2", "LDL R2, [R1]", "LDL.LU R3, [R1+0x4]", "LDGSTS.E.BYPASS.128 "
                 "[R21+0x8000], desc[UR24][R2.64]", "EXIT"])
        (row,) = self.rows([(mangled(), body)])
        self.assertEqual((row["local_consumer"], row["local_producer"]), (2, 3))
        self.assertTrue(row["softmax_ok"] and row["uniform_ok"])
        self.assertFalse(row["ok"])  # any local memory fails the kernel
        (none,) = self.rows([(mangled(), loop(66, 0) + ["USETMAXREG.DEALLOC.CTAPOOL 0x28"])])
        self.assertEqual((none["local_consumer"], none["local_producer"]), (0, 0))
        self.assertTrue(none["ok"])

    def test_one_spill_on_either_side_fails(self):
        consumer = ["USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0", "STL [R1], R30"] + loop(66, 0)
        producer = loop(66, 0) + ["USETMAXREG.DEALLOC.CTAPOOL 0x18", "LDL.LU R2, [R1]"]
        rows = self.rows([(mangled(), consumer), (mangled(persistent=0), producer)])
        self.assertEqual([(r["local_consumer"], r["local_producer"], r["softmax_ok"],
                           r["uniform_ok"], r["ok"]) for r in rows],
                         [(1, 0, True, True, False), (0, 1, True, True, False)])


class CommandLine(unittest.TestCase):
    def run_tool(self, tmp, functions, *args):
        """check_sass.py over `functions` through a stand-in cuobjdump: (exit status, stdout)."""
        text = os.path.join(tmp, "sass.txt")
        with open(text, "w") as f:
            f.write(listing(functions))
        tool = os.path.join(tmp, "cuobjdump")
        with open(tool, "w") as f:  # -sass prints the listing, -res-usage nothing
            f.write('#!/bin/sh\n[ "$1" = -sass ] && cat "%s"\nexit 0\n' % text)
        os.chmod(tool, 0o755)
        r = subprocess.run([sys.executable, _TOOL, text] + list(args),
                           env=dict(os.environ, FA_CUOBJDUMP=tool), capture_output=True,
                           text=True)
        return r.returncode, r.stdout

    def test_local_memory_alone_sets_the_exit_status_unless_allowed(self):
        spill = [(mangled(), loop(66, 0) + ["USETMAXREG.DEALLOC.CTAPOOL 0x18", "STL [R1], R2"])]
        with tempfile.TemporaryDirectory() as tmp:
            status, out = self.run_tool(tmp, spill)
            self.assertEqual(status, 1)
            self.assertIn("FAIL", out)
            self.assertIn("local memory in 1 (consumers 0, producer 1)", out)
            status, out = self.run_tool(tmp, spill, "--allow-local-memory")
            self.assertEqual(status, 0)
            self.assertIn("local memory in 1 (consumers 0, producer 1)", out)

    def test_csv_rows_and_exit_status(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.csv")
            status, _ = self.run_tool(
                tmp, [(mangled(), [QK, W0] + [EXP] * 66 + loop(66, 0) + [QK, W0]),
                      (mangled(narrow=(80, 80)), loop(3, 63))], "--csv", out)
            self.assertEqual(status, 1)  # the second loop fails the check
            with open(out, newline="") as f:
                rows = list(csv.DictReader(f))
            self.assertEqual([(x["variant"], x["transforms"], x["ok"]) for x in rows],
                             [("plain", "False", "True"), ("narrow 80:80", "False", "False")])
            self.assertEqual([(x["local_consumer"], x["local_producer"]) for x in rows],
                             [("0", "0"), ("0", "0")])
            self.assertEqual([(x["hgmma_waited"], x["hgmma_gaps"]) for x in rows],
                             [("2", "4"), ("1", "2")])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
