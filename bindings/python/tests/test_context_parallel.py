"""The ring-attention schedule of examples/context_parallel (ring_schedule.py, which
ring_attention.py runs over torch.distributed) simulated rank by rank through forward(...,
return_lse=True) and merge_states(), against float64 attention of the whole sequence: N = 1..4,
contiguous and zigzag shards, causal and not, GQA, lengths that N (or 2N) does not divide. numpy
arrays on the CPU backend everywhere; PyTorch CUDA tensors where present."""
import sys
from pathlib import Path

import numpy as np
import pytest

import flashattn
from reference import attention

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "context_parallel"))
import ring_schedule  # noqa: E402  (the example's module, found through the path above)


def _ops(backend):
    if backend.gpu:
        torch = backend.torch
        return lambda xs: torch.cat(xs, dim=1), torch.empty_like
    return lambda xs: np.concatenate(xs, axis=1), lambda x: np.full_like(x, np.nan)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("causal", [False, True])
def test_simulated_ring_matches_attention(backend, world, layout, causal):
    dtype = "float32" if not backend.gpu else "bfloat16"
    rng = np.random.default_rng(100 * world + causal)
    # 8N + 3 rows: N and 2N never divide them. Head dim 16 on the CPU backend; the GPU kernels
    # run 64, 128 and 256.
    b, seqlen, hq, hkv, d = 2, 8 * world + 3, 4, 2, 64 if backend.gpu else 16
    q64 = rng.uniform(-1, 1, (b, seqlen, hq, d))
    k64 = rng.uniform(-1, 1, (b, seqlen, hkv, d))
    v64 = rng.uniform(-1, 1, (b, seqlen, hkv, d))
    q, k, v = (backend.array(x, dtype) for x in (q64, k64, v64))
    concat, empty_like = _ops(backend)
    s = ring_schedule.Schedule(seqlen, world, layout, causal)
    o, lse = ring_schedule.simulate_ring(s, q, k, v, flashattn.forward, flashattn.merge_states,
                                         concat, empty_like)
    ref_o, ref_lse = attention(*(backend.numpy(x) for x in (q, k, v)), causal=causal)
    # fp32: the single-call tolerance of the C++ CPU tests (2e-6 + 1e-5 |ref|) doubled for up to
    # 2N - 1 = 7 merges. bf16 on a GPU (tests/cuda/test_gpu_context_parallel.cpp): the kernels'
    # single-call bound (P rounded to bf16: 1.2e-2) plus 2^-9 (half an ulp of |O| <= 1) per
    # partial and merge rounding, N at most; their LSE bound 2e-3.
    if dtype == "float32":
        atol, rtol, lse_atol = 4e-6, 2e-5, 1e-4
    else:
        atol, rtol, lse_atol = 1.2e-2 + world * 2.0**-9, 0, 2e-3
    np.testing.assert_allclose(backend.numpy(o), ref_o, atol=atol, rtol=rtol)
    np.testing.assert_allclose(backend.numpy(lse), ref_lse, atol=lse_atol, rtol=0)


def test_schedule_covers_each_pair_once():
    for world in range(1, 5):
        for layout in ("contiguous", "zigzag"):
            for causal in (False, True):
                seqlen = 8 * world + 3
                s = ring_schedule.Schedule(seqlen, world, layout, causal)
                seen = np.zeros((seqlen, seqlen), int)
                for r in range(world):
                    firsts = sum(w.first for t in range(world) for w in s.work(r, t))
                    assert firsts == len(s.chunks(r)), (world, layout, causal, r)
                    rows = np.concatenate([np.arange(b, b + n) for b, n in s.chunks(r)])
                    for t in range(world):
                        origin = s.kv_origin(r, t)
                        keys = np.concatenate([np.arange(b, b + n) for b, n in s.chunks(origin)])
                        for w in s.work(r, t):
                            i = np.arange(w.q_length)[:, None]
                            j = np.arange(w.kv_length)[None, :]
                            visible = (j <= i + w.kv_length - w.q_length) if w.causal else (
                                np.ones((w.q_length, w.kv_length), bool))
                            gi = rows[w.q_offset:w.q_offset + w.q_length]
                            gj = keys[w.kv_offset:w.kv_offset + w.kv_length]
                            np.add.at(seen, (np.broadcast_to(gi[:, None], visible.shape)[visible],
                                             np.broadcast_to(gj[None, :], visible.shape)[visible]),
                                      1)
                want = np.tril(np.ones((seqlen, seqlen), int)) if causal else 1
                np.testing.assert_array_equal(seen, want, err_msg=f"{world} {layout} {causal}")


def test_wrong_mask_fails():
    """The comparison above can fail: a causal ring against the non-causal reference."""
    rng = np.random.default_rng(7)
    q, k, v = (rng.uniform(-1, 1, (1, 27, h, 16)).astype(np.float32) for h in (2, 1, 1))
    concat, empty_like = _ops(type("Cpu", (), {"gpu": False})())
    s = ring_schedule.Schedule(27, 3, "zigzag", True)
    o, _ = ring_schedule.simulate_ring(s, q, k, v, flashattn.forward, flashattn.merge_states,
                                       concat, empty_like)
    ref_o, _ = attention(q, k, v, causal=False)
    assert np.abs(o - ref_o).max() > 1e-2


def test_schedule_refuses_too_short_a_sequence():
    with pytest.raises(ValueError, match="chunk count"):
        ring_schedule.Schedule(5, 3, "zigzag", True)
