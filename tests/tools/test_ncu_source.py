#!/usr/bin/env python3
"""tools/ncu_source.py's reading of an Nsight Compute source page, on a page written here (no
ncu, no GPU)."""

import contextlib
import importlib.util
import io
import os
import tempfile
import sys
import unittest

_TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
sys.path.insert(0, _TOOLS)  # the tool imports ncu_compare, as it does run from tools/
_TOOL = os.path.join(_TOOLS, "ncu_source.py")
_spec = importlib.util.spec_from_file_location("ncu_source", _TOOL)
ncu_source = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ncu_source)

COMMON = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "# Samples", "Instructions Executed"]
NAME_A = "void fa::cuda::sm90::forward_kernel<fa::cuda::sm90::Tile<(fa::DType)2, (int)128>>"
# Kernel A: a prologue run 100 times, one IMAD run 4,000 times (the most, yet alone at its count),
# a loop of 10 instructions run 1,000 times holding two wgmma groups, a conditional FMUL inside it
# run 500 times, an EXIT. 100 samples: 49 wait, 31 long_sb, 20 in no stall_ column.
HEADER_A = COMMON + ["stall_long_sb", "stall_wait", "stall_wait (Not Issued)"]
KERNEL_A = [  # address, source, samples, executed, long_sb, wait
    ("0x100", "LDC R1, c[0x0][0x28]", "10", "100", "0", "10"),
    ("0x108", "IMAD R2, R3, R4, RZ", "0", "4,000", "0", "0"),
    ("0x110", "@!P0 ULOP3.LUT UR4, UR4, 0x1, URZ, 0x3c, !UPT", "5", "1,000", "0", "5"),
    ("0x120", "ULOP3.LUT UR5, UR5, 0x1, URZ, 0x3c, !UPT", "5", "1,000", "5", "0"),
    ("0x130", "WARPGROUP.ARRIVE", "0", "1,000", "0", "0"),
    ("0x140", "HGMMA.64x80x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", "20", "1,000", "0", "0"),
    ("0x150", "@P1 ULOP3.LUT UR6, UR6, 0x1, URZ, 0x3c, !UPT", "10", "1,000", "6", "4"),
    ("0x160", "HGMMA.64x80x16.F32.BF16 R24, gdesc[UR16], R24, gsb0", "10", "1,000", "0", "10"),
    ("0x170", "FMUL R1, R1, R2", "10", "1,000", "0", "10"),
    ("0x180", "HGMMA.64x256x16.F32.BF16 R24, R192, gdesc[UR20].tnspB, R24, gsb0", "20",
     "1,000", "20", "0"),
    ("0x190", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "10", "1,000", "0", "10"),
    ("0x1a0", "@!PT BRA 0x110", "0", "1,000", "0", "0"),
    ("0x1b0", "FMUL R3, R3, R2", "0", "500", "0", "0"),
    ("0x1c0", "EXIT", "0", "100", "0", "0"),
]
# Kernel B, with a stall column A lacks: three MOVs share the count 100 but run under 10% as often
# as the most executed; 1,000 and 2,000 are both shared by two, and the larger wins. 5,000 samples.
HEADER_B = COMMON + ["stall_dispatch", "stall_long_sb", "stall_wait"]
KERNEL_B = [  # address, source, samples, executed, dispatch, long_sb, wait
    ("0x200", "MOV R1, 0x1", "0", "100", "0", "0", "0"),
    ("0x210", "MOV R2, 0x1", "0", "100", "0", "0", "0"),
    ("0x220", "MOV R3, 0x1", "0", "100", "0", "0", "0"),
    ("0x230", "ULOP3.LUT UR4, UR4, 0x1, URZ, 0x3c, !UPT", "1,500", "1,000", "0", "0", "1,500"),
    ("0x240", "FMUL R1, R1, R2", "500", "1,000", "0", "500", "0"),
    ("0x250", "FMUL R2, R2, R2", "1,000", "2,000", "0", "0", "1,000"),
    ("0x260", "@P0 BRA 0x250", "2,000", "2,000", "2,000", "0", "0"),
]

