"""Hostile arguments (issue 14): every integer is range-checked before ctypes sees it, flags are
real booleans, and each refusal is the ValueError or TypeError the module documents. Each test
names the defect it pins; test_argument_layer_property drives random arguments through the
whole layer."""
import ctypes
import random

import numpy as np
import pytest

import flashattn
from reference import attention


def _qkv(b=1, sq=3, sk=5, hq=2, hkv=1, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((b, sq, hq, d), dtype=np.float32),
            rng.standard_normal((b, sk, hkv, d), dtype=np.float32),
            rng.standard_normal((b, sk, hkv, d), dtype=np.float32))


# Defect 7: a 0-row k was declared as 1 row, so cu_seqlens_k = [0, 1] passed the library's bounds
# check and a key row outside k was read (ASan: heap-buffer-overflow; an empty slice of a larger
# array silently read its parent's row).
def test_varlen_zero_key_rows_are_refused():
    q = np.ones((2, 1, 8), np.float32)
    parent = np.full((4, 1, 8), 7.0, np.float32)
    cu_q, cu_k = np.array([0, 2], np.int32), np.array([0, 1], np.int32)
    # Empty views with row strides (the library would see a row at k's base pointer).
    for k in (np.ones((1, 1, 8), np.float32)[1:], parent[2:2]):
        with pytest.raises(ValueError, match="total_k = 0"):
            flashattn.forward_varlen(q, k, k, cu_q, cu_k, max_seqlen_q=2, max_seqlen_k=1)


# Defect 8: integers outside a C field's range wrapped silently in ctypes.
@pytest.mark.parametrize("kwargs, name", [
    (dict(window=(2**64 + 3, 0)), "window"),
    (dict(window=(0, -2**63 - 1)), "window"),
])
def test_forward_integers_out_of_range_raise(kwargs, name):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=name):
        flashattn.forward(q, k, v, **kwargs)


def test_context_device_out_of_range_raises():
    for device in (2**32 - 1, 2**31, -2**31 - 1, 2**64):
        with pytest.raises(ValueError, match="device"):
            flashattn.Context(device=device)
    with pytest.raises(TypeError, match="device"):
        flashattn.Context(device=1.5)


def test_kvcache_and_varlen_integers_out_of_range_raise():
    q, k, v = _qkv()
    lens = np.array([5], np.int32)
    with pytest.raises(ValueError, match="num_splits"):
        flashattn.forward_kvcache(q, k, v, cache_seqlens=lens, num_splits=2**32 + 1)
    qv = q[0]
    cu_q, cu_k = np.array([0, 3], np.int32), np.array([0, 5], np.int32)
    with pytest.raises(ValueError, match="max_seqlen_q"):
        flashattn.forward_varlen(qv, k[0], v[0], cu_q, cu_k, max_seqlen_q=2**64 + 3,
                                 max_seqlen_k=5)
    with pytest.raises(TypeError, match="max_seqlen_k"):
        flashattn.forward_varlen(qv, k[0], v[0], cu_q, cu_k, max_seqlen_q=3, max_seqlen_k=5.5)


def test_struct_fields_refuse_values_ctypes_would_wrap():
    from flashattn import _ffi
    cfg = _ffi.fa_config()
    with pytest.raises(ValueError, match="fa_config.batch"):
        cfg.batch = 2**63
    with pytest.raises(ValueError, match="fa_config.num_splits"):
        cfg.num_splits = 2**31
    cfg.batch = np.int64(7)
    assert cfg.batch == 7


# Defect 9: causal="False" ran causal attention; return_lse="no" returned the LSE.
@pytest.mark.parametrize("flag", ["causal", "return_lse"])
@pytest.mark.parametrize("value", ["False", "no", 0, 1, None, 1.0])
def test_flags_must_be_booleans(flag, value):
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=flag):
        flashattn.forward(q, k, v, **{flag: value})


def test_numpy_booleans_are_flags():
    q, k, v = _qkv()
    o, lse = flashattn.forward(q, k, v, causal=np.bool_(True), return_lse=np.bool_(True))
    ro, rl = attention(q, k, v, causal=True)
    np.testing.assert_allclose(o, ro, atol=2e-5)
    assert isinstance(flashattn.forward(q, k, v, return_lse=np.bool_(False)), np.ndarray)


