"""Naive attention in numpy: float64 (the truth) and the same-precision yardstick the C++ tests
use (fp32 scores from the dtype inputs, P rounded to the dtype, O rounded to the dtype)."""
import numpy as np


def _visible(sq, sk, causal):
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    return (j <= i + sk - sq) if causal else np.ones((sq, sk), dtype=bool)


def attention(q, k, v, causal=False, scale=None, p_dtype=None, accum=np.float64):
    """q (b, sq, hq, d), k/v (b, sk, hkv, d) float arrays -> (o (b, sq, hq, d), lse (b, hq, sq))."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    group = hq // hkv
    kk = np.repeat(k.astype(accum), group, axis=2)
    vv = np.repeat(v.astype(accum), group, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q.astype(accum), kk) * accum(scale)
    mask = _visible(sq, sk, causal)
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0)
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    if p_dtype is not None:
        p = p.astype(p_dtype).astype(accum)
    o = np.einsum("bhqk,bkhd->bqhd", p, vv) / np.where(l > 0, l, 1).transpose(0, 2, 1, 3)
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, m_safe[..., 0] + np.log(l[..., 0]), -np.inf)
    return o, lse
