#!/usr/bin/env python3
"""tools/compare_builds.py against a stand-in benchmark (no GPU): both modes time each build in
the order base, this, this, base, average its passes per point, report this / base as a speed
(the grid's TFLOP/s ratio, --serving's base time over this time) and, with --serving, each
build's paged over contiguous speed and (--kv-dtypes bf16,e4m3) its e4m3 over bf16 cache speed."""

import csv
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
_TOOL = os.path.join(_ROOT, "tools", "compare_builds.py")

# The stand-in: which build it runs is the first LD_LIBRARY_PATH entry (the base directory, or
# none for the binary's own library); each call is logged. Figures depend on the build, the pass
# (a counter file) and the point, so averaging and ratios are checked against known values.
_FAKE = textwrap.dedent('''\
    #!{python}
    import os, sys
    base = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)[0] == {base!r}
    log = {log!r}
    args = sys.argv[1:]
    if args[0] == "decode" or "--csv" in args:
        n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
        with open(log, "a") as f:
            f.write(("base" if base else "this") + " " + " ".join(args) + "\\n")
    else:
        n = 0
    def opt(name):
        return args[args.index(name) + 1]
    if args[0] == "decode":
        # Without --kv-dtype, as a decode_bench from before e4m3 caches: no kv_dtype column. A
        # base whose directory holds "no-e4m3" fails an e4m3 cache's plan, as such a build would.
        typed = "--kv-dtype" in args
        if base and typed and "e4m3" in opt("--kv-dtype") and os.path.exists({no_e4m3!r}):
            sys.exit("decode_bench: fa_plan_create: unsupported")
        print(("kv_dtype," if typed else "") + "batch,kv_len,sq,page,splits,kernel,us,gbps,graph_us,host_us")
        for kvt in (opt("--kv-dtype") if typed else "bf16").split(","):
            for page in map(int, opt("--pages").split(",")):
                for b in map(int, opt("--batches").split(",")):
                    for kv in map(int, opt("--kv-lens").split(",")):
                        # base: 100 us contiguous, 125 paged; this: 80 and 88; +2 us on odd
                        # calls; an e4m3 cache 40 us less (the +2 included)
                        us = (125.0 if page else 100.0) if base else (88.0 if page else 80.0)
                        us += 2.0 * (n % 2) - (40.0 if kvt == "e4m3" else 0.0)
                        print((f"{{kvt}}," if typed else "") + f'{{b}},{{kv}},{{opt("--sq")}},{{page}},1,"k{{opt("--head-dim")}}",{{us}},1,1,1')
    elif "--csv" in args:
        print("kernel,head_dim,head_dim_v,causal,seqlen,tflops")
        for d in opt("--head-dims").split(","):
            for c in opt("--causal").split(","):
                for s in opt("--seqlens").split(","):
                    t = 400.0 if base else 500.0
                    print(f'"k",{{d}},{{d}},{{c}},{{s}},{{t + 10.0 * (n % 2)}}')
    else:
        print("GPU: stand-in")
''')


