"""FP8 (float8_e4m3fn, ml_dtypes' type) through the Python entry points on the CPU backend:
e4m3 q, k and v with a bfloat16 or float16 output, bfloat16/float16 q against an e4m3 cache
(contiguous, paged, varlen), descale factors per tensor and per (batch, K/V head), against
float64 attention of the dequantised inputs; and the refusals, each naming what is wrong."""
import ml_dtypes
import numpy as np
import pytest

import flashattn
from reference import attention

E4M3 = ml_dtypes.float8_e4m3fn
BF16 = ml_dtypes.bfloat16


def _dequantised(x, descale, group=1):
    """x (b, s, h, d) in float64 times its descale: one factor, or one per (batch, K/V head)
    (query head h takes its K/V head h // group's)."""
    x = x.astype(np.float64)
    if descale is None:
        return x
    d = np.asarray(descale, np.float64)
    if d.size == 1:
        return x * d.reshape(())
    per_head = np.repeat(d, group, axis=1)  # (b, heads)
    return x * per_head[:, None, :, None]


def _rand(rng, shape, dtype, spread=1.0):
    return (rng.standard_normal(shape) * spread).astype(dtype)


def _paged(rng, k_dense, v_dense, page_size):
    """The (batch, capacity, heads, d) caches in shuffled pages: (k_pages, v_pages, table)."""
    batch, capacity, hkv, d = k_dense.shape
    per_seq = capacity // page_size
    table = rng.permutation(batch * per_seq).astype(np.int32).reshape(batch, per_seq)
    k_pages = np.zeros((batch * per_seq, page_size, hkv, d), k_dense.dtype)
    v_pages = np.zeros((batch * per_seq, page_size, hkv, d), v_dense.dtype)
    for bi in range(batch):
        k_pages[table[bi]] = k_dense[bi].reshape(per_seq, page_size, hkv, d)
        v_pages[table[bi]] = v_dense[bi].reshape(per_seq, page_size, hkv, d)
    return k_pages, v_pages, table


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("out_dtype", [BF16, np.float16])
def test_e4m3_forward_matches_dequantised_reference(causal, per_head, out_dtype):
    rng = np.random.default_rng(10 + 2 * causal + per_head)
    b, sq, sk, hq, hkv, d = 2, 17, 33, 4, 2, 32
    q, k, v = (_rand(rng, (b, s, h, d), E4M3, 2.0) for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    if per_head:
        qd, kd, vd = (rng.uniform(0.25, 2, (b, hkv)).astype(np.float32) for _ in range(3))
    else:
        qd, kd, vd = (np.array([x], np.float32) for x in (0.5, 1.5, 3.0))
    out = None if out_dtype is BF16 else np.full((b, sq, hq, d), np.nan, np.float16)
    o = flashattn.forward(q, k, v, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd,
                          out=out)
    assert o.dtype == np.dtype(out_dtype) and o.shape == (b, sq, hq, d)
    group = hq // hkv
    # v's descale scales the output: P V over dequantised v.
    ref, _ = attention(_dequantised(q, qd, group), _dequantised(k, kd),
                       _dequantised(v, vd), causal=causal)
    # O rounded to bf16 (2^-9 relative) or fp16 (2^-12), plus the fp32 arithmetic's share.
    rtol = 2.0**-8 if out_dtype is BF16 else 2.0**-10
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=rtol, atol=rtol * np.abs(ref).max())
    # The same comparison catches a descale left out.
    o_plain = flashattn.forward(q, k, v, causal=causal, q_descale=qd, k_descale=kd)
    assert np.abs(o_plain.astype(np.float64) - ref).max() > 10 * rtol * np.abs(ref).max()


