"""The inference features through the Python package (CPU backend in CI; the same tests run on
PyTorch CUDA tensors on a GPU machine through conftest's array parametrisation where present):
masks and biases in forward(), forward_varlen(), forward_kvcache() (contiguous and paged),
merge_states(), against a float64 reference written from the features' definitions."""
import numpy as np
import pytest

import flashattn


def reference(q, k, v, *, causal=False, scale=None, window=(-1, -1), softcap=0.0, slopes=None,
              sinks=None):
    """float64 attention of one sequence: q (sq, hq, d), k (sk, hkv, d), v (sk, hkv, dv);
    returns o (sq, hq, dv), lse."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    sq, hq, d = q.shape
    sk, hkv, _ = k.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    o = np.zeros((sq, hq, v.shape[-1]))
    lse = np.full((hq, sq), -np.inf)
    for h in range(hq):
        g = h // (hq // hkv)
        s = q[:, h] @ k[:, g].T * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        diag = np.arange(sq)[:, None] + sk - sq
        j = np.arange(sk)[None, :]
        if slopes is not None:
            s = s - slopes[h] * np.abs(diag - j)
        visible = np.ones((sq, sk), bool)
        if causal:
            visible &= j <= diag
        if window[0] >= 0:
            visible &= j >= diag - window[0]
        if window[1] >= 0:
            visible &= j <= diag + window[1]
        s = np.where(visible, s, -np.inf)
        top = s.max(axis=1) if sk else np.full(sq, -np.inf)
        if sinks is not None:
            top = np.maximum(top, sinks[h])
        safe = np.where(np.isfinite(top), top, 0.0)
        p = np.exp(s - safe[:, None])
        total = p.sum(axis=1) + (np.exp(sinks[h] - safe) if sinks is not None else 0.0)
        o[:, h] = np.where(total[:, None] > 0, p @ v[:, g] / np.where(total > 0, total, 1)[:, None], 0)
        lse[h] = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1)), -np.inf)
    return o, lse


def rand(rng, *shape):
    x = rng.uniform(1 / 64, 1, shape) * rng.choice([-1, 1], shape)
    return x.astype(np.float32)


@pytest.mark.parametrize("window,softcap,alibi,sinks,scale", [
    ((37, 5), 0.0, False, False, None),
    ((64, -1), 0.0, False, False, None),
    ((-1, -1), 2.5, False, False, 1.0),
    ((-1, -1), 0.0, True, False, None),
    ((-1, -1), 0.0, False, True, None),
    ((50, 20), 5.0, True, True, -0.1),
])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_masks_and_biases(window, softcap, alibi, sinks, scale, causal):
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 2, 33, 8, 64), rand(rng, 2, 70, 2, 64), rand(rng, 2, 70, 2, 64)
    slopes = rng.uniform(0.01, 0.3, 8).astype(np.float32) if alibi else None
    sink = rng.uniform(-1, 2, 8).astype(np.float32) if sinks else None
    o, lse = flashattn.forward(q, k, v, causal=causal, softmax_scale=scale, window=window,
                               softcap=softcap, alibi_slopes=slopes, sinks=sink, return_lse=True)
    for b in range(2):
        ro, rl = reference(q[b], k[b], v[b], causal=causal, scale=scale, window=window,
                           softcap=softcap, slopes=slopes, sinks=sink)
        np.testing.assert_allclose(o[b], ro, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(lse[b], rl, atol=2e-4)


def test_alibi_slopes_per_batch_and_bad_shape():
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, 2, 5, 4, 32), rand(rng, 2, 9, 4, 32), rand(rng, 2, 9, 4, 32)
    slopes = rng.uniform(0.01, 0.3, (2, 4)).astype(np.float32)
    o = flashattn.forward(q, k, v, alibi_slopes=slopes)
    for b in range(2):
        np.testing.assert_allclose(o[b], reference(q[b], k[b], v[b], slopes=slopes[b])[0],
                                   atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="alibi_slopes has shape"):
        flashattn.forward(q, k, v, alibi_slopes=np.ascontiguousarray(slopes[:, :3]))


def test_forward_varlen_matches_per_sequence_reference():
    rng = np.random.default_rng(5)
    lens_q, lens_k = [17, 0, 40, 1], [33, 12, 40, 0]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = rand(rng, cu_q[-1], 4, 64), rand(rng, cu_k[-1], 2, 64), rand(rng, cu_k[-1], 2, 64)
    sink = rng.uniform(-1, 2, 4).astype(np.float32)
    o, lse = flashattn.forward_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=40, max_seqlen_k=40,
                                      causal=True, window=(20, -1), sinks=sink, return_lse=True)
    assert o.shape == q.shape and lse.shape == (4, cu_q[-1])
    for b in range(4):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ro, rl = reference(q[qs], k[ks], v[ks], causal=True, window=(20, -1), sinks=sink)
        np.testing.assert_allclose(o[qs], ro, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(lse[:, qs], rl, atol=2e-4)


def test_forward_varlen_malformed_offsets_raise():
    q = np.ones((5, 2, 16), np.float32)
    cu = np.array([0, 6, 5], np.int32)
    with pytest.raises(flashattn.InvalidArgumentError, match="cu_seqlens_q"):
        flashattn.forward_varlen(q, q, q, cu, np.array([0, 2, 5], np.int32), max_seqlen_q=6,
                                 max_seqlen_k=6)


@pytest.mark.parametrize("page_size", [None, 1, 3, 16])
@pytest.mark.parametrize("sq", [1, 4])
@pytest.mark.parametrize("dv", [64, 24])
def test_forward_kvcache(page_size, sq, dv):
    rng = np.random.default_rng(6)
    batch, hq, hkv, d, capacity = 3, 8, 2, 64, 50
    lens = np.array([50, 7, sq], np.int32)
    q = rand(rng, batch, sq, hq, d)
    k_dense, v_dense = rand(rng, batch, capacity, hkv, d), rand(rng, batch, capacity, hkv, dv)
    table = None
    if page_size is None:
        k_cache, v_cache = k_dense, v_dense
    else:
        per_seq = -(-capacity // page_size)
        order = rng.permutation(batch * per_seq).astype(np.int32)
        table = order.reshape(batch, per_seq)
        k_cache = np.zeros((batch * per_seq, page_size, hkv, d), np.float32)
        v_cache = np.zeros((batch * per_seq, page_size, hkv, dv), np.float32)
        for b in range(batch):
            for j in range(capacity):
                page, row = table[b, j // page_size], j % page_size
                k_cache[page, row], v_cache[page, row] = k_dense[b, j], v_dense[b, j]
    slopes = rng.uniform(0.01, 0.3, hq).astype(np.float32)
    o, lse = flashattn.forward_kvcache(q, k_cache, v_cache, cache_seqlens=lens, block_table=table,
                                       causal=sq > 1, alibi_slopes=slopes, num_splits=3,
                                       return_lse=True)
    assert o.shape == (batch, sq, hq, dv)
    for b in range(batch):
        n = lens[b]
        ro, rl = reference(q[b], k_dense[b, :n], v_dense[b, :n], causal=sq > 1, slopes=slopes)
        np.testing.assert_allclose(o[b], ro, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(lse[b], rl, atol=2e-4)


@pytest.mark.parametrize("page_size", [None, 3, 16])
def test_forward_kvcache_head_major_views(page_size):
    """Head-major caches, each K/V head's rows together (Hugging Face's (batch, heads_kv,
    capacity, d), FlashInfer's HND pages (num_pages, heads_kv, page_size, d)), passed as
    transposed views give the row-major cache's result bit for bit."""
    rng = np.random.default_rng(61)
    batch, hq, hkv, d, capacity = 2, 8, 2, 32, 40
    lens = np.array([40, 9], np.int32)
    q = rand(rng, batch, 4, hq, d)
    table = None
    if page_size is None:
        shape = (batch, capacity, hkv, d)
    else:
        per_seq = -(-capacity // page_size)
        shape = (batch * per_seq, page_size, hkv, d)
        table = rng.permutation(batch * per_seq).astype(np.int32).reshape(batch, per_seq)
    k, v = rand(rng, *shape), rand(rng, *shape)
    k_hm, v_hm = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (k, v))
    kwargs = dict(cache_seqlens=lens, block_table=table, causal=True, num_splits=2,
                  return_lse=True)
    want = flashattn.forward_kvcache(q, k, v, **kwargs)
    got = flashattn.forward_kvcache(q, k_hm.transpose(0, 2, 1, 3), v_hm.transpose(0, 2, 1, 3),
                                    **kwargs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_forward_kvcache_bad_page_is_refused():
    q = np.ones((1, 1, 2, 16), np.float32)
    cache = np.ones((4, 2, 2, 16), np.float32)
    with pytest.raises(flashattn.InvalidArgumentError, match="block_table"):
        flashattn.forward_kvcache(q, cache, cache, cache_seqlens=np.array([3], np.int32),
                                  block_table=np.array([[0, 9]], np.int32))


def test_merge_states_equals_attention_over_the_union():
    rng = np.random.default_rng(7)
    q, k, v = rand(rng, 2, 9, 4, 32), rand(rng, 2, 60, 4, 32), rand(rng, 2, 60, 4, 32)
    whole, lse = flashattn.forward(q, k, v, return_lse=True)
    a, la = flashattn.forward(q, k[:, :25], v[:, :25], return_lse=True)
    b, lb = flashattn.forward(q, k[:, 25:], v[:, 25:], return_lse=True)
    o, l = flashattn.merge_states(a, la, b, lb)
    np.testing.assert_allclose(o, whole, atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(l, lse, atol=2e-5)
    o2, l2 = flashattn.merge_states(a, la, b, lb, out=(a, la))  # in place
    assert o2 is a and l2 is la
    np.testing.assert_allclose(a, whole, atol=2e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="lse_b"):
        flashattn.merge_states(a, la, b, lb[:, :, :3])


def test_run_time_arrays_must_have_the_config_s_length():
    # The library reads heads_q sinks, batch cache lengths and batch + 1 offsets: a shorter
    # array would be read past its end, so its shape is checked first.
    rng = np.random.default_rng(11)
    q, k, v = rand(rng, 2, 3, 4, 16), rand(rng, 2, 5, 2, 16), rand(rng, 2, 5, 2, 16)
    sinks = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"sinks has shape \(1,\); expected \(4,\)"):
        flashattn.forward(q, k, v, sinks=sinks[:1])
    with pytest.raises(ValueError, match=r"cache_seqlens has shape \(1,\); expected \(2,\)"):
        flashattn.forward_kvcache(q, k, v, cache_seqlens=np.array([5], np.int32))
    tq, tk = rand(rng, 7, 4, 16), rand(rng, 9, 2, 16)
    cu_q, cu_k = np.array([0, 3, 7], np.int32), np.array([0, 4, 9], np.int32)
    with pytest.raises(ValueError, match=r"cu_seqlens_k has shape \(2,\); expected \(3,\)"):
        flashattn.forward_varlen(tq, tk, tk, cu_q, cu_k[:2], max_seqlen_q=4, max_seqlen_k=5)
    # The same calls with full-length arrays run.
    flashattn.forward(q, k, v, sinks=sinks)
    flashattn.forward_kvcache(q, k, v, cache_seqlens=np.array([5, 2], np.int32))
    flashattn.forward_varlen(tq, tk, tk, cu_q, cu_k, max_seqlen_q=4, max_seqlen_k=5)


class _CopyingExporter:
    """A DLPack producer whose capsule owns a fresh copy (as copying producers do): the memory
    lives exactly as long as the capsule."""

    def __init__(self, array):
        self.array = array
        self.shape = array.shape

    def __dlpack__(self, stream=None):
        return np.array(self.array, copy=True).__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def test_dlpack_run_arguments_live_through_the_call():
    rng = np.random.default_rng(12)
    q, k, v = rand(rng, 3, 2, 64, 8), rand(rng, 3, 3, 64, 8), rand(rng, 3, 3, 64, 8)
    # Slopes and sinks of one size: a copy freed too early is reused by the next one.
    slopes = rng.random(64).astype(np.float32)
    sinks = rng.standard_normal(64).astype(np.float32)
    want = flashattn.forward(q, k, v, alibi_slopes=slopes, sinks=sinks)
    for _ in range(3):  # freed memory is reused by the next allocations; once may not show it
        got = flashattn.forward(q, k, v, alibi_slopes=_CopyingExporter(slopes),
                                sinks=_CopyingExporter(sinks))
        np.testing.assert_array_equal(got, want)
    o, lse = flashattn.forward(q, k, v, return_lse=True)
    merged, _ = flashattn.merge_states(o, _CopyingExporter(lse), o, _CopyingExporter(lse))
    np.testing.assert_allclose(merged, o, rtol=1e-6, atol=1e-7)


def test_merge_states_checks_its_arrays_as_forward_does():
    rng = np.random.default_rng(13)
    q, k, v = rand(rng, 2, 5, 3, 16), rand(rng, 2, 8, 3, 16), rand(rng, 2, 8, 3, 16)
    a, la = flashattn.forward(q, k[:, :3], v[:, :3], return_lse=True)
    b, lb = flashattn.forward(q, k[:, 3:], v[:, 3:], return_lse=True)
    whole, lse = flashattn.forward(q, k, v, return_lse=True)
    # Inputs in another dimension order (bhsd results viewed as bshd): out takes their strides.
    at, bt = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for x in (a, b))
    o, l = flashattn.merge_states(at, la, bt, lb)
    assert o.strides == at.strides
    np.testing.assert_allclose(o, whole, atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(l, lse, atol=2e-5)
    wide = np.zeros((2, 5, 3, 32), np.float32)
    wide_a, wide_b = wide[..., ::2], wide[..., 1::2]
    wide_a[...], wide_b[...] = a, b
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        flashattn.merge_states(wide_a, la, wide_b, lb)
    frozen, frozen_lse = np.empty_like(a), np.empty_like(la)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="out is read-only"):
        flashattn.merge_states(a, la, b, lb, out=(frozen, frozen_lse))
    frozen_lse.setflags(write=False)
    with pytest.raises(ValueError, match="lse is read-only"):
        flashattn.merge_states(a, la, b, lb, out=(np.empty_like(a), frozen_lse))