class CompareBuilds(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        self.base = os.path.join(d, "before")
        os.makedirs(self.base)
        open(os.path.join(self.base, "libflashattn.so.0"), "w").close()
        self.log = os.path.join(d, "calls.log")
        self.bench = os.path.join(d, "bench")
        with open(self.bench, "w") as f:
            f.write(_FAKE.format(python=sys.executable, base=self.base, log=self.log,
                                 no_e4m3=os.path.join(self.base, "no-e4m3")))
        os.chmod(self.bench, os.stat(self.bench).st_mode | stat.S_IXUSR)
        self.out = os.path.join(d, "out")

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, *extra):
        r = subprocess.run([sys.executable, _TOOL, "--bench", self.bench, "--base", self.base,
                            "--out", self.out, *extra], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def builds_in_order(self):
        with open(self.log) as f:
            return [line.split()[0] for line in f]

    def test_serving_points_speeds_and_paged_over_contiguous(self):
        stdout = self.run_tool("--serving", "--rounds", "2", "--pages", "0,16")
        calls = self.builds_in_order()
        per_pass = len(calls) // 4
        self.assertEqual(len(calls), 4 * per_pass)
        self.assertEqual(calls, ["base"] * per_pass + ["this"] * (2 * per_pass) +
                         ["base"] * per_pass)
        with open(os.path.join(self.out, "compare-serving.csv")) as f:
            rows = list(csv.DictReader(f))
        # 7 calls: six prefill shapes (two kv lens in the first) and decode at 3 x 2; two pages.
        self.assertEqual(len(rows), (7 + 6) * 2)
        for r in rows:
            paged = r["page"] == "16"
            # Each build's passes alternate +0 / +2 us within a pass's calls: the mean adds 1.
            b, t = (126.0, 89.0) if paged else (101.0, 81.0)
            self.assertAlmostEqual(float(r["base_us"]), b, places=2)
            self.assertAlmostEqual(float(r["this_us"]), t, places=2)
            self.assertAlmostEqual(float(r["speed"]), round(b / t, 3), places=3)
            if paged:
                self.assertAlmostEqual(float(r["base_paged_over_contiguous"]), 101.0 / 126.0,
                                       places=3)
                self.assertAlmostEqual(float(r["this_paged_over_contiguous"]), 81.0 / 89.0,
                                       places=3)
            else:
                self.assertEqual(r["base_paged_over_contiguous"], "")
            self.assertEqual(r["this_kernel"], "k" + r["head_dim"])
            self.assertEqual(r["kv_dtype"], "bf16")
            self.assertEqual(r["base_e4m3_over_bf16"], "")
        prefill = [r for r in rows if r["sq"] != "1"]
        self.assertEqual({r["head_dim"] for r in prefill}, {"64", "128", "256"})
        self.assertIn("Geometric mean speed (this / base), prefill:", stdout)
        self.assertIn("Geometric mean speed (this / base), decode:", stdout)
        # bf16 alone: decode_bench is not asked for a cache type (older ones lack the option).
        with open(self.log) as f:
            self.assertFalse(any("--kv-dtype" in line.split() for line in f))

    def test_serving_e4m3_caches_beside_bf16(self):
        stdout = self.run_tool("--serving", "--rounds", "2", "--pages", "0,16", "--kinds",
                               "prefill", "--head-dims", "128", "--kv-dtypes", "bf16,e4m3")
        with open(self.log) as f:
            calls = [line.split() for line in f]
        self.assertEqual({c[c.index("--kv-dtype") + 1] for c in calls}, {"bf16,e4m3"})
        with open(os.path.join(self.out, "compare-serving.csv")) as f:
            rows = list(csv.DictReader(f))
        # The d 128 chunked prefills: 4 x 512 against 8k and 32k, 4 x 2048, 16 x 256, 1 x 4096.
        self.assertEqual(len(rows), 5 * 2 * 2)
        at = {(r["batch"], r["sq"], r["kv_len"], r["page"], r["kv_dtype"]): r for r in rows}
        for key, r in at.items():
            if key[4] == "bf16":
                self.assertEqual(r["this_e4m3_over_bf16"], "")
                continue
            bf16 = at[key[:4] + ("bf16",)]
            for build in ("base", "this"):
                # Each point's e4m3 and bf16 times come from one call: 40 us apart.
                e, t = float(r[build + "_us"]), float(bf16[build + "_us"])
                self.assertAlmostEqual(e, t - 40.0, places=2)
                self.assertAlmostEqual(float(r[build + "_e4m3_over_bf16"]), t / e, places=3)
            if key[3] == "16":  # paged over contiguous within the e4m3 cache's own rows
                contig = at[key[:3] + ("0", "e4m3")]
                self.assertAlmostEqual(float(r["this_paged_over_contiguous"]),
                                       float(contig["this_us"]) / float(r["this_us"]), places=3)
        self.assertIn("Geometric mean speed (this / base), prefill, bf16 cache:", stdout)
        self.assertIn("Geometric mean speed (this / base), prefill, e4m3 cache:", stdout)

    def test_a_base_without_e4m3_caches_fails_by_name(self):
        open(os.path.join(self.base, "no-e4m3"), "w").close()
        r = subprocess.run([sys.executable, _TOOL, "--bench", self.bench, "--base", self.base,
                            "--out", self.out, "--serving", "--kinds", "prefill", "--head-dims",
                            "64", "--kv-dtypes", "bf16,e4m3"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("failed with the base build", r.stderr)
        self.assertIn("fa_plan_create: unsupported", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "compare-serving.csv")))

    def test_serving_subset_by_kind_and_head_dim(self):
        self.run_tool("--serving", "--rounds", "2", "--pages", "0,16", "--kinds", "prefill",
                      "--head-dims", "64,256")
        with open(self.log) as f:
            calls = [line.split() for line in f]
        # One call per kept point and pass: the d 64 and d 256 chunked prefills, no decode.
        self.assertEqual(len(calls), 2 * 4)
        self.assertEqual({c[c.index("--head-dim") + 1] for c in calls}, {"64", "256"})
        self.assertEqual({c[c.index("--sq") + 1] for c in calls}, {"512"})
        with open(os.path.join(self.out, "compare-serving.csv")) as f:
            self.assertEqual(len(list(csv.DictReader(f))), 2 * 2)

    def test_serving_refuses_filters_that_keep_nothing_or_mean_nothing(self):
        for extra in (["--kinds", "prefill,"], ["--kinds", "decode", "--head-dims", "64"],
                      ["--head-dims", "192:128"], ["--head-dims", "96"],
                      ["--kv-dtypes", "fp8"], ["--kv-dtypes", "e4m3,e4m3"],
                      ["--kv-dtypes", ""]):
            r = subprocess.run([sys.executable, _TOOL, "--bench", self.bench, "--base",
                                self.base, "--out", self.out, "--serving", *extra],
                               capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0, extra)
            self.assertIn("compare_builds.py:", r.stderr, extra)
        self.assertFalse(os.path.exists(self.log))  # nothing was timed

    def test_kv_dtypes_only_with_serving(self):
        r = subprocess.run([sys.executable, _TOOL, "--bench", self.bench, "--base", self.base,
                            "--out", self.out, "--kv-dtypes", "e4m3"], capture_output=True,
                           text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--kv-dtypes is a --serving option", r.stderr)
        self.assertFalse(os.path.exists(self.log))

    def test_grid_ratios_average_both_passes(self):
        self.run_tool("--rounds", "2", "--head-dims", "64,192:128")
        self.assertEqual(self.builds_in_order(), ["base", "this", "this", "base"])
        with open(os.path.join(self.out, "compare.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 2 * 2 * 6)
        for r in rows:
            # base passes are calls 0 and 3 (+0 and +10), this passes 1 and 2 (+10 and +0).
            self.assertAlmostEqual(float(r["base_tflops"]), 405.0)
            self.assertAlmostEqual(float(r["this_tflops"]), 505.0)
            self.assertAlmostEqual(float(r["ratio"]), round(505.0 / 405.0, 3), places=3)

    def test_grid_heads_reach_the_bench_of_both_builds(self):
        self.run_tool("--rounds", "1", "--head-dims", "72,80", "--heads", "32")
        with open(self.log) as f:
            calls = [line.split() for line in f]
        self.assertEqual([c[0] for c in calls], ["base", "this"])
        for c in calls:
            self.assertEqual(c[c.index("--heads") + 1], "32")
        r = subprocess.run([sys.executable, _TOOL, "--bench", self.bench, "--base", self.base,
                            "--out", self.out, "--serving", "--heads", "32"],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--heads takes a positive count, without --serving", r.stderr)

    def test_a_base_without_its_library_is_refused(self):
        os.remove(os.path.join(self.base, "libflashattn.so.0"))
        r = subprocess.run([sys.executable, _TOOL, "--serving", "--bench", self.bench, "--base",
                            self.base, "--out", self.out], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no libflashattn.so.0", r.stderr)
        self.assertFalse(os.path.exists(self.log))


if __name__ == "__main__":
    unittest.main()
