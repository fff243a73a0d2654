"""flashattn.forward against numpy float64, on numpy arrays (CPU backend) and on PyTorch CUDA
tensors: shapes, strides, dtypes, LSE, out=, streams."""
import itertools

import numpy as np
import pytest

import flashattn
from reference import attention

ATOL = {"float32": 1e-5, "float16": 2e-4, "bfloat16": 1e-3}


def _data(rng, b, s, h, d):
    # Non-zero values (|x| >= 1/64), as the C++ tests use.
    x = rng.uniform(1 / 64, 1, size=(b, s, h, d)) * rng.choice([-1.0, 1.0], size=(b, s, h, d))
    return x


def _check(backend, q, k, v, o, lse, causal=False, scale=None, lse_ref=True):
    """O within 2x the same-precision naive error + atol of float64 (the C++ tests' bound); LSE
    within 2e-3; no NaN anywhere."""
    qn, kn, vn = (backend.numpy(x) for x in (q, k, v))
    ref_o, ref_lse = attention(qn, kn, vn, causal, scale)
    dtype = str(q.dtype).replace("torch.", "")
    if dtype == "float32":
        naive_err = 0.0
    else:
        p_dtype = backend.np_dtype(dtype)
        naive_o, _ = attention(qn.astype(np.float32), kn.astype(np.float32),
                               vn.astype(np.float32), causal, scale, p_dtype=p_dtype,
                               accum=np.float32)
        naive_err = np.abs(naive_o.astype(p_dtype).astype(np.float64) - ref_o).max()
    got = backend.numpy(o)
    assert np.isfinite(got).all()
    err = np.abs(got - ref_o).max()
    assert err <= 2 * naive_err + ATOL[dtype], (err, naive_err)
    if lse is not None and lse_ref:
        got_lse = backend.numpy(lse)
        assert got_lse.shape == ref_lse.shape
        assert np.array_equal(np.isinf(got_lse), np.isinf(ref_lse))
        finite = np.isfinite(ref_lse)
        assert np.abs(got_lse[finite] - ref_lse[finite]).max(initial=0) <= 2e-3


LENGTHS = [1, 17, 64, 177]


@pytest.mark.parametrize("sq,sk", list(itertools.product(LENGTHS, LENGTHS)))
@pytest.mark.parametrize("causal", [False, True])
def test_lengths(backend, sq, sk, causal):
    rng = np.random.default_rng([sq, sk, causal])
    ratio = [1, 2, 4, 8][(sq + sk) % 4]
    for dtype in backend.dtypes():
        q = backend.array(_data(rng, 2, sq, 2 * ratio, 64), dtype)
        k = backend.array(_data(rng, 2, sk, 2, 64), dtype)
        v = backend.array(_data(rng, 2, sk, 2, 64), dtype)
        o, lse = flashattn.forward(q, k, v, causal=causal, return_lse=True)
        assert tuple(o.shape) == (2, sq, 2 * ratio, 64)
        assert tuple(lse.shape) == (2, 2 * ratio, sq)
        _check(backend, q, k, v, o, lse, causal)


# 40, 96 and 192 run on the kernels of the next built head dim (zero columns) on a GPU.
@pytest.mark.parametrize("head_dim", [40, 64, 96, 128, 192, 256])
def test_head_dims_and_scale(backend, head_dim):
    rng = np.random.default_rng(head_dim)
    for dtype in backend.dtypes():
        q = backend.array(_data(rng, 1, 130, 4, head_dim), dtype)
        k = backend.array(_data(rng, 1, 97, 1, head_dim), dtype)
        v = backend.array(_data(rng, 1, 97, 1, head_dim), dtype)
        o = flashattn.forward(q, k, v, softmax_scale=0.2)
        _check(backend, q, k, v, o, None, scale=0.2)


@pytest.mark.parametrize("d,dv", [(192, 128), (128, 64)])
def test_value_head_dim_below_head_dim(backend, d, dv):
    """DeepSeek's 192/128: v and out carry head_dim_v, the scale stays 1/sqrt(head_dim)."""
    rng = np.random.default_rng(d + dv)
    for dtype in backend.dtypes():
        q = backend.array(_data(rng, 2, 77, 4, d), dtype)
        k = backend.array(_data(rng, 2, 130, 2, d), dtype)
        v = backend.array(_data(rng, 2, 130, 2, dv), dtype)
        o, lse = flashattn.forward(q, k, v, causal=True, return_lse=True)
        assert tuple(o.shape) == (2, 77, 4, dv)
        _check(backend, q, k, v, o, lse, causal=True)