# Defect 10: merge_states on strided (non-dense) O views without out= failed with a ValueError
# about out (the output it allocated did not keep the inputs' strides).
def test_merge_states_of_strided_views_allocates_matching_strides():
    rng = np.random.default_rng(3)
    base_a = rng.standard_normal((2, 6, 3, 8), dtype=np.float32)
    base_b = rng.standard_normal((2, 6, 3, 8), dtype=np.float32)
    a, b = base_a[:, ::2], base_b[:, ::2]
    la = rng.standard_normal((2, 3, 3), dtype=np.float32)
    lb = rng.standard_normal((2, 3, 3), dtype=np.float32)
    o, lse = flashattn.merge_states(a, la, b, lb)
    assert o.shape == a.shape and o.strides == a.strides
    top = np.maximum(la, lb)
    wa, wb = np.exp(la - top), np.exp(lb - top)
    want = (wa.transpose(0, 2, 1)[..., None] * a + wb.transpose(0, 2, 1)[..., None] * b) / (
        wa + wb).transpose(0, 2, 1)[..., None]
    np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, top + np.log(wa + wb), rtol=1e-5)


# Defect 11: kernel=12 raised AttributeError, a 0-d cu_seqlens_q IndexError.
def test_kernel_must_be_a_name():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="kernel"):
        flashattn.forward(q, k, v, kernel=12)


def test_cu_seqlens_must_be_one_dimensional():
    q = np.ones((3, 1, 8), np.float32)
    cu = np.array([0, 3], np.int32)
    for bad in (np.array(3, np.int32), np.array([], np.int32), np.zeros((1, 2), np.int32)):
        with pytest.raises(ValueError, match="cu_seqlens_q"):
            flashattn.forward_varlen(q, q, q, bad, cu, max_seqlen_q=3, max_seqlen_k=3)


# Values at and past the C ranges, and values of the wrong type, for each integer argument.
_EDGES = [0, 1, -1, 2**31 - 1, 2**31, -2**31 - 1, 2**32 - 1, 2**63 - 1, 2**63, -2**63,
          -2**63 - 1, 2**64 + 3, 3.0, "3", None, True, np.int64(2), np.int32(-1)]
_DOCUMENTED = (ValueError, TypeError, flashattn.FlashAttnError)


def _expect_documented(call):
    """Runs `call`; returns True on success, False on a documented refusal, and fails the test
    on any other exception (AttributeError, IndexError, OverflowError, ctypes.ArgumentError)."""
    try:
        call()
        return True
    except _DOCUMENTED:
        return False


def test_argument_layer_property():
    """A seeded generator of argument sets for forward, forward_varlen, forward_kvcache and
    merge_states: each call succeeds or raises a documented exception, and no call whose
    integer lies outside int64 (or a flag that is not a bool) succeeds: nothing wraps."""
    rng = random.Random(14)
    q, k, v = _qkv(b=2, sq=3, sk=5, hq=2, hkv=1, d=8)
    lens = np.array([5, 3], np.int32)
    cu_q, cu_k = np.array([0, 2, 3], np.int32), np.array([0, 4, 5], np.int32)
    flags = [True, False, np.bool_(True), "False", 0, None]
    for _ in range(400):
        which = rng.randrange(4)
        left, right = rng.choice(_EDGES), rng.choice(_EDGES)
        causal, ret = rng.choice(flags), rng.choice(flags)
        num = rng.choice(_EDGES)
        used = (left, right, num) if which == 2 else (left, right)
        wraps = any(isinstance(x, int) and not -2**63 <= x < 2**63 for x in used)
        not_bool = any(not isinstance(f, (bool, np.bool_)) for f in (causal, ret))
        if which == 0:
            ok = _expect_documented(lambda: flashattn.forward(
                q, k, v, window=(left, right), causal=causal, return_lse=ret))
        elif which == 1:
            ok = _expect_documented(lambda: flashattn.forward_varlen(
                q[0], k[0], v[0], cu_q, cu_k, max_seqlen_q=left, max_seqlen_k=right,
                causal=causal, return_lse=ret))
        elif which == 2:
            ok = _expect_documented(lambda: flashattn.forward_kvcache(
                q, k, v, cache_seqlens=lens, num_splits=num, window=(left, right),
                causal=causal, return_lse=ret))
        else:
            not_bool = False
            la = np.zeros((2, 2, 3), np.float32)
            ok = _expect_documented(lambda: flashattn.merge_states(
                q, la, q, la, stream=rng.choice([None, left])))
            wraps = False
        assert not (ok and (wraps or not_bool)), (which, left, right, num, causal, ret)