def test_broadcast_caches_and_varlen_tensors_are_refused():
    rng = np.random.default_rng(14)
    q = rand(rng, 2, 1, 4, 16)
    row = rand(rng, 1, 1, 1, 16)
    cache = np.broadcast_to(row, (2, 6, 2, 16))  # strides (0, 0, 0, 4): read as packed
    with pytest.raises(ValueError, match="broadcast"):
        flashattn.forward_kvcache(q, cache, cache, cache_seqlens=np.array([6, 3], np.int32))
    tq = rand(rng, 4, 4, 16)
    tk = np.broadcast_to(rand(rng, 1, 1, 16), (6, 2, 16))
    with pytest.raises(ValueError, match="broadcast"):
        flashattn.forward_varlen(tq, tk, tk, np.array([0, 4], np.int32),
                                 np.array([0, 6], np.int32), max_seqlen_q=4, max_seqlen_k=6)


@pytest.mark.parametrize("scale", [0.0, 1e-46])
def test_a_scale_that_is_zero_in_float32_is_refused(scale):
    # 0 is the C API's "1/sqrt(head_dim)": passing it through would silently change the result.
    q = np.ones((1, 2, 1, 8), np.float32)
    with pytest.raises(ValueError, match="softmax_scale"):
        flashattn.forward(q, q, q, softmax_scale=scale)