def test_longer_sequences(backend):
    rng = np.random.default_rng(1013)
    dtype = backend.dtypes()[-1]
    q = backend.array(_data(rng, 1, 1013, 2, 128), dtype)
    k = backend.array(_data(rng, 1, 1024, 2, 128), dtype)
    v = backend.array(_data(rng, 1, 1024, 2, 128), dtype)
    for causal in (False, True):
        o, lse = flashattn.forward(q, k, v, causal=causal, return_lse=True)
        _check(backend, q, k, v, o, lse, causal)


def test_strided_views(backend):
    """q, k, v as views of one packed QKV tensor; out as a view of a wider buffer; a
    (batch, heads, seq, dim) tensor transposed."""
    rng = np.random.default_rng(7)
    hq, hkv, d = 4, 2, 64
    for dtype in backend.dtypes():
        qkv = backend.array(_data(rng, 2, 77, hq + 2 * hkv, d), dtype)
        q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
        # 8 elements (16 bytes) of padding on each side keeps rows 16-byte aligned for the GPU.
        wide = backend.empty((2, 77, hq, d + 16), dtype)
        out = wide[..., 8:8 + d]
        o = flashattn.forward(q, k, v, out=out, causal=True)
        assert o is out
        _check(backend, q, k, v, out, None, causal=True)
        padding = backend.numpy(wide)
        assert np.isnan(padding[..., :8]).all() and np.isnan(padding[..., 8 + d:]).all()
        bhsd = backend.array(_data(rng, 2, hq, 50, d), dtype)
        q2 = bhsd.transpose(1, 2) if backend.gpu else bhsd.transpose(0, 2, 1, 3)
        o2 = flashattn.forward(q2, k[:, :50], v[:, :50])
        _check(backend, q2, k[:, :50], v[:, :50], o2, None)


def test_rows_without_keys(backend):
    """Causal with seqlen_q > seqlen_k: the first rows see no key: out 0, LSE -inf."""
    rng = np.random.default_rng(3)
    dtype = backend.dtypes()[-1]
    q = backend.array(_data(rng, 1, 40, 2, 64), dtype)
    k = backend.array(_data(rng, 1, 16, 2, 64), dtype)
    v = backend.array(_data(rng, 1, 16, 2, 64), dtype)
    o, lse = flashattn.forward(q, k, v, causal=True, return_lse=True)
    got, got_lse = backend.numpy(o), backend.numpy(lse)
    assert (got[:, :24] == 0).all()
    assert np.isneginf(got_lse[:, :, :24]).all()
    _check(backend, q, k, v, o, lse, causal=True)


def test_out_and_lse_in_place(backend):
    rng = np.random.default_rng(11)
    dtype = backend.dtypes()[-1]
    q = backend.array(_data(rng, 2, 33, 2, 64), dtype)
    k = backend.array(_data(rng, 2, 45, 2, 64), dtype)
    v = backend.array(_data(rng, 2, 45, 2, 64), dtype)
    out = backend.empty((2, 33, 2, 64), dtype)
    lse = backend.empty((2, 2, 33), "float32")
    o, l = flashattn.forward(q, k, v, out=(out, lse), return_lse=True)
    assert o is out and l is lse
    _check(backend, q, k, v, out, lse)


def test_non_default_stream(backend):
    if not backend.gpu:
        pytest.skip("streams are GPU-only")
    torch = backend.torch
    rng = np.random.default_rng(5)
    q = backend.array(_data(rng, 4, 512, 8, 128), "bfloat16")
    k = backend.array(_data(rng, 4, 512, 8, 128), "bfloat16")
    v = backend.array(_data(rng, 4, 512, 8, 128), "bfloat16")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the producer's current stream is the default for stream=None
        o1 = flashattn.forward(q, k, v)
    o2 = flashattn.forward(q, k, v, stream=side)  # a stream object
    o3 = flashattn.forward(q, k, v, stream=side.cuda_stream)  # a raw handle
    side.synchronize()
    for o in (o1, o2, o3):
        _check(backend, q, k, v, o, None)