def test_cuda_array_interface_pointers_out_of_range_raise():
    class Fake:
        def __init__(self, ptr):
            self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (1, 1, 1, 8),
                                             "typestr": "<f2", "version": 3}

    from flashattn import _tensors
    for ptr in (-1, 2**64, "0"):
        with pytest.raises(ValueError, match="pointer"):
            _tensors.describe(Fake(ptr), "q")


# Defect 12: merge_states read a broadcast o_a (all-zero leading strides, which fa_merge_config
# reads as packed) far past its elements, and wrote a new o of the same strides past its buffer.
def test_merge_states_refuses_broadcast_o():
    a = np.broadcast_to(np.ones(8, np.float32), (2, 4, 3, 8))
    lse = np.zeros((2, 3, 4), np.float32)
    buf = np.zeros(264, np.float32)
    o = np.lib.stride_tricks.as_strided(buf, (2, 4, 3, 8), (0, 0, 0, 4))
    for out in (None, (o, np.empty_like(lse))):
        with pytest.raises(ValueError, match="o_a is broadcast"):
            flashattn.merge_states(a, lse, a, lse, out=out)
    assert not buf.any()


# Defect 13: a big-endian float32 or int32 array is named float32 / int32 too, and its bytes were
# read as the machine's (wrong slopes, sinks, descales, LSEs; cache lengths such as 83886080).
def test_index_and_float32_arrays_in_another_byte_order_are_refused():
    q, k, v = _qkv(hq=2, hkv=2)
    slopes = np.array([0.5, 0.25], np.float32)
    for kwargs, name in ((dict(alibi_slopes=slopes.astype(">f4")), "alibi_slopes"),
                         (dict(sinks=slopes.astype(">f4")), "sinks")):
        with pytest.raises(TypeError, match=f"{name}: byte order"):
            flashattn.forward(q, k, v, **kwargs)
    with pytest.raises(TypeError, match="cache_seqlens: byte order"):
        flashattn.forward_kvcache(q, k, v, cache_seqlens=np.array([5], ">i4"))
    o = np.ones((1, 3, 2, 8), np.float32)
    lse = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(TypeError, match="lse_b: byte order"):
        flashattn.merge_states(o, lse, o, lse.astype(">f4"))
    # The native arrays still pass after a refused one (the dtype cache holds native types only).
    flashattn.forward(q, k, v, alibi_slopes=slopes)
    flashattn.merge_states(o, lse, o, lse)


# Defect 14: a positive softcap that is 0 in float32 turned soft-capping off without a word.
def test_softcap_that_rounds_to_zero_is_refused():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="softcap = 1e-300 is 0 in float32"):
        flashattn.forward(q, k, v, softcap=1e-300)
    capped = flashattn.forward(q, k, v, softcap=1e-30)
    assert not np.array_equal(capped, flashattn.forward(q, k, v))


# Defect 15: a detail message cut inside a UTF-8 sequence raised UnicodeDecodeError, and a kernel
# name that UTF-8 cannot encode UnicodeEncodeError; a NUL cut the name short before parsing.
def test_error_messages_and_kernel_names_outside_ascii():
    q, k, v = _qkv()
    for name in ("é" * 1000, "\udcff", "sm80" + "\0" + "x"):
        with pytest.raises(flashattn.ParseError):
            flashattn.forward(q, k, v, kernel=name)
    # The library's parse error names the text, cut at its message's fixed length: of two texts
    # whose two-byte characters start one byte apart, one is cut inside a character.
    from flashattn import _ffi, errors
    kc = _ffi.fa_kernel_config()
    errors.check(_ffi.lib().fa_kernel_config_init(ctypes.byref(kc)))
    details = []
    for text in ("é" * 1000, "a" + "é" * 1000):
        status = _ffi.lib().fa_kernel_config_parse(text.encode(), ctypes.byref(kc))
        with pytest.raises(flashattn.ParseError) as raised:
            errors.check(status)
        details.append(raised.value.detail)
    assert any("\ufffd" in d for d in details), details