def test_an_lse_output_needs_return_lse():
    q = np.ones((1, 2, 1, 8), np.float32)
    with pytest.raises(ValueError, match="return_lse"):
        flashattn.forward(q, q, q, out=(np.empty_like(q), np.empty((1, 1, 2), np.float32)))


def test_varlen_rows_without_a_sequence_are_refused():
    # Query rows but cu_seqlens of one entry (batch 0): the library names the zero batch.
    q = np.ones((3, 1, 8), np.float32)
    with pytest.raises(flashattn.InvalidArgumentError, match="batch"):
        flashattn.forward_varlen(q, q, q, np.array([0], np.int32), np.array([0], np.int32),
                                 max_seqlen_q=3, max_seqlen_k=3)


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


@pytest.mark.parametrize("page_size", [None, 16])
def test_kvcache_varlen_merge_on_torch_cuda(page_size):
    torch = _torch_cuda()
    rng = np.random.default_rng(8)
    batch, hq, hkv, d, capacity = 4, 32, 8, 128, 3008  # whole pages of 16
    lens = np.array([3000, 17, 1200, 1], np.int32)
    q = rand(rng, batch, 1, hq, d)
    k_dense, v_dense = rand(rng, batch, capacity, hkv, d), rand(rng, batch, capacity, hkv, d)
    sink = rng.uniform(-1, 2, hq).astype(np.float32)
    expected, expected_lse = flashattn.forward_kvcache(q, k_dense, v_dense, cache_seqlens=lens,
                                                       sinks=sink, return_lse=True)
    if page_size is None:
        k_cache, v_cache, table = k_dense, v_dense, None
    else:
        per_seq = -(-capacity // page_size)
        table = rng.permutation(batch * per_seq).astype(np.int32).reshape(batch, per_seq)
        k_cache = np.zeros((batch * per_seq, page_size, hkv, d), np.float32)
        v_cache = np.zeros((batch * per_seq, page_size, hkv, d), np.float32)
        for b in range(batch):
            pages = table[b]
            k_cache[pages] = k_dense[b].reshape(per_seq, page_size, hkv, d)
            v_cache[pages] = v_dense[b].reshape(per_seq, page_size, hkv, d)
    cuda = lambda x, dtype=torch.bfloat16: torch.from_numpy(x).to("cuda", dtype)
    args = dict(cache_seqlens=cuda(lens, torch.int32), sinks=cuda(sink, torch.float32),
                return_lse=True)
    if table is not None:
        args["block_table"] = cuda(table, torch.int32)
    o, lse = flashattn.forward_kvcache(cuda(q), cuda(k_cache), cuda(v_cache), **args)
    torch.cuda.synchronize()
    # bf16 inputs against the fp32 CPU result: the inputs' own rounding dominates.
    np.testing.assert_allclose(o.float().cpu().numpy(), expected, atol=2e-2)
    np.testing.assert_allclose(lse.cpu().numpy(), expected_lse, atol=2e-2)


def test_a_caller_workspace_is_checked_and_used():
    # The split-KV scratch of workspace= is the caller's: float32 on q's device; the CPU backend
    # needs none and computes the same result with it.
    rng = np.random.default_rng(15)
    q, k, v = rand(rng, 2, 1, 4, 16), rand(rng, 2, 9, 2, 16), rand(rng, 2, 9, 2, 16)
    lens = np.array([9, 4], np.int32)
    want = flashattn.forward_kvcache(q, k, v, cache_seqlens=lens)
    got = flashattn.forward_kvcache(q, k, v, cache_seqlens=lens,
                                    workspace=np.zeros(4096, np.float32))
    np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="workspace must be float32"):
        flashattn.forward_kvcache(q, k, v, cache_seqlens=lens, workspace=np.zeros(8, np.int32))
    with pytest.raises(ValueError, match="workspace must be contiguous"):
        flashattn.forward(q, k, k, workspace=np.zeros(8, np.float32)[::2])