# Kernel C reallocates registers: a prologue, the consumers' loop (1,000 times) and the producer's
# wait loop (20,000 times: over ten times the key loop, whose instructions then fall under the
# whole kernel's 10% floor). 100 samples: 2 in the prologue, 50 in the consumers, 48 in the
# producer.
HEADER_C = COMMON + ["stall_long_sb", "stall_short_sb", "stall_wait"]
KERNEL_C = [  # address, source, samples, executed, long_sb, short_sb, wait
    ("0x300", "LDC R1, c[0x0][0x28]", "2", "10", "0", "0", "2"),
    ("0x310", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8", "0", "10", "0", "0", "0"),
    ("0x320", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, gsb0", "30", "1,000", "0", "0",
     "30"),
    ("0x330", "FMNMX R5, R5, R6, !PT", "20", "1,000", "0", "20", "0"),
    ("0x340", "@!P0 BRA 0x320", "0", "1,000", "0", "0", "0"),
    ("0x350", "EXIT", "0", "10", "0", "0", "0"),
    ("0x360", "USETMAXREG.DEALLOC.CTAPOOL 0x28", "0", "10", "0", "0", "0"),
    ("0x370", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8+0x30010], R4", "40", "20,000", "40", "0",
     "0"),
    ("0x380", "@!P0 BRA 0x370", "8", "20,000", "0", "0", "8"),
    ("0x390", "EXIT", "0", "10", "0", "0", "0"),
]


def row(address, source, samples, executed, *stalls):
    """A source page's row: the not-issued and "# Samples" columns repeat the samples."""
    return [address, "      " + source, samples, samples, samples, executed, *stalls]


def write(lines):
    """A CSV file of `lines` (lists of cells, or "" for a blank line), quoted as ncu does."""
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    with f:
        for line in lines:
            f.write(",".join(f'"{cell}"' for cell in line) + "\n" if line else "\n")
    return f.name


def page():
    """Kernel A then, after a blank line, kernel B."""
    lines = [["Kernel Name", NAME_A, ""], HEADER_A]
    lines += [row(*r, r[2]) for r in KERNEL_A]  # the (Not Issued) column: all samples again
    lines += ["", ["Kernel Name", "kernel_cutlass_fa4", ""], HEADER_B]
    lines += [row(*r) for r in KERNEL_B]
    return write(lines)


def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ncu_source.main(argv)
    return out.getvalue()


