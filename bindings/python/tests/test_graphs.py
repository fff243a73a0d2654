"""CUDA graph capture of every entry point (PyTorch CUDA; skipped without it): a call captured in
a torch.cuda.CUDAGraph synchronises nothing and allocates only through PyTorch (whose capture
pool the graph keeps) or not at all with workspace=, and a replay after new values were written
into the captured tensors (data, sequence offsets, cache lengths, block tables) gives what an
eager call on those values gives."""
import numpy as np
import pytest

import flashattn


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def _capture(torch, fn):
    """fn's outputs from a graph capture (after warm-up calls on a side stream, as PyTorch's
    documentation does them) and the graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn()
    return graph, captured


def _replay_matches_eager(torch, graph, captured, fn):
    graph.replay()
    eager = fn()
    torch.cuda.synchronize()
    for got, want in zip(captured if isinstance(captured, tuple) else (captured,),
                         eager if isinstance(eager, tuple) else (eager,)):
        assert torch.equal(got, want)


def _randn(torch, *shape, dtype=None):
    return torch.randn(*shape, device="cuda", dtype=dtype or torch.bfloat16)


def test_forward_replays_with_new_inputs(torch):
    q, k, v = (_randn(torch, 2, 40, 4, 64) for _ in range(3))
    fn = lambda: flashattn.forward(q, k, v, causal=True, return_lse=True)  # noqa: E731
    graph, captured = _capture(torch, fn)
    for x in (q, k, v):
        x.copy_(_randn(torch, *x.shape))
    _replay_matches_eager(torch, graph, captured, fn)


def test_forward_varlen_replays_with_new_offsets(torch):
    total_q, total_k = 48, 80
    q = _randn(torch, total_q, 4, 64)
    k, v = _randn(torch, total_k, 2, 64), _randn(torch, total_k, 2, 64)
    cu_q = torch.tensor([0, 10, 30, 48], device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0, 20, 50, 80], device="cuda", dtype=torch.int32)
    fn = lambda: flashattn.forward_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=40,  # noqa: E731
                                          max_seqlen_k=60, causal=True)
    graph, captured = _capture(torch, fn)
    before = captured.clone()
    q.copy_(_randn(torch, *q.shape))
    cu_q.copy_(torch.tensor([0, 40, 41, 48], dtype=torch.int32))
    cu_k.copy_(torch.tensor([0, 60, 61, 80], dtype=torch.int32))
    _replay_matches_eager(torch, graph, captured, fn)
    assert not torch.equal(before, captured)


@pytest.mark.parametrize("page_size", [None, 16])
@pytest.mark.parametrize("own_workspace", [False, True])
def test_forward_kvcache_replays_with_new_lengths_and_tables(torch, page_size, own_workspace):
    """A decode step: the captured graph reads the lengths and the block table when it runs."""
    rng = np.random.default_rng(31)
    batch, hq, hkv, d, capacity = 4, 32, 8, 128, 1024
    q = _randn(torch, batch, 1, hq, d)
    k_dense, v_dense = _randn(torch, batch, capacity, hkv, d), _randn(torch, batch, capacity, hkv, d)
    lens = torch.tensor([1024, 17, 600, 1], device="cuda", dtype=torch.int32)
    args = {"cache_seqlens": lens}
    if own_workspace:
        # Enough for any split: 256 splits of batch rows x heads_q x (head_dim + 1) floats.
        args["workspace"] = torch.empty(256 * batch * hq * (d + 1), device="cuda")
    per_seq = capacity // (page_size or capacity)
    k_cache, v_cache = k_dense, v_dense
    if page_size:
        table = torch.empty(batch, per_seq, device="cuda", dtype=torch.int32)
        k_cache = torch.empty(batch * per_seq, page_size, hkv, d, device="cuda",
                              dtype=torch.bfloat16)
        v_cache = torch.empty_like(k_cache)
        args["block_table"] = table

    def page(seed):
        """Scatters the dense caches into pages in a new random order."""
        if page_size:
            order = np.random.default_rng(seed).permutation(batch * per_seq).astype(np.int32)
            table.copy_(torch.from_numpy(order.reshape(batch, per_seq)))
            for b in range(batch):
                pages = table[b].long()
                k_cache[pages] = k_dense[b].reshape(per_seq, page_size, hkv, d)
                v_cache[pages] = v_dense[b].reshape(per_seq, page_size, hkv, d)

    page(0)
    fn = lambda: flashattn.forward_kvcache(q, k_cache, v_cache, return_lse=True,  # noqa: E731
                                           **args)
    graph, captured = _capture(torch, fn)
    before = captured[0].clone()
    q.copy_(_randn(torch, *q.shape))
    lens.copy_(torch.from_numpy(rng.integers(1, capacity + 1, batch).astype(np.int32)))
    page(1)
    _replay_matches_eager(torch, graph, captured, fn)
    assert not torch.equal(before, captured[0])
    # The replay also equals attention over each sequence's visible rows.
    for b in range(batch):
        n = int(lens[b])
        want = torch.nn.functional.scaled_dot_product_attention(
            q[b:b + 1].transpose(1, 2).float(),
            k_dense[b:b + 1, :n].repeat_interleave(hq // hkv, dim=2).transpose(1, 2).float(),
            v_dense[b:b + 1, :n].repeat_interleave(hq // hkv, dim=2).transpose(1, 2).float())
        got = captured[0][b:b + 1].transpose(1, 2).float()
        assert (got - want).abs().max().item() < 2e-2, b


def test_merge_states_replays_with_new_inputs(torch):
    o_a, o_b = _randn(torch, 2, 24, 4, 64), _randn(torch, 2, 24, 4, 64)
    lse_a, lse_b = (_randn(torch, 2, 4, 24, dtype=torch.float32) for _ in range(2))
    fn = lambda: flashattn.merge_states(o_a, lse_a, o_b, lse_b)  # noqa: E731
    graph, captured = _capture(torch, fn)
    for x in (o_a, o_b, lse_a, lse_b):
        x.copy_(torch.randn(*x.shape, dtype=x.dtype))
    _replay_matches_eager(torch, graph, captured, fn)


def test_calls_with_their_outputs_and_workspace_allocate_nothing(torch):
    """With out= and workspace= a call makes no allocation at all (PyTorch's allocator counts
    none), so a graph of it holds only the caller's memory."""
    batch, hq, hkv, d, pages, page = 8, 32, 8, 128, 64, 16
    q = _randn(torch, batch, 1, hq, d)
    cache = _randn(torch, pages, page, hkv, d)
    lens = torch.full((batch,), 100, device="cuda", dtype=torch.int32)
    table = torch.arange(batch * 8, device="cuda", dtype=torch.int32).reshape(batch, 8) % pages
    o, lse = torch.empty_like(q), torch.empty(batch, hq, 1, device="cuda")
    workspace = torch.empty(256 * batch * hq * (d + 1), device="cuda")
    calls = [
        lambda: flashattn.forward_kvcache(q, cache, cache, cache_seqlens=lens, block_table=table,
                                          out=(o, lse), return_lse=True, workspace=workspace),
        lambda: flashattn.forward_kvcache(q, cache, cache, cache_seqlens=lens, num_splits=4,
                                          block_table=table, out=o, workspace=workspace),
        lambda: flashattn.forward(q, q, q, out=o),
        lambda: flashattn.merge_states(o, lse, o, lse, out=(o, lse)),
    ]
    for call in calls:
        call()  # the plan
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        call()
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