@pytest.mark.parametrize("d,dv", [(192, 128), (64, 32), (16, 40)])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_value_head_dim_comes_from_v(d, dv, layout):
    """v's last dimension is head_dim_v: out is allocated with it, the scale stays
    1/sqrt(head_dim), and an out= of q's last dimension is refused."""
    rng = np.random.default_rng(18)
    q, k, v = rand(rng, 2, 17, 4, d), rand(rng, 2, 40, 2, d), rand(rng, 2, 40, 2, dv)
    swap = (lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))) if layout == "bhsd" else (
        lambda x: x)
    o, lse = flashattn.forward(swap(q), swap(k), swap(v), causal=True, layout=layout,
                               return_lse=True)
    o = swap(o)
    assert o.shape == (2, 17, 4, dv)
    for b in range(2):
        ro, rl = reference(q[b], k[b], v[b], causal=True)
        np.testing.assert_allclose(o[b], ro, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(lse[b], rl, atol=2e-4)
    out = np.full((2, 17, 4, dv), np.nan, np.float32)
    assert flashattn.forward(q, k, v, out=out) is out
    np.testing.assert_allclose(out, flashattn.forward(q, k, v), rtol=0, atol=0)
    with pytest.raises(ValueError, match="out has shape"):
        flashattn.forward(q, k, v, out=np.zeros((2, 17, 4, d), np.float32))
    with pytest.raises(ValueError, match="k and v shapes differ"):
        flashattn.forward(q, k, rand(rng, 2, 39, 2, dv))


def test_value_head_dim_in_varlen():
    rng = np.random.default_rng(19)
    lens_q, lens_k = [5, 0, 30], [9, 4, 30]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = rand(rng, cu_q[-1], 6, 48), rand(rng, cu_k[-1], 3, 48), rand(rng, cu_k[-1], 3, 8)
    o = flashattn.forward_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=30, max_seqlen_k=30,
                                 causal=True)
    assert o.shape == (cu_q[-1], 6, 8)
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        np.testing.assert_allclose(o[qs], reference(q[qs], k[ks], v[ks], causal=True)[0],
                                   atol=2e-5, rtol=1e-4)


def test_value_head_dim_zero_is_refused():
    q = np.ones((1, 2, 1, 8), np.float32)
    with pytest.raises(ValueError, match="head_dim_v = 0"):
        flashattn.forward(q, q, np.ones((1, 2, 1, 0), np.float32))