def test_matches_torch_sdpa_float64(backend):
    """Against PyTorch's own attention in float64 on the GPU, the C++ tests' bound."""
    if not backend.gpu:
        pytest.skip("PyTorch CUDA only")
    torch = backend.torch
    rng = np.random.default_rng(9)
    for dtype, causal in itertools.product(["float16", "bfloat16"], [False, True]):
        q = backend.array(_data(rng, 2, 1013, 8, 128), dtype)
        k = backend.array(_data(rng, 2, 1024, 2, 128), dtype)
        v = backend.array(_data(rng, 2, 1024, 2, 128), dtype)
        o = flashattn.forward(q, k, v, causal=causal)
        q64, k64, v64 = (x.double().transpose(1, 2) for x in (q, k, v))
        mask = None
        if causal:  # bottom-right aligned
            i = torch.arange(1013, device="cuda")[:, None]
            j = torch.arange(1024, device="cuda")[None, :]
            mask = j <= i + (1024 - 1013)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q64, k64, v64, attn_mask=mask, enable_gqa=True).transpose(1, 2)
        low = torch.nn.functional.scaled_dot_product_attention(
            *(x.transpose(1, 2) for x in (q, k, v)), attn_mask=mask,
            enable_gqa=True).transpose(1, 2).double()
        naive_err = (low - ref).abs().max().item()
        err = (o.double() - ref).abs().max().item()
        assert err <= 2 * naive_err + ATOL[dtype], (dtype, causal, err, naive_err)


def _bhsd(backend, x):
    """(b, s, h, d) -> a (b, h, s, d) array of its own (contiguous in that order)."""
    if backend.gpu:
        return x.transpose(1, 2).contiguous()
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))


def _to_bshd(backend, x):
    return x.transpose(1, 2) if backend.gpu else x.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("causal", [False, True])
def test_bhsd_layout(backend, causal):
    """(batch, heads, seq, dim) arrays give the bshd result transposed, bit for bit, and match
    float64; out= in that layout is written; lse keeps (batch, heads_q, seqlen_q)."""
    rng = np.random.default_rng(21)
    for dtype in backend.dtypes():
        q = backend.array(_data(rng, 2, 37, 4, 64), dtype)
        k = backend.array(_data(rng, 2, 53, 2, 64), dtype)
        v = backend.array(_data(rng, 2, 53, 2, 64), dtype)
        o_ref, lse_ref = flashattn.forward(q, k, v, causal=causal, return_lse=True)
        qt, kt, vt = (_bhsd(backend, x) for x in (q, k, v))
        o, lse = flashattn.forward(qt, kt, vt, causal=causal, return_lse=True, layout="bhsd")
        assert tuple(o.shape) == (2, 4, 37, 64) and tuple(lse.shape) == (2, 4, 37)
        assert np.array_equal(backend.numpy(_to_bshd(backend, o)), backend.numpy(o_ref))
        assert np.array_equal(backend.numpy(lse), backend.numpy(lse_ref))
        _check(backend, q, k, v, _to_bshd(backend, o), lse, causal)
        out = backend.empty((2, 4, 37, 64), dtype)
        assert flashattn.forward(qt, kt, vt, causal=causal, out=out, layout="bhsd") is out
        assert np.array_equal(backend.numpy(out), backend.numpy(o))


