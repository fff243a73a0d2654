"""FlashAttention forward through libflashattn.

The package is a thin ctypes layer over the C library ``libflashattn.so``: every check of an
attention problem and all of its computation are the library's.

Arrays
------
numpy arrays run on the CPU backend (float32, float16, and bfloat16 through ``ml_dtypes``).
CUDA arrays run on their GPU (float16, bfloat16): PyTorch tensors, and anything with
``__dlpack__`` or ``__cuda_array_interface__`` (CuPy, JAX, Numba, ...). No array library is
imported by this package.

Shapes, in the default ``layout="bshd"``::

    q    (batch, seqlen_q, heads_q, head_dim)
    k    (batch, seqlen_k, heads_kv, head_dim), heads_q a multiple of heads_kv (GQA/MQA)
    v    (batch, seqlen_k, heads_kv, head_dim_v), head_dim_v v's own (DeepSeek's 192/128)
    out  (batch, seqlen_q, heads_q, head_dim_v), the dtype of q
    lse  (batch, heads_q, seqlen_q), float32, natural log

The value head dim head_dim_v comes from v's last dimension: the CPU backend runs any,
the GPU kernels head_dim_v = head_dim only (UnsupportedError otherwise).

``layout="bhsd"`` swaps the seq and heads dimensions of q, k, v and out (PyTorch's
``scaled_dot_product_attention`` order); lse keeps its shape. The last dimension of every array
must be contiguous; the other strides are free, so views need no copy.

Functions
---------
forward          attention forward (masks, soft-capping, ALiBi, sinks); returns out, or (out, lse)
forward_varlen   the same over variable-length sequences packed along one token dimension
forward_kvcache  new query rows against a contiguous or paged KV cache (decode, split-KV)
merge_states     combine two partial results over disjoint key sets
autotune       time the GPU kernels for a problem and keep the fastest
kernels        names of the GPU kernels compiled into the library
save_tuning    write tuning results to a file
load_tuning    read them back
version        the loaded library's version

Errors
------
A failing library call raises the subclass of FlashAttnError for its status (see
flashattn.errors), with the library's message naming the offending value. Arguments that cannot
be mapped onto the library's problem description raise ValueError or TypeError, before the
library is called: TypeError for an argument of the wrong type (an integer argument that is a
float, string or bool; a flag such as ``causal`` or ``return_lse`` that is not a Python or numpy
bool; a kernel that is not a str), ValueError for a value outside what its C field holds (an
integer outside int64, or int32 for ``num_splits`` and ``device``) or shapes, strides and devices
that do not fit together. Nothing else escapes a call.

Examples
--------
>>> import numpy as np, flashattn
>>> q = np.random.randn(2, 128, 8, 64).astype(np.float32)
>>> k = np.random.randn(2, 256, 2, 64).astype(np.float32)
>>> v = np.random.randn(2, 256, 2, 64).astype(np.float32)
>>> out, lse = flashattn.forward(q, k, v, causal=True, return_lse=True)
>>> out.shape, lse.shape
((2, 128, 8, 64), (2, 8, 128))
"""
import collections
import ctypes
import functools
import operator
import os
import sys
import threading
from typing import Any, List, Literal, Optional, Tuple, Union

from . import _ffi, _tensors
from .errors import (ArchMismatchError, BadStructSizeError, CudaError, FlashAttnError,
                     InternalError, InvalidArgumentError, InvalidKernelConfigError,
                     ParseError, KernelNotAvailableError, NoDeviceError,
                     OutOfMemoryError, TuningEntriesIgnoredWarning, TuningFileError,
                     UnsupportedError, WorkspaceTooSmallError, WrongContextError, check)

# The package's version: the version of the library it is written against (a test checks that
# the loaded library reports the same).
__version__ = "0.3.0"

__all__ = [
    "Context", "forward", "forward_varlen", "forward_kvcache", "merge_states", "autotune",
    "kernels", "save_tuning", "load_tuning", "version",
    "FlashAttnError", "InvalidArgumentError", "BadStructSizeError", "UnsupportedError",
    "InvalidKernelConfigError", "KernelNotAvailableError", "ParseError",
    "NoDeviceError", "ArchMismatchError", "CudaError", "OutOfMemoryError",
    "WorkspaceTooSmallError", "WrongContextError", "InternalError", "TuningFileError",
    "TuningEntriesIgnoredWarning",
]

# layout -> (axis of seq, axis of heads) in q, k, v and out, and the dimension names.
_LAYOUTS = {"bshd": (1, 2, "(batch, seq, heads, head_dim)"),
            "bhsd": (2, 1, "(batch, heads, seq, head_dim)")}

# Distinct problems whose plans a context keeps (least recently used dropped first): a serving
# process holds hundreds (decode steps per batch size and paging, prefill chunks, every
# forward_varlen token count), and a plan is about a kilobyte of host memory; a sweep over
# thousands of shapes still holds a bounded number. A lookup costs the same with 1 or 1024 plans
# (a hash of the call's key, 0.5 us on the CI machine).
_PLANS_PER_CONTEXT = 1024


_INT32 = (-2**31, 2**31 - 1)
_INT64 = (-2**63, 2**63 - 1)


def _integer(name, value, bounds=_INT64):
    """`value` as an int, checked before ctypes sees it (ctypes wraps an out-of-range value
    silently): an integer, Python or numpy, within `bounds`; TypeError for a float, a string or
    a bool, ValueError outside the range."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name} = {value} is outside [{bounds[0]}, {bounds[1]}]")
    return value


def _flag(name, value):
    """A flag: True or False, or a numpy bool; anything else ("False", 0, None) is a TypeError
    rather than a truth value."""
    if value is True or value is False:
        return value
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.bool_):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def version() -> str:
    """The loaded library's version string, e.g. ``"0.3.0"`` (``fa_version_string``)."""
    return _ffi.lib().fa_version_string().decode()


def _kernel_config(name):
    if not isinstance(name, str):
        raise TypeError(f"kernel must be a kernel name (str), got {type(name).__name__}")
    # Kernel names are ASCII (fa_kernel_config_name); a NUL would end the C string early, so
    # that a longer name parsed as its prefix.
    if not name.isascii() or "\0" in name:
        raise ParseError(6, f"kernel name {name!r} holds a character no kernel name has "
                            "(non-ASCII or NUL)")
    kc = _ffi.fa_kernel_config()
    check(_ffi.lib().fa_kernel_config_init(ctypes.byref(kc)))
    check(_ffi.lib().fa_kernel_config_parse(name.encode(), ctypes.byref(kc)))
    return kc


def _kernel_name(kc):
    needed = ctypes.c_size_t()
    _ffi.lib().fa_kernel_config_name(ctypes.byref(kc), None, 0, ctypes.byref(needed))
    buf = ctypes.create_string_buffer(max(needed.value, 1))
    check(_ffi.lib().fa_kernel_config_name(ctypes.byref(kc), buf, len(buf), None))
    return buf.value.decode()


def kernels() -> List[str]:
    """Short names of every GPU kernel compiled into the library, in registry order.

    Returns
    -------
    list of str
        Names such as ``"(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles"``; any
        of them can be passed as ``forward(..., kernel=name)``.
    """
    lib = _ffi.lib()
    names = []
    for i in range(lib.fa_kernel_count()):
        kc = _ffi.fa_kernel_config()
        check(lib.fa_kernel_config_init(ctypes.byref(kc)))
        check(lib.fa_kernel_get(i, ctypes.byref(kc)))
        names.append(_kernel_name(kc))
    return names


class _Owner:
    """Owns one fa_context_t*. Contexts and their cached plans hold it, so the context is
    destroyed after the last plan made from it, as the header requires."""

    __slots__ = ("handle", "run", "run_ex", "merge", "_destroy")

    def __init__(self, handle):
        self.handle = handle
        self.run = _ffi.raw("fa_plan_run")
        self.run_ex = _ffi.raw("fa_plan_run_ex")
        self.merge = _ffi.raw("fa_merge_states")
        self._destroy = _ffi.lib().fa_context_destroy

    def __del__(self):
        self._destroy(self.handle)


class _Plan:
    """Owns one fa_plan_t*; a call that runs it holds a reference, so dropping it from a cache
    never frees a plan in use. `workspace` is the bytes of device scratch a run needs for its
    split-KV partials or an FP8 prefill's transposed V (fa_plan_workspace_size)."""

    __slots__ = ("handle", "owner", "workspace", "_destroy")

    def __init__(self, handle, owner):
        self.handle = handle
        self.owner = owner
        # Set before anything can raise: __del__ then still frees the handle.
        self._destroy = _ffi.lib().fa_plan_destroy
        size = ctypes.c_size_t()
        check(_ffi.lib().fa_plan_workspace_size(handle, ctypes.byref(size)))
        self.workspace = size.value

    def __del__(self):
        self._destroy(self.handle)