class NcuSourceTest(unittest.TestCase):
    def setUp(self):
        self.path = page()
        self.a, self.b = ncu_source.read_page(self.path)

    def tearDown(self):
        os.unlink(self.path)

    def test_reads_both_kernels_with_predicates_and_separators(self):
        self.assertEqual((self.a.name, self.b.name), (NAME_A, "kernel_cutlass_fa4"))
        self.assertEqual(len(self.a.instructions), 14)
        self.assertEqual(len(self.b.instructions), 7)
        first = self.a.instructions[2]
        self.assertEqual((first.address, first.executed, first.opcode), (0x110, 1000, "ULOP3"))
        self.assertEqual(first.stalls, {"long_sb": 0, "wait": 5})  # not the (Not Issued) one
        self.assertEqual(self.a.instructions[11].opcode, "BRA")  # after @!PT
        self.assertEqual(self.b.instructions[3].samples, 1500)

    def test_main_loop(self):
        iterations, loop = ncu_source.main_loop(self.a)
        self.assertEqual(iterations, 1000)
        self.assertEqual([i.address for i in loop], list(range(0x110, 0x1b0, 0x10)))
        iterations, loop = ncu_source.main_loop(self.b)
        self.assertEqual(iterations, 2000)  # ties with 1,000: the larger count
        self.assertEqual([i.address for i in loop], [0x250, 0x260])

    def test_summary(self):
        self.assertEqual(ncu_source.summary(self.a), {
            "warp instructions executed": 14700, "warp stall samples": 100,
            "static instructions": 14, "loop iterations (warp-iterations)": 1000,
            "loop static instructions": 10, "loop samples, of kernel (%)": 90.0})
        figures = ncu_source.summary(self.b)
        self.assertEqual(figures["warp instructions executed"], 6300)
        self.assertEqual(figures["loop samples, of kernel (%)"], 60.0)

    def test_opcodes_per_iteration(self):
        a = ncu_source.opcodes(self.a)
        self.assertEqual(a["ULOP3"], (3.0, 20.0))  # three per iteration, 20 of 100 samples
        self.assertEqual(a["HGMMA"], (3.0, 50.0))
        self.assertEqual(a["IMAD"], (4.0, 0.0))
        self.assertEqual(a["FMUL"], (1.5, 10.0))  # the conditional one amortised over the loop
        self.assertEqual(a["EXIT"], (0.1, 0.0))
        b = ncu_source.opcodes(self.b)
        self.assertEqual(b["MOV"], (0.15, 0.0))
        self.assertEqual(b["ULOP3"], (0.5, 30.0))
        self.assertNotIn("HGMMA", b)

    def test_stalls(self):
        self.assertEqual(ncu_source.stalls(self.a),
                         {"wait": 49.0, "long_sb": 31.0, ncu_source.OTHER_STALLS: 20.0})
        self.assertEqual(ncu_source.stalls(self.b), {"wait": 50.0, "long_sb": 10.0,
                                                     "dispatch": 40.0,
                                                     ncu_source.OTHER_STALLS: 0.0})
        rows = ncu_source.stall_rows([self.a, self.b])
        self.assertEqual(rows[0], ["wait", "49.0", "50.0"])
        self.assertEqual([r[0] for r in rows],
                         ["wait", "long_sb", ncu_source.OTHER_STALLS, "dispatch"])
        self.assertEqual(rows[-1], ["dispatch", "0.0", "40.0"])  # A has no such column

    def test_phases(self):
        _, loop = ncu_source.main_loop(self.a)
        self.assertEqual(ncu_source.phases(loop, 100), [
            ("before first wgmma group", 3, 10.0),
            ("64x80x16 group", 3, 40.0),
            ("after 64x80x16 group", 1, 10.0),
            ("64x256x16 group", 1, 20.0),
            ("after 64x256x16 group", 2, 10.0)])
        _, loop = ncu_source.main_loop(self.b)
        self.assertEqual(ncu_source.phases(loop, 5000), [])

    def test_a_group_after_a_closed_one_of_the_same_shape_is_new(self):
        loop = [ncu_source.Instruction(a, s, 1, 1, {}) for a, s in [
            (0, "HGMMA.64x80x16.F32.BF16 R24, gdesc[UR4], RZ, gsb0"), (1, "FMUL R1, R1, R1"),
            (2, "HGMMA.64x80x16.F32.BF16 R24, gdesc[UR4], R24"),
            (3, "@P0 HGMMA.64x80x16.F32.BF16 R24, gdesc[UR4], R24, gsb0")]]
        self.assertEqual(ncu_source.phases(loop, 4), [
            ("64x80x16 group", 1, 25.0), ("after 64x80x16 group", 1, 25.0),
            ("64x80x16 group", 2, 50.0)])

    def test_fp8_groups_are_phases_too(self):
        loop = [ncu_source.Instruction(a, s, 1, 1, {}) for a, s in [
            (0, "FMNMX R8, R26, R17, !PT"),
            (1, "QGMMA.64x192x32.F32.E4M3.E4M3 R24, R196, gdesc[UR8], RZ, !UPT"),
            (2, "QGMMA.64x192x32.F32.E4M3.E4M3 R24, R192, gdesc[UR24], R24, gsb0"),
            (3, "MUFU.EX2 R26, R26"),
            (4, "QGMMA.64x128x32.F32.E4M3.E4M3 R120, R200, gdesc[UR8], R120, gsb0")]]
        self.assertEqual(ncu_source.phases(loop, 5), [
            ("before first wgmma group", 1, 20.0), ("64x192x32 group", 2, 40.0),
            ("after 64x192x32 group", 1, 20.0), ("64x128x32 group", 1, 20.0)])

    def test_main_prints_tables_side_by_side(self):
        text = run([self.path, "--names", "ours,fa4", "--top", "2", "--markdown"])
        self.assertIn("| kernel | ours | fa4 |", text)
        self.assertIn("| loop iterations (warp-iterations) | 1000 | 2000 |", text)
        self.assertIn("| opcode | ours per iteration | ours samples % | fa4 per iteration "
                      "| fa4 samples % |", text)
        opcode_rows = [line for line in text.splitlines()
                       if line.split(" | ")[0] in ("| IMAD", "| ULOP3", "| HGMMA", "| all")]
        # By the first kernel's count; HGMMA ties ULOP3 there and has fewer in fa4. Top 2, then all.
        self.assertEqual(opcode_rows, ["| IMAD | 4.00 | 0.0 | 0.00 | 0.0 |",
                                       "| ULOP3 | 3.00 | 20.0 | 0.50 | 30.0 |",
                                       "| all | 14.70 | 100.0 | 3.15 | 100.0 |"])
        self.assertIn("| stall reason | ours samples % | fa4 samples % |", text)
        self.assertIn("| ours loop phase | static instructions | samples % |", text)
        self.assertIn("| 64x80x16 group | 3 | 40.0 |", text)
        self.assertNotIn("fa4 loop phase", text)  # no HGMMA in its loop
        # Plain text: aligned columns; default labels are the names' first 60 characters.
        lines = run([self.path]).splitlines()
        self.assertEqual(lines[0].split()[1:], NAME_A[:60].split() + ["kernel_cutlass_fa4"])
        row = next(line for line in lines if line.startswith("static instructions"))
        self.assertEqual(row.split(), ["static", "instructions", "14", "7"])
        self.assertEqual(row.index("14"), lines[0].index(NAME_A[:6]))
        self.assertEqual(len([line for line in lines if line.startswith("opcode")]), 1)
        with self.assertRaises(SystemExit) as e:
            run([self.path, "--names", "one"])
        self.assertIn("1 labels for 2 kernels", str(e.exception.code))

    def test_warp_roles_keep_the_producer_out_of_the_main_loop(self):
        path = write([["Kernel Name", "kernel_c", ""], HEADER_C] + [row(*r) for r in KERNEL_C])
        try:
            (c,) = ncu_source.read_page(path)
            split = ncu_source.roles(c)
            self.assertEqual({k: [i.address for i in v] for k, v in split.items()}, {
                "prologue": [0x300], "consumers": [0x310, 0x320, 0x330, 0x340, 0x350],
                "producer": [0x360, 0x370, 0x380, 0x390]})
            # The producer's wait loop runs most, yet the main loop is the consumers'.
            iterations, loop = ncu_source.main_loop(c)
            self.assertEqual((iterations, [i.address for i in loop]), (1000, [0x320, 0x330, 0x340]))
            names, rows = ncu_source.role_rows(c)
            self.assertEqual(names, ["prologue", "consumers", "producer"])
            self.assertEqual(rows, [["samples", "2", "50", "48"],
                                    ["long_sb", "0", "0", "40"],  # ties wait at 40: by name
                                    ["wait", "2", "30", "8"],
                                    ["short_sb", "0", "20", "0"],
                                    [ncu_source.OTHER_STALLS, "0", "0", "0"]])
            self.assertEqual(ncu_source.role_rows(self.a), (None, None))  # no USETMAXREG
            text = run([path, "--names", "c", "--markdown"])
            self.assertIn("| c warp role | prologue | consumers | producer |", text)
            self.assertIn("| samples | 2 | 50 | 48 |", text)
            self.assertIn("| loop iterations (warp-iterations) | 1000 |", text)
            self.assertNotIn("warp role", run([self.path, "--names", "ours,fa4"]))
        finally:
            os.unlink(path)

    def test_a_page_without_kernels_is_refused(self):
        for lines in ([""], [["Kernel Name", NAME_A, ""], HEADER_A]):  # blank; no instructions
            empty = write(lines)
            try:
                with self.assertRaises(ValueError):
                    ncu_source.read_page(empty)
                with self.assertRaises(SystemExit) as e:
                    run([empty])
                self.assertEqual(str(e.exception.code),
                                 f"{empty}: no kernel with instructions found")
            finally:
                os.unlink(empty)
        with self.assertRaises(SystemExit) as e:
            run([empty])  # gone now
        self.assertIn(empty, str(e.exception.code))
        # Not a source page: an instruction-like row with no header row above it.
        other = write([["ID", "Kernel Name"], ["0", "k"]])
        try:
            with self.assertRaises(SystemExit) as e:
                run([other])
            self.assertEqual(str(e.exception.code),
                             f"{other}:1: an instruction row without a header row")
        finally:
            os.unlink(other)


if __name__ == "__main__":
    unittest.main()