def test_bad_layout_and_shapes_in_layout_terms(backend):
    rng = np.random.default_rng(22)
    dtype = backend.dtypes()[-1]
    q = backend.array(_data(rng, 1, 16, 2, 64), dtype)
    with pytest.raises(ValueError, match="layout 'bsdh'"):
        flashattn.forward(q, q, q, layout="bsdh")
    with pytest.raises(ValueError, match=r"4 dimensions \(batch, heads, seq, head_dim\)"):
        flashattn.forward(q[0], q, q, layout="bhsd")
    # (1, 16, 2, 64) read as bhsd has 16 heads; k with 3 heads is no divisor: the library says so.
    k = backend.array(_data(rng, 1, 3, 2, 64), dtype)
    with pytest.raises(flashattn.InvalidArgumentError, match="heads_q = 16 .* heads_kv = 3"):
        flashattn.forward(q, k, k, layout="bhsd")


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("empty_dim", ["batch", "seqlen_q", "heads_q"])
def test_no_query_rows_give_empty_results(backend, layout, empty_dim):
    """As PyTorch does: an empty out (and lse) of the right shape, without calling the library,
    whatever seqlen_k is."""
    dtype = backend.dtypes()[-1]
    b, sq, hq, sk, hkv, d = 2, 5, 4, 7, 2, 64
    b, sq, hq = (0 if empty_dim == "batch" else b, 0 if empty_dim == "seqlen_q" else sq,
                 0 if empty_dim == "heads_q" else hq)
    hkv = 0 if empty_dim == "heads_q" else hkv

    def make(batch, seq, heads):
        shape = (batch, seq, heads, d) if layout == "bshd" else (batch, heads, seq, d)
        return backend.array(np.ones(shape), dtype)

    q, k = make(b, sq, hq), make(b, sk, hkv)
    o, lse = flashattn.forward(q, k, k, return_lse=True, layout=layout, causal=True)
    assert tuple(o.shape) == tuple(q.shape)
    assert tuple(lse.shape) == (b, hq, sq)
    out = backend.empty(tuple(q.shape), dtype)
    assert flashattn.forward(q, k, k, out=out, layout=layout) is out


def test_zero_sizes_with_query_rows_are_named(backend):
    dtype = backend.dtypes()[-1]
    q = backend.array(np.ones((1, 4, 2, 64)), dtype)
    with pytest.raises(ValueError, match=r"seqlen_k = 0 \(shape \(1, 0, 2, 64\)\)"):
        flashattn.forward(q, *[backend.array(np.ones((1, 0, 2, 64)), dtype)] * 2)
    with pytest.raises(ValueError, match=r"heads_kv = 0 \(shape \(1, 4, 0, 64\)\) for 2 query"):
        flashattn.forward(q, *[backend.array(np.ones((1, 4, 0, 64)), dtype)] * 2)
    e = backend.array(np.ones((1, 4, 2, 0)), dtype)
    with pytest.raises(ValueError, match=r"head_dim is 0 \(q shape \(1, 4, 2, 0\)\)"):
        flashattn.forward(e, e, e)


def test_cached_plans_follow_every_argument(backend):
    """Calls that differ only in causal, scale, strides or kernel-free flags reuse no stale plan:
    each matches the float64 reference, and a repeated call is a cache hit."""
    rng = np.random.default_rng(23)
    dtype = backend.dtypes()[-1]
    qkv = backend.array(_data(rng, 1, 40, 6, 64), dtype)
    q, k, v = qkv[:, :, :2], qkv[:, :, 2:4], qkv[:, :, 4:]
    packed = [backend.array(backend.numpy(x), dtype) for x in (q, k, v)]
    for args in ((q, k, v), tuple(packed)):
        for causal in (False, True):
            for scale in (None, 0.3, -0.3 if not backend.gpu else 0.05):
                o = flashattn.forward(*args, causal=causal, softmax_scale=scale)
                _check(backend, *args, o, None, causal=causal, scale=scale)
    plans = flashattn._context(-1 if not backend.gpu else 0)._plans
    hits = plans.cache_info().hits
    flashattn.forward(q, k, v, causal=True, softmax_scale=0.3)
    assert plans.cache_info().hits == hits + 1


def test_failures_are_not_cached(backend):
    rng = np.random.default_rng(24)
    dtype = backend.dtypes()[-1]
    q = backend.array(_data(rng, 1, 8, 5, 64), dtype)
    k = backend.array(_data(rng, 1, 8, 2, 64), dtype)
    for _ in range(2):
        with pytest.raises(flashattn.InvalidArgumentError, match="heads_q = 5"):
            flashattn.forward(q, k, k)
    with pytest.raises(ValueError, match="k and v shapes differ"):
        flashattn.forward(q, k, k[:, :4])


def test_threads_share_plans(backend):
    """Several threads run the same and different problems at once through the shared cached
    plans; every result matches its single-threaded one."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(25)
    dtype = backend.dtypes()[-1]
    problems = [tuple(backend.array(_data(rng, 1, s, 2, 64), dtype) for _ in range(3))
                for s in (9, 17, 33)]
    expected = [backend.numpy(flashattn.forward(*p)) for p in problems]

    def run(i):
        return backend.numpy(flashattn.forward(*problems[i % 3]))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(24)))
    for i, got in enumerate(results):
        assert np.array_equal(got, expected[i % 3])