class Context:
    """A libflashattn context: one CUDA device, or the CPU.

    The module functions keep one per device; make your own to keep tuning results apart. Safe to
    share between threads.

    Parameters
    ----------
    device : int or None
        A CUDA device ordinal, or None for the CPU backend.

    Notes
    -----
    A context keeps a plan (``fa_plan_create``) per problem that forward() has run on it, up to
    1024, so a repeated call skips validation and kernel selection and only launches.
    """

    def __init__(self, device: Optional[int] = None) -> None:
        lib = _ffi.lib()
        handle = _ffi.fa_context_p()
        ordinal = _ffi.FA_DEVICE_CPU if device is None else _integer("device", device, _INT32)
        check(lib.fa_context_create(ordinal, ctypes.byref(handle)))
        self.device = device
        self._owner = _Owner(handle.value)
        self._handle = handle.value
        # Keyed by _Key; a partial of the owner rather than a bound method, so the cache holds no
        # reference back to this object.
        self._plans = functools.lru_cache(maxsize=_PLANS_PER_CONTEXT)(
            functools.partial(_make_plan, self._owner))

    @property
    def tuned_count(self) -> int:
        """Number of shapes with a tuned kernel in this context."""
        n = ctypes.c_size_t()
        check(_ffi.lib().fa_context_tuned_count(self._handle, ctypes.byref(n)))
        return n.value

    def save_tuning(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes this context's tuning results to `path` (a versioned text file)."""
        check(_ffi.lib().fa_context_save_tuning(self._handle, os.fsencode(path)))

    def load_tuning(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Loads a tuning file; entries that no longer fit warn with TuningEntriesIgnoredWarning."""
        try:
            check(_ffi.lib().fa_context_load_tuning(self._handle, os.fsencode(path)))
        finally:
            # Plans are bound to the kernel chosen when they were made; loaded entries may
            # choose another.
            self._plans.cache_clear()


_contexts = {}
_contexts_lock = threading.Lock()


def _context(device):
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    with _contexts_lock:
        if device not in _contexts:
            _contexts[device] = Context(None if device == _ffi.FA_DEVICE_CPU else device)
        return _contexts[device]


# Everything the problem of a call depends on; q, k, v and o are (shape, strides, fa_dtype,
# device) in the caller's layout. Pointers are not part of it: the library checks them per run.
# The plan cache is keyed by the flat tuple _prepare() builds (features, layout, causal,
# softmax_scale, kernel, then shape, strides, dtype and device of q, k, v and o): building and
# hashing one tuple of 21 items takes 0.5 us on the CI machine, this namedtuple of four nested
# tuples 1.9; a miss turns it into a _Key (_make_plan) for the config.
_Key = collections.namedtuple("_Key", "layout causal softmax_scale kernel q k v o features")

# The inference features of a call (fa_config's 0.3 fields): mode is "dense", "varlen", "kvcache"
# or "paged"; window (left, right) with -1 for an unbounded side, (-1, -1) for none; alibi is
# fa_alibi (0 none, 1 per head, 2 per batch and head); extra is the mode's sizes: varlen
# (batch, max_seqlen_q, max_seqlen_k), paged (max_pages_per_seq,).
_Features = collections.namedtuple("_Features", "mode window softcap alibi sinks num_splits extra")
_NO_WINDOW = (-1, -1)  # the functions' default, recognised by identity: no parsing
_DENSE = _Features("dense", _NO_WINDOW, 0.0, 0, False, 0, ())
_KVCACHE = ("kvcache", _NO_WINDOW, 0.0, 0, False, 0, ())  # forward_kvcache's defaults


def _config(key):
    """The fa_config for `key`: the one place where the functions' arguments become a config."""
    f = key.features
    if f.mode == "dense":
        cfg = _dense_config(key)
    else:
        cfg = _cache_or_varlen_config(key)
    if cfg is None:
        return None
    left, right = f.window
    if (left, right) != (-1, -1):
        cfg.window, cfg.window_left, cfg.window_right = 1, left, right
    cfg.softcap = f.softcap
    cfg.alibi = f.alibi
    cfg.sinks = 1 if f.sinks else 0
    cfg.num_splits = f.num_splits
    return cfg


def _check_last_contiguous(named):
    for name, (shape, strides, _, _) in named:
        if strides[-1] != 1 and shape[-1] > 1:
            raise ValueError(f"{name}: the last dimension must be contiguous (stride "
                             f"{strides[-1]})")


def _check_not_broadcast(named):
    """The C API reads all-zero leading strides (batch, seq and heads; seq and heads for varlen)
    as "packed": an array broadcast along all of them must be materialised first."""
    for name, (shape, strides, _, _) in named:
        lead = len(shape) - 1
        if all(x == 0 for x in strides[:lead]) and any(x != 1 for x in shape[:lead]):
            raise ValueError(f"{name} is broadcast along its leading dimensions (strides "
                             f"{tuple(strides[:lead])}); make it contiguous first")


def _cache_or_varlen_config(key):
    """fa_config for forward_varlen() (q (total_q, heads_q, d), k/v (total_k, heads_kv, d)) and
    forward_kvcache() (q (batch, seqlen_q, heads_q, d), a cache (batch, capacity, heads_kv, d) or
    pages (num_pages, page_size, heads_kv, d)); None when there is no query row."""
    f = key.features
    named = (("q", key.q), ("k", key.k), ("v", key.v), ("out", key.o))
    rank = 3 if f.mode == "varlen" else 4
    for name, (shape, _, _, _) in named:
        if len(shape) != rank:
            raise ValueError(f"{name} must have {rank} dimensions, got shape {tuple(shape)}")
    qs, ks, vs, os_ = (tuple(sig[0]) for _, sig in named)
    _check_value_shapes(qs, ks, vs, os_)
    _check_dtypes(key)
    for name, (_, _, _, device) in named[1:]:
        if device != key.q[3]:
            raise ValueError(f"{name} is on device {device}, q on {key.q[3]}")
    if qs[-1] != ks[-1]:
        raise ValueError(f"q's head_dim {qs[-1]} differs from k's {ks[-1]}")
    if f.mode == "varlen" and qs[0] != 0 and ks[0] == 0:
        # Declared as 1 row, an empty k let cu_seqlens_k = [0, 1] pass the library's bounds
        # check, and a row outside k was read.
        raise ValueError(f"k and v have no rows (total_k = 0, shape {ks}): no key to attend to")
    _check_last_contiguous(named)
    _check_not_broadcast(named)
    cfg = _ffi.fa_config()
    check(_ffi.lib().fa_config_init(ctypes.byref(cfg)))
    _set_dtypes(cfg, key)
    cfg.causal = 1 if key.causal else 0
    cfg.softmax_scale = key.softmax_scale
    cfg.head_dim = qs[-1]
    cfg.head_dim_v = _head_dim_v(qs, vs)
    if f.mode == "varlen":
        batch, max_q, max_k = f.extra
        if max_q < 0 or max_k < 0:
            raise ValueError(f"max_seqlen_q = {max_q} and max_seqlen_k = {max_k} must be >= 0")
        if qs[0] == 0:
            return None  # no query row; query rows without a sequence (batch 0) are refused
        cfg.layout = _ffi.FA_LAYOUT_VARLEN
        cfg.batch, cfg.seqlen_q, cfg.seqlen_k = batch, max(max_q, 1), max(max_k, 1)
        cfg.total_q, cfg.total_k = qs[0], ks[0]
        cfg.heads_q, cfg.heads_kv = qs[1], ks[1]
        for prefix, (_, strides, _, _) in zip("qkvo", (key.q, key.k, key.v, key.o)):
            setattr(cfg, f"{prefix}_seq_stride", strides[0])
            setattr(cfg, f"{prefix}_head_stride", strides[1])
        return cfg
    if qs[0] == 0 or qs[1] == 0:
        return None
    cfg.batch, cfg.seqlen_q, cfg.heads_q, cfg.heads_kv = qs[0], qs[1], qs[2], ks[2]
    if f.mode == "paged":
        (max_pages,) = f.extra
        cfg.layout = _ffi.FA_LAYOUT_PAGED_KV
        cfg.num_pages, cfg.page_size, cfg.max_pages_per_seq = ks[0], ks[1], max_pages
        cfg.seqlen_k = max(max_pages * ks[1], 1)
    else:
        if ks[0] != qs[0]:
            raise ValueError(f"the cache has batch {ks[0]}, q {qs[0]}")
        cfg.layout = _ffi.FA_LAYOUT_KV_CACHE
        cfg.seqlen_k = ks[1]
    for prefix, (_, strides, _, _) in zip("qkvo", (key.q, key.k, key.v, key.o)):
        setattr(cfg, f"{prefix}_batch_stride", strides[0])
        setattr(cfg, f"{prefix}_seq_stride", strides[1])
        setattr(cfg, f"{prefix}_head_stride", strides[2])
    return cfg


_HALF_TYPES = (_ffi.FA_DTYPE_BF16, _ffi.FA_DTYPE_FP16)


def _check_dtypes(key):
    """k and v share a dtype: q's, or float8_e4m3fn (an FP8 cache) under any q (the library
    names the combinations it refuses); out has q's dtype, or for float8_e4m3fn q bfloat16 or
    float16."""
    q_dtype, kv_dtype = key.q[2], key.k[2]
    if key.v[2] != kv_dtype:
        raise TypeError("v has another dtype than k")
    if kv_dtype != q_dtype and kv_dtype != _ffi.FA_DTYPE_E4M3:
        raise TypeError("k has another dtype than q")
    if q_dtype == _ffi.FA_DTYPE_E4M3:
        if key.o[2] not in _HALF_TYPES:
            raise TypeError("out must be bfloat16 or float16 for float8_e4m3fn q")
    elif key.o[2] != q_dtype:
        raise TypeError("out has another dtype than q")


def _set_dtypes(cfg, key):
    """fa_config's dtype, kv_dtype (where k and v differ from q) and out_dtype (for FP8 q)."""
    cfg.dtype = key.q[2]
    if key.k[2] != key.q[2]:
        cfg.kv_dtype = key.k[2]
    if key.q[2] == _ffi.FA_DTYPE_E4M3:
        cfg.out_dtype = key.o[2]


def _check_value_shapes(qs, ks, vs, os_):
    """k and v alike but for the last dimension (head_dim, head_dim_v); out like q but for
    the last dimension, which is v's."""
    if ks[:-1] != vs[:-1]:
        raise ValueError(f"k and v shapes differ before the last dimension: {ks} vs {vs}")
    if os_ != qs[:-1] + vs[-1:]:
        raise ValueError(f"out has shape {os_}, expected q's {qs} with v's last dimension "
                         f"{vs[-1:]}")
    if vs[-1] == 0 and qs[-1] != 0:
        raise ValueError(f"v has head_dim_v = 0 (shape {vs})")


def _head_dim_v(qs, vs):
    """fa_config.head_dim_v: v's last dimension where it differs from q's, else 0 (which
    libraries older than the field also read)."""
    return vs[-1] if vs[-1] != qs[-1] else 0


def _dense_config(key):
    """The fa_config of forward()'s dense problem.

    Only the mapping of the arrays onto the config is checked here; the library validates the
    problem itself. Returns None when there is no query row (batch, seqlen_q or heads_q is 0):
    the output is empty and there is nothing to compute."""
    seq, heads, dims = _LAYOUTS[key.layout]
    named = (("q", key.q), ("k", key.k), ("v", key.v), ("out", key.o))
    for name, (shape, _, _, _) in named:
        if len(shape) != 4:
            raise ValueError(f"{name} must have 4 dimensions {dims}, got shape {tuple(shape)}")
    qs, ks, vs, os_ = (tuple(sig[0]) for _, sig in named)
    _check_value_shapes(qs, ks, vs, os_)
    if ks[0] != qs[0] or ks[3] != qs[3]:
        raise ValueError(f"k/v shape {ks} does not match q's batch and head_dim {qs}")
    _check_dtypes(key)
    for name, (_, _, _, device) in named[1:]:
        if device != key.q[3]:
            raise ValueError(f"{name} is on device {device}, q on {key.q[3]}")
    batch, seqlen_q, heads_q, head_dim = qs[0], qs[seq], qs[heads], qs[3]
    seqlen_k, heads_kv = ks[seq], ks[heads]
    if batch == 0 or seqlen_q == 0 or heads_q == 0:
        return None
    if seqlen_k == 0:
        raise ValueError(f"k and v have seqlen_k = 0 (shape {ks}): no key to attend to")
    if heads_kv == 0:
        raise ValueError(f"k and v have heads_kv = 0 (shape {ks}) for {heads_q} query heads")
    if head_dim == 0:
        raise ValueError(f"head_dim is 0 (q shape {qs})")
    _check_not_broadcast(named)
    _check_last_contiguous(named)
    cfg = _ffi.fa_config()
    check(_ffi.lib().fa_config_init(ctypes.byref(cfg)))
    _set_dtypes(cfg, key)
    cfg.causal = 1 if key.causal else 0
    cfg.batch, cfg.seqlen_q, cfg.seqlen_k = batch, seqlen_q, seqlen_k
    cfg.heads_q, cfg.heads_kv, cfg.head_dim = heads_q, heads_kv, head_dim
    cfg.head_dim_v = _head_dim_v(qs, vs)
    cfg.softmax_scale = key.softmax_scale
    for prefix, (_, strides, _, _) in zip("qkvo", (key.q, key.k, key.v, key.o)):
        setattr(cfg, f"{prefix}_batch_stride", strides[0])
        setattr(cfg, f"{prefix}_seq_stride", strides[seq])
        setattr(cfg, f"{prefix}_head_stride", strides[heads])
    return cfg


def _structured(flat):
    """The _Key of a flat key."""
    return _Key(flat[1], flat[2], flat[3], flat[4], flat[5:9], flat[9:13], flat[13:17],
                flat[17:21], _Features._make(flat[0]))


def _make_plan(owner, flat):
    """A _Plan for the flat key `flat` (_prepare) on owner's context (the pinned kernel's when
    the key names one), or None when there is nothing to compute. Context._plans caches it."""
    cfg = _config(_structured(flat))
    if cfg is None:
        return None
    if len(flat) > 21:  # a call with FP8 descale factors: their layout (_descales)
        cfg.descale = flat[21]
    lib = _ffi.lib()
    plan = _ffi.fa_plan_p()
    kernel = flat[4]
    if kernel is None:
        check(lib.fa_plan_create(owner.handle, ctypes.byref(cfg), ctypes.byref(plan)))
    else:
        kc = _kernel_config(kernel)
        check(lib.fa_plan_create_with_kernel(owner.handle, ctypes.byref(cfg), ctypes.byref(kc),
                                             ctypes.byref(plan)))
    return _Plan(plan.value, owner)


def _read_only(arr):
    return getattr(getattr(arr, "flags", None), "writeable", True) is False


def _prepare(q, k, v, out, return_lse, stream, causal, softmax_scale, kernel, layout,
             features=_DENSE, descale=None):
    """Describes the arrays, allocates missing outputs, resolves the stream; returns the
    described q, k, v, out and lse (None unless return_lse), the out and lse objects, the stream
    handle and the problem's flat key (see _Key; a call with FP8 descale factors appends their
    fa_descale layout)."""
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r} is neither 'bshd' nor 'bhsd'")
    if causal is not True and causal is not False:
        causal = _flag("causal", causal)
    if return_lse is not True and return_lse is not False:
        return_lse = _flag("return_lse", return_lse)
    if kernel is not None and not isinstance(kernel, str):
        raise TypeError(f"kernel must be a kernel name (str), got {type(kernel).__name__}")
    handle = None if stream is None else _tensors.stream_handle(stream)
    tq = _tensors.describe(q, "q", handle)
    if handle is None:
        handle = tq.stream
    # q read through its attributes (no DLPack capsule): tq.stream is its device's current one.
    known = (tq.device, tq.stream) if tq.library == "torch" and tq.keepalive is None else None
    tk = _tensors.describe(k, "k", handle, known)
    tv = _tensors.describe(v, "v", handle, known)
    varlen = features[0] == "varlen"
    if len(tq.shape) != (3 if varlen else 4):
        what = "(total_q, heads_q, head_dim)" if varlen else _LAYOUTS[layout][2]
        raise ValueError(f"q must have {3 if varlen else 4} dimensions {what}, got shape "
                         f"{tuple(tq.shape)}")
    if out is None:
        o = lse = None
    elif isinstance(out, tuple):
        if len(out) != 2:
            raise ValueError(f"out must be an array or a pair (o, lse), got a tuple of {len(out)}")
        o, lse = out
        if lse is not None and not return_lse:
            raise ValueError("out=(o, lse) writes lse only with return_lse=True")
    else:
        o, lse = out, None
    if softmax_scale is None:
        scale = 0.0
    else:
        scale = float(softmax_scale)
        if ctypes.c_float(scale).value == 0.0:
            # 0 is the C API's "1/sqrt(head_dim)": a scale that is (or rounds to) 0 in float32
            # would silently become the default.
            raise ValueError(f"softmax_scale = {softmax_scale} is 0 in float32; pass None for "
                             "1/sqrt(head_dim)")
    if o is None:
        # out is q's shape with v's last dimension (head_dim_v), sliced as tuples: a slice of a
        # torch.Size builds another torch.Size (0.1 us), and this line took 0.3 us, not 0.2.
        shape = tuple(tq.shape)[:-1] + tuple(tv.shape)[-1:]
        if tq.dtype == _ffi.FA_DTYPE_E4M3:
            o, to = _fp8_output(tq, shape, handle)
        else:
            o, to = _tensors.new_output(tq, shape, "out", handle)
    elif _read_only(o):
        raise ValueError("out is read-only")
    else:
        to = _tensors.describe(o, "out", handle, known)
    tlse = None
    if return_lse:
        seq, heads, _ = _LAYOUTS[layout]
        expected = ((tq.shape[1], tq.shape[0]) if varlen else
                    (tq.shape[0], tq.shape[heads], tq.shape[seq]))
        if lse is None:
            lse, tlse = _tensors.new_output(tq, expected, "lse", handle, float32=True)
        elif _read_only(lse):
            raise ValueError("lse is read-only")
        else:
            tlse = _tensors.describe(lse, "lse", handle, known)
        # An empty array's strides carry no meaning (producers differ), so only its shape counts.
        packed = (expected[1], 1) if varlen else (expected[1] * expected[2], expected[2], 1)
        # Strides of extent-1 dimensions are never applied (numpy calls such a view contiguous).
        if tuple(tlse.shape) != expected or tlse.dtype != _ffi.FA_DTYPE_FP32 or (
                tuple(tlse.strides) != packed and 0 not in expected
                and not _same_strides(expected, tuple(tlse.strides), packed)):
            raise ValueError(f"lse must be a contiguous float32 array of shape {expected}")
    if stream is not None and tq.device == _ffi.FA_DEVICE_CPU:
        raise ValueError("stream= applies to GPU tensors only")
    key = (features, layout, causal, scale, kernel,
           tq.shape, tq.strides, tq.dtype, tq.device, tk.shape, tk.strides, tk.dtype, tk.device,
           tv.shape, tv.strides, tv.dtype, tv.device, to.shape, to.strides, to.dtype, to.device)
    if descale is not None:
        key += (descale,)
    return tq, tk, tv, to, tlse, o, lse, handle, key


def _fp8_output(tq, shape, handle):
    """out for float8_e4m3fn q when the caller passes none: bfloat16 (fa_config.out_dtype's
    default), allocated by q's library (numpy through ml_dtypes)."""
    if tq.library != "numpy":
        raise TypeError(f"float8_e4m3fn q from {tq.library}: pass out= (bfloat16 or float16)")
    import ml_dtypes  # noqa: PLC0415  (the numpy path's bfloat16, imported only for FP8 q)
    o = sys.modules["numpy"].empty(shape, dtype=ml_dtypes.bfloat16)
    return o, _tensors.describe(o, "out", handle)


def _window(window):
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(f"window must be a pair (left, right), got {window!r}") from None
    left, right = _integer("window[0]", left), _integer("window[1]", right)
    return (max(left, -1), max(right, -1))


def _features(mode, window, softcap, alibi_slopes, sinks, batch, heads_q, num_splits=0, extra=()):
    """The features of a call as a plain tuple in _Features' order (equal to, and hashing as,
    the _Features a plan is made from); ALiBi's mode comes from the slopes' shape ((heads_q,)
    or (batch, heads_q))."""
    if (window is _NO_WINDOW and alibi_slopes is None and type(num_splits) is int
            and num_splits == 0 and softcap == 0.0):
        # The defaults, as a serving loop passes them: 0.3 us, where parsing them takes 1.2.
        return (mode, _NO_WINDOW, 0.0, 0, sinks is not None, 0, extra)
    alibi = _ffi.FA_ALIBI_NONE
    if alibi_slopes is not None:
        shape = tuple(_tensors.describe_aux(alibi_slopes, "alibi_slopes", "float32")[1])
        if shape == (heads_q,):
            alibi = _ffi.FA_ALIBI_PER_HEAD
        elif shape == (batch, heads_q):
            alibi = _ffi.FA_ALIBI_PER_BATCH
        else:
            raise ValueError(f"alibi_slopes has shape {shape}; expected ({heads_q},) or "
                             f"({batch}, {heads_q})")
    if not hasattr(softcap, "__float__"):  # None, a string: not a number
        raise TypeError(f"softcap must be a number, got {type(softcap).__name__}")
    if softcap < 0:
        raise ValueError(f"softcap = {softcap} must be >= 0 (0: off)")
    softcap = float(softcap)
    if softcap > 0 and ctypes.c_float(softcap).value == 0.0:
        # 0 is the C API's "off": a cap that rounds to 0 in float32 would silently turn
        # soft-capping off (as softmax_scale's check in _prepare).
        raise ValueError(f"softcap = {softcap} is 0 in float32, which means no soft-capping; "
                         "pass 0 for that")
    return (mode, _window(window), softcap, alibi, sinks is not None,
            _integer("num_splits", num_splits, _INT32), tuple(extra))


# fa_run_args as machine words (every field is 8 bytes on the 64-bit platforms the library
# builds for), in the struct's order: struct_size, then cu_seqlens_q, cu_seqlens_k,
# cache_seqlens, block_table, alibi_slopes, sinks, workspace, workspace_size (words 1-8), then
# the FP8 descale pointers appended in 0.3.0 (words 9-11), which stay the NULL that
# fa_run_args_init wrote except during a call given descales (_run_ex). Each thread fills its
# own structs (_run_args): building a fa_run_args per call, initialising it through ctypes and
# setting one pointer with ctypes.cast took 5 us on the CI machine, each further pointer 1 more.
# A thread has three. "run_args" takes any call: _run_ex() fills words 1-8 (0.2 us).
# "varlen_args" and "kvcache_args" take the calls of forward_varlen() and forward_kvcache()
# with no per-head array or descale, which store their two arrays and the workspace alone
# (words 1-2 or 3-4, and 7-8): four stores, 0.1 us where building the eight words and filling
# them took 0.2, every other word staying as fa_run_args_init wrote it.
_WORD = ctypes.sizeof(ctypes.c_void_p)
_RUN_WORDS = ctypes.sizeof(_ffi.fa_run_args) // _WORD
_NO_ARRAYS = (None,) * 6  # no cu_seqlens, cache_seqlens, block_table, slopes or sinks
_thread = threading.local()


def _run_args(name="run_args"):
    """This thread's fa_run_args `name` (see above) as (words, address). Per thread because
    ctypes releases the GIL during the library call, which reads the struct: another thread
    must not refill it then."""
    try:
        return getattr(_thread, name)
    except AttributeError:
        args = _ffi.fa_run_args()
        check(_ffi.lib().fa_run_args_init(ctypes.byref(args)))
        # The array view holds a reference to args, so the pair keeps the struct alive.
        words = ((ctypes.c_void_p * _RUN_WORDS).from_buffer(args), ctypes.addressof(args))
        setattr(_thread, name, words)
        return words


def _scratch(plan, workspace, tq, key, handle):
    """(address, bytes, keepalive) of the scratch of a run of `plan` (split-KV partials, or an
    FP8 prefill's transposed V): the caller's float32 array `workspace`, else one allocated here
    where the plan asks for one on a GPU, else (None, 0, None). keepalive must be held until the
    run is enqueued."""
    if workspace is not None:
        ptr, got, device, keepalive = _tensors.describe_aux(workspace, "workspace", "float32",
                                                            handle)
        if device != tq.device:
            raise ValueError(f"workspace is on device {device}, q on {tq.device}")
        size = 4
        for n in got:
            size *= n
        return ptr, size, keepalive
    if plan.workspace and tq.device != _ffi.FA_DEVICE_CPU:
        # Split-KV partials or an FP8 prefill's transposed V, allocated by q's library on its
        # stream-ordered allocator (PyTorch's caching allocator makes this a free-list pop, and
        # inside a CUDA graph capture a block of the graph's private pool). A producer this
        # package cannot allocate with runs unsplit when the split was the library's own choice
        # (and an FP8 prefill runs a tile that transposes V itself).
        try:
            keepalive, ptr = _tensors.empty_float32(tq, ((plan.workspace + 3) // 4,),
                                                    "workspace", handle)
        except TypeError:
            if key[0][5] > 1:  # a forced num_splits
                raise
        else:
            return ptr, plan.workspace, keepalive
    return None, 0, None


def _run_ex(ctx, plan, tq, tk, tv, to, tlse, o, lse, handle, key, return_lse, arrays,
            workspace, descales=None):
    """Runs `plan` through fa_plan_run_ex. `arrays` are the addresses of fa_run_args' six
    arrays (cu_seqlens_q to sinks, None where absent), read by the caller after the plan lookup
    (a plan of None returns before them); the workspace is _scratch()'s. Every pointer is read
    before the struct is filled: a producer's __dlpack__ runs Python, which may call into this
    package on the same thread."""
    ptr, size, keepalive = _scratch(plan, workspace, tq, key, handle)
    try:
        words, address = _thread.run_args
    except AttributeError:  # _run_args() inline: one Python frame less per call
        words, address = _run_args()
    words[1:7] = arrays
    words[7] = ptr
    words[8] = size
    if descales is None:
        status = ctx._owner.run_ex(plan.handle, tq.ptr, tk.ptr, tv.ptr, to.ptr,
                                   None if tlse is None else tlse.ptr, address, handle)
    else:
        # The FP8 descale pointers (words 9-11) for this run only: every other call leaves them
        # NULL, so they are cleared again before anything else uses this thread's struct.
        words[9:12] = descales
        try:
            status = ctx._owner.run_ex(plan.handle, tq.ptr, tk.ptr, tv.ptr, to.ptr,
                                       None if tlse is None else tlse.ptr, address, handle)
        finally:
            words[9:12] = _NO_DESCALES
    del keepalive  # the run has read the workspace (a GPU run: enqueued it)
    if status:
        check(status)
    return (o, lse) if return_lse else o


_NO_DESCALES = (None, None, None)
_NO_DESCALE = (None, None)  # _descales() of no array
_NO_SCRATCH = (None, 0, None)  # _scratch() of a run that needs none


_DESCALE_NAMES = ("q_descale", "k_descale", "v_descale")


def _descales(q_descale, k_descale, v_descale):
    """(fa_config.descale, descriptions) for the descale arrays given ((None, None) when none
    is): one float32 per tensor (shape (1,) or ()), or one per (batch, K/V head) (2 dimensions),
    the same for all. descriptions holds each array's describe_aux() result (None where absent),
    which _descale_pointers() checks and reads once the problem is known."""
    layout, described = None, []
    for name, arr in zip(_DESCALE_NAMES, (q_descale, k_descale, v_descale)):
        if arr is None:
            described.append(None)
            continue
        d = _tensors.describe_aux(arr, name, "float32")
        shape = tuple(d[1])
        mine = (_ffi.FA_DESCALE_PER_TENSOR if shape in ((), (1,)) else
                _ffi.FA_DESCALE_PER_HEAD_KV if len(shape) == 2 else None)
        if mine is None:
            raise ValueError(f"{name} has shape {shape}; expected (1,) (per tensor) or (batch, "
                             "heads_kv)")
        if layout is not None and mine != layout:
            raise ValueError("q_descale, k_descale and v_descale must all be per tensor or all "
                             "per (batch, heads_kv)")
        layout = mine
        described.append(d)
    return layout, described


def _descale_pointers(arrays, described, layout, batch, heads_kv, device, handle):
    """The descale arrays' addresses (None where absent), each checked against its layout's
    shape and q's device, and the objects that keep them alive through the call. described is
    _descales()'s; an array exported through DLPack before the stream was known is described
    again with it."""
    want = (1,) if layout == _ffi.FA_DESCALE_PER_TENSOR else (batch, heads_kv)
    pointers, keep = [], []
    for name, arr, d in zip(_DESCALE_NAMES, arrays, described):
        if d is None:
            pointers.append(None)
            continue
        if d[3] is not None:  # a DLPack capsule
            d = _tensors.describe_aux(arr, name, "float32", handle)
        got = tuple(d[1])
        if (got if got else (1,)) != want or d[2] != device:
            _aux_mismatch(name, d, want, device)
        pointers.append(d[0])
        keep.append(d)
    return tuple(pointers), keep


def _aux_mismatch(name, described, shape, device):
    """Raises the ValueError for a run-time array (describe_aux() result `described`) that does
    not have `shape` or is not on q's `device`: the library reads as many entries as the config
    says, so a shorter array would be read past its end."""
    if described[1] != shape:
        raise ValueError(f"{name} has shape {tuple(described[1])}; expected {tuple(shape)}")
    raise ValueError(f"{name} is on device {described[2]}, q on {device}")


def _aux_pointer(obj, name, kind, shape, device, handle):
    """(address, keepalive) of a run-time array that must have `shape` (None: any) and be on
    q's `device`; keepalive must be held through the call."""
    described = _tensors.describe_aux(obj, name, kind, handle)
    if (shape is not None and described[1] != shape) or described[2] != device:
        _aux_mismatch(name, described, described[1] if shape is None else shape, device)
    return described[0], described[3]


def _slopes_and_sinks(alibi_slopes, sinks, heads_q, device, handle):
    """(alibi_slopes address, sinks address, keepalive) of the optional per-head arrays; the
    slopes' shape was checked by _features()."""
    alibi = sink = keep_alibi = keep_sinks = None
    if alibi_slopes is not None:
        alibi, keep_alibi = _aux_pointer(alibi_slopes, "alibi_slopes", "float32", None, device,
                                         handle)
    if sinks is not None:
        sink, keep_sinks = _aux_pointer(sinks, "sinks", "float32", (heads_q,), device, handle)
    return alibi, sink, (keep_alibi, keep_sinks)


def forward(q: Any, k: Any, v: Any, *, causal: bool = False,
            softmax_scale: Optional[float] = None, window: Tuple[int, int] = _NO_WINDOW,
            softcap: float = 0.0, alibi_slopes: Any = None, sinks: Any = None, out: Any = None,
            return_lse: bool = False, stream: Any = None, kernel: Optional[str] = None,
            layout: Literal["bshd", "bhsd"] = "bshd",
            workspace: Any = None, q_descale: Any = None, k_descale: Any = None,
            v_descale: Any = None) -> Union[Any, Tuple[Any, Any]]:
    """Attention forward: ``softmax(scale * q k^T) v`` per query head, without materialising
    the score matrix.

    Parameters
    ----------
    q : array
        ``(batch, seqlen_q, heads_q, head_dim)`` (``layout="bshd"``) or
        ``(batch, heads_q, seqlen_q, head_dim)`` (``layout="bhsd"``). numpy (CPU backend:
        float32, float16, bfloat16), or a CUDA array (float16, bfloat16).
    k, v : array
        ``(batch, seqlen_k, heads_kv, head_dim)`` in q's layout, q's dtype and device;
        ``heads_q`` must be a multiple of ``heads_kv`` (GQA/MQA; K/V heads are not copied).
        v's last dimension may differ from head_dim: it is the value head dim head_dim_v of
        v and out (the CPU backend runs any; GPU kernels only head_dim_v = head_dim for now,
        UnsupportedError otherwise).
    causal : bool
        Bottom-right aligned mask: key ``j`` is visible to query ``i`` iff
        ``j <= i + seqlen_k - seqlen_q``. A query row with no visible key gets ``out = 0`` and
        ``lse = -inf``.
    softmax_scale : float, optional
        Multiplies the scores; None means ``1 / sqrt(head_dim)``. Any finite value, negative
        included, except one that is 0 in float32 (ValueError: the C API reads 0 as the
        default).
    window : (int, int)
        Sliding window ``(left, right)``: key ``j`` is visible to query ``i`` iff
        ``i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right``; a negative
        bound is unbounded, ``(-1, -1)`` (the default) is no window. Combines with causal.
    softcap : float
        ``> 0`` rewrites each scaled score ``s`` as ``softcap * tanh(s / softcap)`` (Gemma 2);
        0 is off.
    alibi_slopes : array, optional
        float32 ALiBi slopes, ``(heads_q,)`` or ``(batch, heads_q)``, on q's device: each score
        loses ``slope * |i + seqlen_k - seqlen_q - j|``.
    sinks : array, optional
        float32 ``(heads_q,)`` attention-sink logits on q's device: each joins its head's softmax
        denominator with no value row (the row's weights sum to less than 1).
    out : array or (array, array), optional
        An output of q's shape with v's last dimension, q's layout and dtype, written in
        place; or ``(out, lse)`` with lse a
        contiguous float32 ``(batch, heads_q, seqlen_q)`` array (with ``return_lse=True`` only).
        None allocates with q's library (numpy, PyTorch, CuPy; other producers must pass out).
    return_lse : bool
        Also return the natural-log log-sum-exp of each row's scaled scores.
    stream : int or stream object, optional
        GPU only: a ``cudaStream_t`` as an int, or an object with ``__cuda_stream__`` (or a
        PyTorch stream). None runs on q's producer's current stream (PyTorch's and CuPy's current
        stream, the stream a ``__cuda_array_interface__`` names), else the legacy default stream.
        The call returns without waiting for the GPU.
    kernel : str, optional
        Pin a GPU kernel by its short name (see kernels()).
    layout : {"bshd", "bhsd"}
        The dimension order of q, k, v and out: (batch, seq, heads, head_dim), the library's
        own, or (batch, heads, seq, head_dim), PyTorch's ``scaled_dot_product_attention`` order.
    workspace : array, optional
        GPU only: a contiguous float32 array on q's device holding the split-KV scratch of a
        plan that splits the keys (the library splits decode-like problems by itself; see
        forward_kvcache's ``num_splits``): the call then allocates nothing but its outputs, and
        a CUDA graph that captured it keeps using this array, which the caller keeps alive.
        ``num_splits * rows * heads_q * (head_dim_v + 1)`` floats suffice (rows = batch *
        seqlen_q, or total_q; at most 256 splits). A smaller one makes an automatic split run
        unsplit, and a forced one raise WorkspaceTooSmallError. An FP8 prefill (e4m3 q, k and v
        on Hopper, long enough) also uses it for V transposed ahead of the run, about V's bytes
        (``fa_plan_workspace_size``), and without it runs a tile that transposes V itself: the
        same result, 0.79-0.89x as fast from 8k keys on an H200. None allocates the scratch
        with q's library per call (PyTorch: from its caching allocator, and inside a graph
        capture from the graph's pool). The CPU backend needs none.
    q_descale, k_descale, v_descale : array, optional
        FP8 descale factors (since 0.3.0), contiguous float32 on q's device: shape ``(1,)``
        (per tensor) or ``(batch, heads_kv)`` (per sequence and K/V head), all alike; each only
        for an array of dtype ``float8_e4m3fn`` (ml_dtypes' type; the library refuses a factor
        for any other). The scores are ``scale * q_descale * k_descale * (q . k)`` on the stored
        values and the output ``v_descale * (P V)``. k and v may be ``float8_e4m3fn`` under
        bfloat16 or float16 q (an FP8 cache: out then has q's dtype); ``float8_e4m3fn`` q
        needs ``float8_e4m3fn`` k and v and writes out as bfloat16 (allocated here for numpy)
        or as the ``out=`` array's float16. FP8 runs on the CPU backend; the GPU kernels refuse
        it (UnsupportedError) for now.

    Returns
    -------
    out : array
        ``(batch, seqlen_q, heads_q, head_dim_v)`` in q's layout (the array passed as out, if
        any).
    lse : array
        Only with ``return_lse``: float32 ``(batch, heads_q, seqlen_q)`` in either layout.

    Raises
    ------
    ValueError, TypeError
        Arrays that cannot describe one attention problem (dimensions, shapes, dtypes, devices,
        a last dimension that is not contiguous, a read-only output, a bad layout name).
    FlashAttnError
        A subclass per library status, e.g. InvalidArgumentError (heads_q not a multiple of
        heads_kv, a non-finite scale), UnsupportedError (a problem no GPU kernel covers).

    Notes
    -----
    Empty problems: when batch, seqlen_q or heads_q is 0 there is no query row, and the
    (empty) out, and lse, are returned without calling the library, as PyTorch does. A
    non-empty query with seqlen_k = 0, heads_kv = 0 or head_dim = 0 raises ValueError naming the
    zero size. (PyTorch's math backend returns zeros for seqlen_k = 0; writing them would take a
    kernel of q's own library on the caller's stream, which this package does not launch.)

    The first call for a problem (shapes, strides, dtypes, flags) makes a plan and keeps it in
    the device's context; later calls only launch it.
    """
    if (window is _NO_WINDOW and softcap == 0.0 and alibi_slopes is None and sinks is None
            and q_descale is None and k_descale is None and v_descale is None):
        tq, tk, tv, to, tlse, o, lse, handle, key = _prepare(q, k, v, out, return_lse, stream,
                                                              causal, softmax_scale, kernel,
                                                              layout)
        ctx = _contexts.get(tq.device) or _context(tq.device)
        plan = ctx._plans(key)
        if plan is None:
            return (o, lse) if return_lse else o
        if workspace is not None or plan.workspace:
            return _run_ex(ctx, plan, tq, tk, tv, to, tlse, o, lse, handle, key, return_lse,
                           _NO_ARRAYS, workspace)
        # fa_plan_run here rather than in a helper: a Python frame of eleven arguments costs
        # 0.1 us of the 9 a call takes on the CI machine (numpy, the C call stubbed).
        status = ctx._owner.run(plan.handle, tq.ptr, tk.ptr, tv.ptr, to.ptr,
                                None if tlse is None else tlse.ptr, None, 0, handle)
        if status:
            check(status)
        return (o, lse) if return_lse else o
    shape = getattr(q, "shape", (0, 0, 0, 0))
    seq, heads, _ = _LAYOUTS.get(layout, (1, 2, ""))
    heads_q = shape[heads] if len(shape) == 4 else 0
    features = _features("dense", window, softcap, alibi_slopes, sinks, shape[0], heads_q)
    descale, described = _descales(q_descale, k_descale, v_descale)
    tq, tk, tv, to, tlse, o, lse, handle, key = _prepare(q, k, v, out, return_lse, stream, causal,
                                                          softmax_scale, kernel, layout, features,
                                                          descale)
    ctx = _contexts.get(tq.device) or _context(tq.device)
    plan = ctx._plans(key)
    if plan is None:
        return (o, lse) if return_lse else o
    alibi, sink, keepalive = _slopes_and_sinks(alibi_slopes, sinks, heads_q, tq.device, handle)
    descales = None
    if descale is not None:
        descales, keep_descales = _descale_pointers((q_descale, k_descale, v_descale),
                                                    described, descale, tq.shape[0],
                                                    tk.shape[heads], tq.device, handle)
    return _run_ex(ctx, plan, tq, tk, tv, to, tlse, o, lse, handle, key, return_lse,
                   (None, None, None, None, alibi, sink), workspace, descales)


def forward_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *,
                   max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                   softmax_scale: Optional[float] = None, window: Tuple[int, int] = _NO_WINDOW,
                   softcap: float = 0.0, alibi_slopes: Any = None, sinks: Any = None,
                   out: Any = None, return_lse: bool = False, stream: Any = None,
                   kernel: Optional[str] = None, workspace: Any = None, q_descale: Any = None,
                   k_descale: Any = None, v_descale: Any = None) -> Union[Any, Tuple[Any, Any]]:
    """Attention over a batch of variable-length sequences packed along one token dimension
    (FlashAttention's ``flash_attn_varlen_func``).

    Parameters
    ----------
    q : array
        ``(total_q, heads_q, head_dim)``: every sequence's query rows, one after another.
    k, v : array
        ``(total_k, heads_kv, head_dim)`` and ``(total_k, heads_kv, head_dim_v)``.
    cu_seqlens_q, cu_seqlens_k : array
        int32 ``(batch + 1,)`` on q's device: sequence ``b`` owns query rows
        ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` and key rows likewise. Zero-length sequences
        are allowed. On the CPU backend malformed offsets raise InvalidArgumentError; GPU
        kernels clamp them (wrong numbers, never an out-of-bounds access).
    max_seqlen_q, max_seqlen_k : int
        Upper bounds of the sequences' lengths.
        k and v must have at least one row when q has one (ValueError otherwise, as forward()
        refuses seqlen_k = 0).
    causal, softmax_scale, window, softcap, alibi_slopes, sinks, out, stream, kernel, workspace
        As forward(); masks are aligned per sequence (bottom-right).
    q_descale, k_descale, v_descale : array, optional
        As forward() (batch: the number of sequences).
    return_lse : bool
        Also return the float32 log-sum-exp, ``(heads_q, total_q)``.

    Returns
    -------
    out : array
        ``(total_q, heads_q, head_dim_v)``.
    lse : array
        Only with ``return_lse``.
    """
    cu_q = _tensors.describe_aux(cu_seqlens_q, "cu_seqlens_q", "int32")
    cu_shape = cu_q[1]
    if len(cu_shape) != 1 or cu_shape[0] < 1:
        raise ValueError(f"cu_seqlens_q must have shape (batch + 1,), got {tuple(cu_shape)}")
    batch = cu_shape[0] - 1
    extra = (batch, max_seqlen_q, max_seqlen_k)
    # A Python int in range passes as it is; anything else gets _integer()'s checks (two
    # frames fewer a call than checking each, 0.2 us).
    if not (type(max_seqlen_q) is int and type(max_seqlen_k) is int
            and _INT64[0] <= max_seqlen_q <= _INT64[1] and _INT64[0] <= max_seqlen_k <= _INT64[1]):
        extra = (batch, _integer("max_seqlen_q", max_seqlen_q),
                 _integer("max_seqlen_k", max_seqlen_k))
    if window is _NO_WINDOW and softcap == 0.0 and alibi_slopes is None and sinks is None:
        features = ("varlen", _NO_WINDOW, 0.0, 0, False, 0, extra)  # _features(), 0.1 us less
    else:
        heads_q = getattr(q, "shape", (0, 0))[1] if len(getattr(q, "shape", ())) == 3 else 0
        features = _features("varlen", window, softcap, alibi_slopes, sinks, batch, heads_q,
                             extra=extra)
    descale, described = (_NO_DESCALE if q_descale is None and k_descale is None and
                          v_descale is None else _descales(q_descale, k_descale, v_descale))
    tq, tk, tv, to, tlse, o, lse, handle, key = _prepare(q, k, v, out, return_lse, stream, causal,
                                                          softmax_scale, kernel, "bshd", features,
                                                          descale)
    ctx = _contexts.get(tq.device) or _context(tq.device)
    plan = ctx._plans(key)
    if plan is None:
        return (o, lse) if return_lse else o
    device, rows = tq.device, (batch + 1,)
    if cu_q[3] is not None:  # a DLPack capsule, exported before the stream was known
        cu_q = _tensors.describe_aux(cu_seqlens_q, "cu_seqlens_q", "int32", handle)
    if cu_q[1] != rows or cu_q[2] != device:
        _aux_mismatch("cu_seqlens_q", cu_q, rows, device)
    cu_k = _tensors.describe_aux(cu_seqlens_k, "cu_seqlens_k", "int32", handle)
    if cu_k[1] != rows or cu_k[2] != device:
        _aux_mismatch("cu_seqlens_k", cu_k, rows, device)
    # cu_q and cu_k hold their capsules (keepalive), keep_scratch the scratch, through the call.
    if alibi_slopes is None and sinks is None and descale is None:
        # _run_ex() inline on this thread's forward_varlen struct, as in forward_kvcache().
        ptr, size, keep_scratch = (_NO_SCRATCH if workspace is None and not plan.workspace else
                                   _scratch(plan, workspace, tq, key, handle))
        try:
            words, address = _thread.varlen_args
        except AttributeError:
            words, address = _run_args("varlen_args")
        words[1] = cu_q[0]
        words[2] = cu_k[0]
        words[7] = ptr
        words[8] = size
        status = ctx._owner.run_ex(plan.handle, tq.ptr, tk.ptr, tv.ptr, to.ptr,
                                   None if tlse is None else tlse.ptr, address, handle)
        if status:
            check(status)
        return (o, lse) if return_lse else o
    alibi, sink, keepalive = _slopes_and_sinks(alibi_slopes, sinks, tq.shape[1], device, handle)
    descales = None
    if descale is not None:
        descales, keep_descales = _descale_pointers((q_descale, k_descale, v_descale),
                                                    described, descale, batch, tk.shape[1],
                                                    device, handle)
    return _run_ex(ctx, plan, tq, tk, tv, to, tlse, o, lse, handle, key, return_lse,
                   (cu_q[0], cu_k[0], None, None, alibi, sink), workspace, descales)


def forward_kvcache(q: Any, k_cache: Any, v_cache: Any, *, cache_seqlens: Any,
                    block_table: Any = None, num_splits: int = 0, causal: bool = False,
                    softmax_scale: Optional[float] = None, window: Tuple[int, int] = _NO_WINDOW,
                    softcap: float = 0.0, alibi_slopes: Any = None, sinks: Any = None,
                    out: Any = None, return_lse: bool = False, stream: Any = None,
                    kernel: Optional[str] = None, workspace: Any = None, q_descale: Any = None,
                    k_descale: Any = None, v_descale: Any = None) -> Union[Any, Tuple[Any, Any]]:
    """Attention of new query rows against a key/value cache, contiguous or paged
    (FlashAttention's ``flash_attn_with_kvcache`` without the cache append).

    Parameters
    ----------
    q : array
        ``(batch, seqlen_q, heads_q, head_dim)``: 1 row per sequence for decoding, a few for
        speculative decoding, more for chunked prefill.
    k_cache, v_cache : array
        Contiguous: ``(batch, capacity, heads_kv, head_dim)``. Paged (with ``block_table``):
        ``(num_pages, page_size, heads_kv, head_dim)``, any page size. v_cache's last
        dimension is head_dim_v (as forward()). Only the last dimension must be contiguous:
        a head-major cache (Hugging Face's ``(batch, heads_kv, capacity, head_dim)``,
        FlashInfer's HND pages ``(num_pages, heads_kv, page_size, head_dim)``) is passed as
        its transposed view, ``k.transpose(1, 2)`` (PyTorch) or ``k.transpose(0, 2, 1, 3)``.
    cache_seqlens : array
        int32 ``(batch,)`` on q's device: how many cache rows sequence ``b`` sees. Masks align to
        it (the last query row sits at key position ``cache_seqlens[b] - 1``).
    block_table : array, optional
        int32 ``(batch, max_pages_per_seq)``: row ``j`` of sequence ``b`` lives in page
        ``block_table[b, j // page_size]``. Only the pages holding visible rows are read.
    num_splits : int
        Split each sequence's keys across this many thread blocks (split-KV), merged by a
        second kernel; 0 lets the library choose from the batch, heads, lengths and the GPU's
        SMs, 1 never splits. The workspace it needs comes from ``workspace`` or is allocated
        with q's library (see forward()).
    causal, softmax_scale, window, softcap, alibi_slopes, sinks, out, return_lse, stream, kernel
        As forward() (``bshd`` layout).
    workspace, q_descale, k_descale, v_descale : array, optional
        As forward().

    Returns
    -------
    out : array
        ``(batch, seqlen_q, heads_q, head_dim_v)``; with ``return_lse`` also the float32
        ``(batch, heads_q, seqlen_q)`` LSE.
    """
    if block_table is None:
        mode, extra, table = "kvcache", (), None
    else:
        table = _tensors.describe_aux(block_table, "block_table", "int32")
        if len(table[1]) != 2:
            shape = getattr(q, "shape", ())
            raise ValueError(f"block_table has shape {tuple(table[1])}; expected "
                             f"({shape[0] if len(shape) == 4 else 0}, max_pages_per_seq)")
        mode, extra = "paged", (table[1][1],)
    if (window is _NO_WINDOW and softcap == 0.0 and alibi_slopes is None and sinks is None
            and type(num_splits) is int and num_splits == 0):
        # _features() inline (0.1 us less); the contiguous cache's is one object, which the plan
        # cache's lookup compares by identity (0.04 us less than a new tuple's items).
        features = _KVCACHE if table is None else ("paged", _NO_WINDOW, 0.0, 0, False, 0, extra)
    else:
        shape = getattr(q, "shape", ())
        batch, heads_q = (shape[0], shape[2]) if len(shape) == 4 else (0, 0)
        features = _features(mode, window, softcap, alibi_slopes, sinks, batch, heads_q,
                             num_splits, extra)
    descale, described = (_NO_DESCALE if q_descale is None and k_descale is None and
                          v_descale is None else _descales(q_descale, k_descale, v_descale))
    tq, tk, tv, to, tlse, o, lse, handle, key = _prepare(q, k_cache, v_cache, out, return_lse,
                                                          stream, causal, softmax_scale, kernel,
                                                          "bshd", features, descale)
    batch = tq.shape[0]
    if table is not None and table[1][0] != batch:
        raise ValueError(f"block_table has shape {tuple(table[1])}; expected ({batch}, "
                         "max_pages_per_seq)")
    ctx = _contexts.get(tq.device) or _context(tq.device)
    plan = ctx._plans(key)
    if plan is None:
        return (o, lse) if return_lse else o
    device = tq.device
    lens = _tensors.describe_aux(cache_seqlens, "cache_seqlens", "int32", handle)
    if lens[1] != (batch,) or lens[2] != device:
        _aux_mismatch("cache_seqlens", lens, (batch,), device)
    if table is None:
        pages = None
    else:
        if table[3] is not None:  # a DLPack capsule, exported before the stream was known
            table = _tensors.describe_aux(block_table, "block_table", "int32", handle)
        if table[2] != device:
            _aux_mismatch("block_table", table, table[1], device)
        pages = table[0]
    # lens and table hold their capsules (keepalive), keep_scratch the scratch, through the call.
    if alibi_slopes is None and sinks is None and descale is None:
        # _run_ex() inline on this thread's forward_kvcache struct (see _run_args): its frame
        # of fifteen arguments and its eight words cost 0.3 us of the 7 a call takes on the CI
        # machine (PyTorch tensors, the C call stubbed).
        ptr, size, keep_scratch = (_NO_SCRATCH if workspace is None and not plan.workspace else
                                   _scratch(plan, workspace, tq, key, handle))
        try:
            words, address = _thread.kvcache_args
        except AttributeError:
            words, address = _run_args("kvcache_args")
        words[3] = lens[0]
        words[4] = pages
        words[7] = ptr
        words[8] = size
        status = ctx._owner.run_ex(plan.handle, tq.ptr, tk.ptr, tv.ptr, to.ptr,
                                   None if tlse is None else tlse.ptr, address, handle)
        if status:
            check(status)
        return (o, lse) if return_lse else o
    alibi, sink, keepalive = _slopes_and_sinks(alibi_slopes, sinks, tq.shape[2], device, handle)
    descales = None
    if descale is not None:
        descales, keep_descales = _descale_pointers((q_descale, k_descale, v_descale),
                                                    described, descale, batch, tk.shape[2],
                                                    device, handle)
    return _run_ex(ctx, plan, tq, tk, tv, to, tlse, o, lse, handle, key, return_lse,
                   (None, None, lens[0], pages, alibi, sink), workspace, descales)


def merge_states(o_a: Any, lse_a: Any, o_b: Any, lse_b: Any, *, out: Any = None,
                 stream: Any = None) -> Tuple[Any, Any]:
    """Merges two attention results over disjoint key sets of the same queries into the result
    over their union (``fa_merge_states``): for prefix caches, cascades and sequences split
    across GPUs.

    Parameters
    ----------
    o_a, o_b : array
        ``(batch, seqlen, heads, head_dim)`` outputs (the same strides).
    lse_a, lse_b : array
        Their float32 ``(batch, heads, seqlen)`` log-sum-exps (contiguous), as forward(...,
        return_lse=True) returns them.
    out : (array, array), optional
        Where to write ``(o, lse)``: o with o_a's strides; ``out=(o_a, lse_a)`` merges in place.
        None allocates them (o with o_a's strides: a strided view of o_a's extent where o_a
        is not dense).
    stream
        As forward().

    Returns
    -------
    (o, lse)
        ``lse = log(exp(lse_a) + exp(lse_b))`` and ``o = exp(lse_a - lse) o_a + exp(lse_b - lse)
        o_b``; a side with ``lse = -inf`` contributes nothing.
    """
    handle = None if stream is None else _tensors.stream_handle(stream)
    ta = _tensors.describe(o_a, "o_a", handle)
    if handle is None:
        handle = ta.stream
    # As _prepare(): o_a read through its attributes gives its device's current stream.
    known = (ta.device, ta.stream) if ta.library == "torch" and ta.keepalive is None else None
    tb = _tensors.describe(o_b, "o_b", handle, known)
    shape, strides, device = ta.shape, ta.strides, ta.device
    if len(shape) != 4:
        raise ValueError(f"o_a must have 4 dimensions (batch, seqlen, heads, head_dim), got "
                         f"shape {tuple(shape)}")
    # fa_merge_config reads all-zero leading strides as packed: a broadcast o_a was read (and a
    # new o of its strides written) far past its elements. o_b and out must share its strides.
    # Inline, not _check_not_broadcast(): this runs on every call (0.1 us against 0.8).
    if not (strides[0] or strides[1] or strides[2]) and shape[0] * shape[1] * shape[2] != 1:
        _check_not_broadcast((("o_a", (shape, strides, None, None)),))
    if out is None:
        o = lse = None
    elif type(out) is tuple and len(out) == 2:
        o, lse = out
    else:
        # An array would be unpacked along its first dimension.
        raise TypeError(f"out must be a pair (o, lse) (either may be None), got "
                        f"{type(out).__name__}")
    if o is None:
        # o_a's strides: one set of strides describes o_a, o_b and o in fa_merge_config.
        o, to = _tensors.new_strided_output(ta, "out", handle)
    elif _read_only(o):
        raise ValueError("out is read-only")
    else:
        to = _tensors.describe(o, "out", handle, known)
    batch, seqlen, heads, dim = shape
    rows = (batch, heads, seqlen)
    # Each described array holds its DLPack capsule, if any, through the call.
    if lse is None:
        # Dense float32 (batch, heads, seqlen) on o_a's device by construction: its address is
        # all there is to read.
        lse, address = _tensors.empty_float32(ta, rows, "lse", handle)
        lo = (address, rows, device, None)
    elif _read_only(lse):
        raise ValueError("lse is read-only")
    else:
        lo = _tensors.describe_aux(lse, "lse", "float32", handle)
    la = _tensors.describe_aux(lse_a, "lse_a", "float32", handle)
    lb = _tensors.describe_aux(lse_b, "lse_b", "float32", handle)
    # The checks as conditions, their messages in _merge_mismatch(): loops over (name, array)
    # pairs cost 0.3 us a call on the CI machine.
    if (la[1] != rows or lb[1] != rows or lo[1] != rows or la[2] != device
            or lb[2] != device or lo[2] != device):
        _merge_mismatch(ta, tb, to, la, lb, lo)
    # o_b and out have o_a's strides (checked next), so o_a's last stride speaks for all three.
    if strides[3] != 1 and shape[3] > 1:
        raise ValueError(f"o_a: the last dimension must be contiguous (stride {strides[3]})")
    dtype = ta.dtype
    if (tb.shape != shape or tb.dtype != dtype or tb.device != device or to.shape != shape
            or to.dtype != dtype or to.device != device
            or (tb.strides != strides and not _same_strides(shape, tb.strides, strides))
            or (to.strides != strides and not _same_strides(shape, to.strides, strides))):
        _merge_mismatch(ta, tb, to, la, lb, lo)
    if 0 in shape:
        return o, lse
    ctx = _contexts.get(device) or _context(device)
    # Held through the call: another thread may drop it from the cache meanwhile.
    cfg = _merge_config(dtype, shape, strides)
    status = ctx._owner.merge(ctx._handle, cfg[1], ta.ptr, la[0], tb.ptr, lb[0], to.ptr, lo[0],
                              None if device == _ffi.FA_DEVICE_CPU else handle)
    if status:
        check(status)
    return o, lse


def _same_strides(shape, a, b):
    """Whether strides a and b address the same elements of an array of `shape`: equal but
    along dimensions of extent 1, whose stride is never applied (numpy calls such an array
    contiguous whatever that stride is, and a new output gets the packed one)."""
    return all(x == y or n == 1 for n, x, y in zip(shape, a, b))


def _merge_mismatch(ta, tb, to, la, lb, lo):
    """Raises the ValueError for the first array of a merge that does not fit o_a: a negative
    stride of o_a, an lse that is not (batch, heads, seqlen) on o_a's device, or o_b or out
    without o_a's shape, strides, dtype and device."""
    if any(s < 0 for s in ta.strides):
        # A new out is allocated in o_a's dimension order with positive strides, which would
        # otherwise be named as the mismatch.
        raise ValueError(f"o_a: strides {tuple(ta.strides)} must be >= 0")
    batch, seqlen, heads, _ = ta.shape
    rows = (batch, heads, seqlen)
    for name, described in (("lse_a", la), ("lse_b", lb), ("lse", lo)):
        if described[1] != rows or described[2] != ta.device:
            raise ValueError(f"{name} must be float32 (batch, heads, seqlen) = {rows} on o_a's "
                             f"device, got {tuple(described[1])}")
    for name, t in (("o_b", tb), ("out", to)):
        if t.shape != ta.shape or not _same_strides(ta.shape, t.strides, ta.strides):
            raise ValueError(f"{name} must have o_a's shape and strides {tuple(ta.shape)}, "
                             f"{tuple(ta.strides)}")
        if t.dtype != ta.dtype or t.device != ta.device:
            raise ValueError(f"{name} must have o_a's dtype and device")


# One fa_merge_config per merge shape and strides, built once (a struct, its init call and
# eight checked fields cost 7 us a call on the CI machine, and declaring fa_merge_states per
# call, which the context's _Owner now holds, 6 more) and only read by the library afterwards,
# so threads share it. Keyed by the shape and strides tuples as the arrays give them: hashing
# three arguments costs 0.15 us less than unpacking them into eight.
@functools.lru_cache(maxsize=_PLANS_PER_CONTEXT)
def _merge_config(dtype, shape, strides):
    """(fa_merge_config, its address) of one merge."""
    cfg = _ffi.fa_merge_config()
    check(_ffi.lib().fa_merge_config_init(ctypes.byref(cfg)))
    cfg.dtype = dtype
    cfg.batch, cfg.seqlen, cfg.heads, cfg.head_dim = shape
    cfg.o_batch_stride, cfg.o_seq_stride, cfg.o_head_stride = strides[:3]
    return cfg, ctypes.addressof(cfg)


def autotune(q: Any, k: Any, v: Any, *, causal: bool = False,
             softmax_scale: Optional[float] = None, out: Any = None, stream: Any = None,
             layout: Literal["bshd", "bhsd"] = "bshd") -> Tuple[str, float]:
    """Times the GPU kernels that can run this problem and makes the fastest the choice for its
    shape in q's device context (``fa_autotune``), for this process and for save_tuning().

    Parameters
    ----------
    q, k, v, causal, softmax_scale, stream, layout
        As forward().
    out : array, optional
        As forward(); overwritten (it ends with a correct result).

    Returns
    -------
    name : str
        The winning kernel's short name.
    ms : float
        Its median time in milliseconds.

    Notes
    -----
    Waits for the GPU. A CPU problem raises WrongContextError.
    """
    tq, tk, tv, to, _, _, _, handle, key = _prepare(q, k, v, out, False, stream, causal,
                                                    softmax_scale, None, layout)
    cfg = _config(_structured(key))
    if cfg is None:
        raise ValueError(f"q has no query row (shape {tuple(tq.shape)}): nothing to tune")
    ctx = _context(tq.device)
    lib = _ffi.lib()
    best = _ffi.fa_kernel_config()
    check(lib.fa_kernel_config_init(ctypes.byref(best)))
    ms = ctypes.c_float()
    check(lib.fa_autotune(ctx._handle, ctypes.byref(cfg), tq.ptr, tk.ptr, tv.ptr, to.ptr, None,
                          handle, ctypes.byref(best), ctypes.byref(ms)))
    # Plans are bound to the kernel chosen when they were made; the tuned choice replaces it.
    ctx._plans.cache_clear()
    return _kernel_name(best), ms.value


def save_tuning(path: Union[str, "os.PathLike[str]"], device: int = 0) -> None:
    """Writes the tuning results of `device`'s context (see autotune()) to `path`."""
    _context(device).save_tuning(path)


def load_tuning(path: Union[str, "os.PathLike[str]"], device: int = 0) -> None:
    """Loads a tuning file into `device`'s context; stale entries warn
    (TuningEntriesIgnoredWarning)."""
    _context(device).load_tuning(path)