@pytest.mark.parametrize("page_size", [None, 1, 16])
@pytest.mark.parametrize("q_dtype", [BF16, np.float16])
def test_half_queries_against_an_e4m3_cache(page_size, q_dtype):
    rng = np.random.default_rng(20 + (page_size or 0))
    batch, sq, hq, hkv, d, capacity = 3, 4, 8, 2, 64, 48
    lens = np.array([48, 17, 1], np.int32)
    q = _rand(rng, (batch, sq, hq, d), q_dtype)
    k_dense = _rand(rng, (batch, capacity, hkv, d), E4M3, 4.0)
    v_dense = _rand(rng, (batch, capacity, hkv, d), E4M3, 4.0)
    kd = rng.uniform(0.1, 0.5, (batch, hkv)).astype(np.float32)
    vd = rng.uniform(0.1, 0.5, (batch, hkv)).astype(np.float32)
    kwargs = dict(cache_seqlens=lens, causal=True, k_descale=kd, v_descale=vd)
    if page_size is None:
        o = flashattn.forward_kvcache(q, k_dense, v_dense, **kwargs)
    else:
        k_pages, v_pages, table = _paged(rng, k_dense, v_dense, page_size)
        o = flashattn.forward_kvcache(q, k_pages, v_pages, block_table=table, **kwargs)
    assert o.dtype == np.dtype(q_dtype)
    k64, v64 = _dequantised(k_dense, kd), _dequantised(v_dense, vd)
    rtol = 2.0**-8 if q_dtype is BF16 else 2.0**-10
    for bi in range(batch):
        n = int(lens[bi])
        ref, _ = attention(q[bi:bi + 1].astype(np.float64), k64[bi:bi + 1, :n], v64[bi:bi + 1, :n],
                           causal=True)
        np.testing.assert_allclose(o[bi:bi + 1].astype(np.float64), ref, rtol=rtol,
                                   atol=rtol * np.abs(ref).max())


def test_varlen_e4m3_per_sequence_descales():
    rng = np.random.default_rng(30)
    lens_q, lens_k, hq, hkv, d = [3, 1, 5], [7, 2, 9], 4, 4, 16
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = _rand(rng, (cu_q[-1], hq, d), E4M3)
    k, v = (_rand(rng, (cu_k[-1], hkv, d), E4M3) for _ in range(2))
    qd, kd, vd = (rng.uniform(0.5, 2, (3, hkv)).astype(np.float32) for _ in range(3))
    o = flashattn.forward_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=5, max_seqlen_k=9,
                                 q_descale=qd, k_descale=kd, v_descale=vd)
    assert o.dtype == np.dtype(BF16)
    for bi in range(3):
        qs, ks = slice(cu_q[bi], cu_q[bi + 1]), slice(cu_k[bi], cu_k[bi + 1])
        ref, _ = attention(_dequantised(q[None, qs], qd[bi:bi + 1]),
                           _dequantised(k[None, ks], kd[bi:bi + 1]),
                           _dequantised(v[None, ks], vd[bi:bi + 1]))
        np.testing.assert_allclose(o[qs].astype(np.float64), ref[0], rtol=2.0**-8,
                                   atol=2.0**-8 * np.abs(ref).max())


def test_a_call_without_descales_after_one_with_them():
    """The descale pointers are this thread's only for the call that gave them."""
    rng = np.random.default_rng(40)
    q, k, v = (_rand(rng, (1, 9, 2, 16), E4M3) for _ in range(3))
    plain = flashattn.forward(q, k, v)
    flashattn.forward(q, k, v, v_descale=np.array([4.0], np.float32))
    again = flashattn.forward(q, k, v)
    np.testing.assert_array_equal(plain.view(np.uint16), again.view(np.uint16))


