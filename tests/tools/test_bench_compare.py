#!/usr/bin/env python3
"""tools/bench_compare.py's score transforms: --softcap reaches ours and FA4, --alibi ours alone
with the usual slopes, and the backends without them refuse the point (NotImplementedError,
which time_backends leaves out quietly). torch, FlashAttention-4 and the library are fakes: no
GPU."""

import contextlib
import os
import sys
import types
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings",
                                "python"))
import bench_compare  # noqa: E402


class Tensor:
    def __init__(self, shape):
        self.shape = shape
        self.device = "cuda"

    def new_empty(self, *shape):
        return Tensor(shape)

    def transpose(self, a, b):
        return self


def fake_modules(calls):
    """sys.modules entries for torch (its tensor factory and SDPA's names) and FA4's function,
    each call recorded in `calls`."""
    torch = types.ModuleType("torch")
    torch.float32 = "float32"
    torch.tensor = lambda values, device, dtype: ("slopes", tuple(values))
    nn = types.ModuleType("torch.nn")
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(CUDNN_ATTENTION="cudnn", FLASH_ATTENTION="flash")
    attention.sdpa_kernel = lambda backend: contextlib.nullcontext()
    nn.functional = types.SimpleNamespace(
        scaled_dot_product_attention=lambda q, k, v, is_causal: Tensor(q.shape))
    torch.nn = nn
    cute = types.ModuleType("flash_attn.cute")

    def flash_attn_func(q, k, v, **kw):
        calls.append(("fa4", kw))
        return Tensor(q.shape), None
    cute.flash_attn_func = flash_attn_func
    return torch, {"torch": torch, "torch.nn": nn, "torch.nn.attention": attention,
                   "flash_attn": types.ModuleType("flash_attn"), "flash_attn.cute": cute}


class Transforms(unittest.TestCase):
    def run_point(self, **transforms):
        calls = []
        torch, modules = fake_modules(calls)
        forward = mock.Mock(side_effect=lambda *a, **kw: calls.append(("ours", kw)))
        with mock.patch.dict(sys.modules, modules), \
                mock.patch.object(bench_compare.flashattn, "forward", forward):
            found = bench_compare.backends(torch, ["libflashattn", "fa4", "cudnn", "fa2"],
                                           **transforms)
            q = Tensor((2, 512, 4, 64))
            made = {}
            for name, make in found.items():
                try:
                    make(q, q, q, True)
                    made[name] = "ran"
                except NotImplementedError:
                    made[name] = "refused"
        return made, calls

    def test_slopes_are_two_to_minus_eight_h_plus_one_over_heads(self):
        self.assertEqual(bench_compare.alibi_slopes(8), [2.0 ** -(h + 1) for h in range(8)])
        self.assertAlmostEqual(bench_compare.alibi_slopes(16)[1], 2.0 ** -1)

    def test_softcap_reaches_ours_and_fa4_and_sdpa_refuses(self):
        made, calls = self.run_point(softcap=30.0)
        self.assertEqual(made, {"libflashattn": "ran", "fa4": "ran", "cudnn": "refused",
                                "fa2": "refused"})
        self.assertEqual(calls[0][1]["softcap"], 30.0)
        self.assertIsNone(calls[0][1]["alibi_slopes"])
        self.assertEqual(calls[1], ("fa4", {"causal": True, "softcap": 30.0}))

    def test_alibi_runs_on_ours_alone_with_one_slope_per_head(self):
        made, calls = self.run_point(alibi=True)
        self.assertEqual(made, {"libflashattn": "ran", "fa4": "refused", "cudnn": "refused",
                                "fa2": "refused"})
        self.assertEqual(calls[0][1]["alibi_slopes"],
                         ("slopes", tuple(bench_compare.alibi_slopes(4))))
        self.assertEqual(calls[0][1]["softcap"], 0.0)

    def test_transforms_need_ours_first_and_a_finite_cap(self):
        for argv in (["--softcap", "30", "--backends", "fa4,libflashattn"],
                     ["--alibi", "--backends", "cudnn"], ["--softcap", "nan"],
                     ["--softcap", "inf"], ["--softcap", "-1"]):
            with mock.patch.object(sys, "argv", ["bench_compare.py", "--out", "x", *argv]), \
                    mock.patch("sys.stderr"), self.assertRaises(SystemExit):
                bench_compare.parse_args()
        with mock.patch.object(sys, "argv", ["bench_compare.py", "--out", "x", "--softcap", "30",
                                             "--alibi"]):
            args = bench_compare.parse_args()
        self.assertEqual((args.softcap, args.alibi), (30.0, True))

    def test_without_transforms_every_backend_runs(self):
        made, _ = self.run_point()
        self.assertEqual(set(made.values()), {"ran"})


if __name__ == "__main__":
    unittest.main()