# Defect 16: merge_states without out= refused an o_a whose extent-1 dimension had a stride other
# than the packed one (numpy calls it contiguous, so the new o got packed strides), naming out;
# and a negative stride was reported as out's mismatch.
def test_merge_states_strides_of_extent_one_dimensions_do_not_matter():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 5, 8), dtype=np.float32)[:, :, None, :]  # strides (40, 8, 0, 1)
    b = rng.standard_normal((2, 5, 8), dtype=np.float32)[:, :, None, :]
    la = rng.standard_normal((2, 1, 5), dtype=np.float32)
    lb = rng.standard_normal((2, 1, 5), dtype=np.float32)
    o, lse = flashattn.merge_states(a, la, b, lb)
    top = np.maximum(la, lb)
    wa, wb = np.exp(la - top), np.exp(lb - top)
    w = lambda x: x.transpose(0, 2, 1)[..., None]
    np.testing.assert_allclose(o, (w(wa) * a + w(wb) * b) / w(wa + wb), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, top + np.log(wa + wb), rtol=1e-5)
    # out= with the packed strides of the same shape is the same memory layout.
    o2, _ = flashattn.merge_states(a, la, b, lb, out=(np.empty((2, 5, 1, 8), np.float32), None))
    np.testing.assert_array_equal(o2, o)
    with pytest.raises(ValueError, match=r"o_a: strides .* must be >= 0"):
        flashattn.merge_states(a[:, ::-1], la, b[:, ::-1], lb)


# Defect 17: an lse out= whose extent-1 dimension had a stride other than the packed one (numpy
# calls it contiguous) was refused as not contiguous.
def test_lse_out_strides_of_extent_one_dimensions_do_not_matter():
    q, k, v = _qkv(b=1, sq=3, hq=2, hkv=1)
    want_o, want_lse = flashattn.forward(q, k, v, return_lse=True)
    lse = np.full((2, 3, 1), np.nan, np.float32).transpose(2, 0, 1)  # (1, 2, 3), strides (4, 12, 4)
    assert lse.flags.c_contiguous and lse.strides[0] != 2 * 3 * 4
    o, got = flashattn.forward(q, k, v, return_lse=True, out=(np.empty_like(want_o), lse))
    assert got is lse
    np.testing.assert_array_equal(lse, want_lse)
    with pytest.raises(ValueError, match="lse must be a contiguous"):
        flashattn.forward(q, k, v, return_lse=True,
                          out=(np.empty_like(want_o), np.zeros((1, 3, 2), np.float32).transpose(0, 2, 1)))


# Defect 18: argument mistakes met Python's own messages: out=(o,) "not enough values to unpack",
# merge_states(out=array) unpacked the array along its first dimension, softcap="x" "'<' not
# supported", and a negative max_seqlen was raised to 1 without a word.
def test_argument_mistakes_are_named():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="pair"):
        flashattn.forward(q, k, v, out=(np.empty_like(q),))
    for cap in ("x", None):
        with pytest.raises(TypeError, match="softcap must be a number"):
            flashattn.forward(q, k, v, softcap=cap)
    o = np.ones((2, 3, 2, 8), np.float32)
    lse = np.zeros((2, 2, 3), np.float32)
    with pytest.raises(TypeError, match="out must be a pair"):
        flashattn.merge_states(o, lse, o, lse, out=np.empty_like(o))
    cu = np.array([0, 3], np.int32)
    with pytest.raises(ValueError, match="max_seqlen_q = -1"):
        flashattn.forward_varlen(q[0], k[0], v[0], cu, np.array([0, 5], np.int32),
                                 max_seqlen_q=-1, max_seqlen_k=5)