def test_refusals_name_what_is_wrong():
    rng = np.random.default_rng(50)
    q8, k8, v8 = (_rand(rng, (1, 4, 2, 16), E4M3) for _ in range(3))
    qb = _rand(rng, (1, 4, 2, 16), BF16)
    one = np.array([1.0], np.float32)
    with pytest.raises(TypeError, match="k has another dtype than q"):
        flashattn.forward(q8, qb, qb)
    with pytest.raises(TypeError, match="v has another dtype than k"):
        flashattn.forward(qb, k8, qb)
    with pytest.raises(TypeError, match="out must be bfloat16 or float16"):
        flashattn.forward(q8, k8, v8, out=np.empty((1, 4, 2, 16), np.float32))
    with pytest.raises(ValueError, match="q_descale has shape"):
        flashattn.forward(q8, k8, v8, q_descale=np.ones((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="all be per tensor or all"):
        flashattn.forward(q8, k8, v8, q_descale=one, k_descale=np.ones((1, 2), np.float32))
    with pytest.raises(ValueError, match="k_descale"):
        flashattn.forward(q8, k8, v8, k_descale=np.ones((2, 2), np.float32))  # batch is 1
    # A descale for a tensor that is not e4m3: the library's refusal, naming the field.
    with pytest.raises(flashattn.InvalidArgumentError, match="q_descale"):
        flashattn.forward(qb, k8, v8, q_descale=one)


@pytest.mark.parametrize("page_size", [None, 16])
def test_an_e4m3_cache_on_torch_cuda_matches_the_cpu(page_size):
    # torch.float8_e4m3fn CUDA tensors (read through their attributes, as bf16 ones) with bf16
    # queries: the GPU's result against the CPU backend's on the same bytes, decode and
    # speculative rows, per-(sequence, K/V head) descales on the GPU too.
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("needs a CUDA device and torch.float8_e4m3fn")
    rng = np.random.default_rng(31)
    batch, sq, hq, hkv, d, capacity = 3, 4, 8, 2, 128, 256
    lens = np.array([256, 17, 1], np.int32)
    q = _rand(rng, (batch, sq, hq, d), BF16)
    k_dense = _rand(rng, (batch, capacity, hkv, d), E4M3, 2.0)
    v_dense = _rand(rng, (batch, capacity, hkv, d), E4M3, 2.0)
    kd = rng.uniform(0.25, 2, (batch, hkv)).astype(np.float32)
    vd = rng.uniform(0.25, 2, (batch, hkv)).astype(np.float32)
    kwargs = dict(cache_seqlens=lens, causal=True, k_descale=kd, v_descale=vd, return_lse=True)
    if page_size is None:
        k_cache, v_cache, table = k_dense, v_dense, None
    else:
        k_cache, v_cache, table = _paged(rng, k_dense, v_dense, page_size)
        kwargs["block_table"] = table
    expected, expected_lse = flashattn.forward_kvcache(q, k_cache, v_cache, **kwargs)

    def cuda(x):
        if x.dtype == E4M3:  # the same bytes, as torch's e4m3fn
            return torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn).cuda()
        if x.dtype == BF16:
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda()
        return torch.from_numpy(x).cuda()

    gpu_kwargs = {key: cuda(x) if isinstance(x, np.ndarray) else x for key, x in kwargs.items()}
    o, lse = flashattn.forward_kvcache(cuda(q), cuda(k_cache), cuda(v_cache), **gpu_kwargs)
    torch.cuda.synchronize()
    assert o.dtype == torch.bfloat16 and tuple(o.shape) == (batch, sq, hq, d)
    got = o.float().cpu().numpy()
    # Both round O to bf16 (2^-9 relative); the GPU also rounds P to bf16 before P V.
    scale = np.abs(expected.astype(np.float64)).max()
    np.testing.assert_allclose(got, expected.astype(np.float64), atol=2e-2 * scale)
    np.testing.assert_allclose(lse.cpu().numpy(), expected_lse, atol=2e-3)


@pytest.mark.parametrize("layout", ["dense", "paged"])
def test_e4m3_queries_on_torch_cuda_match_the_cpu(layout):
    # e4m3 q, k and v as torch.float8_e4m3fn CUDA tensors (the sm90 FP8 kernels on Hopper):
    # the GPU's result against the CPU backend's on the same bytes, per-(sequence, K/V head)
    # descales on both. The GPU rounds P to e4m3 before P V (3 mantissa bits: 2^-4 relative),
    # the CPU keeps it in fp32, so O agrees to a few percent of its largest magnitude; a wrong
    # key order or layout would be off by its whole size.
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("needs a CUDA device and torch.float8_e4m3fn")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("e4m3 queries run on the sm90 family (compute capability 9.0)")
    rng = np.random.default_rng(37)
    batch, sq, hq, hkv, d = 2, 177, 4, 2, 128
    q = _rand(rng, (batch, sq, hq, d), E4M3, 2.0)
    qd = rng.uniform(0.25, 2, (batch, hkv)).astype(np.float32)
    kd = rng.uniform(0.25, 2, (batch, hkv)).astype(np.float32)
    vd = rng.uniform(0.25, 2, (batch, hkv)).astype(np.float32)
    scales = dict(q_descale=qd, k_descale=kd, v_descale=vd)

    def cuda(x):
        if x.dtype == E4M3:
            return torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn).cuda()
        return torch.from_numpy(x).cuda()

    # torch tensors carry no default output type for e4m3 queries: out= names bfloat16.
    out = torch.empty((batch, sq, hq, d), dtype=torch.bfloat16, device="cuda")
    if layout == "dense":
        k = _rand(rng, (batch, 300, hkv, d), E4M3, 2.0)
        v = _rand(rng, (batch, 300, hkv, d), E4M3, 2.0)
        expected, expected_lse = flashattn.forward(q, k, v, causal=True, return_lse=True, **scales)
        o, lse = flashattn.forward(cuda(q), cuda(k), cuda(v), causal=True, return_lse=True, out=out,
                                   **{key: cuda(x) for key, x in scales.items()})
    else:
        capacity = 512
        lens = np.array([500, 200], np.int32)
        k_dense = _rand(rng, (batch, capacity, hkv, d), E4M3, 2.0)
        v_dense = _rand(rng, (batch, capacity, hkv, d), E4M3, 2.0)
        k_cache, v_cache, table = _paged(rng, k_dense, v_dense, 64)
        kwargs = dict(cache_seqlens=lens, block_table=table, causal=True, return_lse=True, **scales)
        expected, expected_lse = flashattn.forward_kvcache(q, k_cache, v_cache, **kwargs)
        gpu_kwargs = {key: cuda(x) if isinstance(x, np.ndarray) else x for key, x in kwargs.items()}
        o, lse = flashattn.forward_kvcache(cuda(q), cuda(k_cache), cuda(v_cache), out=out,
                                           **gpu_kwargs)
    torch.cuda.synchronize()
    assert o.dtype == torch.bfloat16 and tuple(o.shape) == (batch, sq, hq, d)
    got = o.float().cpu().numpy()
    scale = np.abs(expected.astype(np.float64)).max()
    np.testing.assert_allclose(got, expected.astype(np.float64), atol=5e-2 * scale)
    # Hopper's tensor cores sum FP8 products with fewer mantissa bits than fp32: the LSE is
    # bounded by 2^-11 of the largest sum of |q_i k_i| a score has (scaled), plus 2e-3 (errors
    # reached 2^-12 of it on an H200).
    keys = k if layout == "dense" else k_dense
    qa = np.abs(q.astype(np.float64)).reshape(batch, sq, hkv, hq // hkv, d)
    ka = np.abs(keys.astype(np.float64))
    sums = np.einsum("bigrd,bjgd->bgrij", qa, ka).max(axis=(2, 3, 4))  # (batch, hkv)
    bound = 2e-3 + 2.0**-11 * (sums * qd * kd).max() / np.sqrt(d)
    np.testing.assert_allclose(lse.cpu().numpy(), expected_lse, atol=bound)
