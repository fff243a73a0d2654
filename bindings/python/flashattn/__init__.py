"""FlashAttention forward through libflashattn.

Shapes (all functions):
    q    (batch, seqlen_q, heads_q, head_dim)
    k, v (batch, seqlen_k, heads_kv, head_dim), heads_q a multiple of heads_kv (GQA/MQA)
    out  (batch, seqlen_q, heads_q, head_dim), the dtype of q
    lse  (batch, heads_q, seqlen_q), float32, natural log

The last dimension of every tensor must be contiguous; the other strides are free (views work).
numpy arrays run on the CPU backend (float32, float16, bfloat16 via ml_dtypes); CUDA arrays
(PyTorch, CuPy, JAX, ... through __dlpack__ or __cuda_array_interface__) on their GPU (float16,
bfloat16). Errors raise a subclass of FlashAttnError per library status (see flashattn.errors).
"""
import ctypes
import os
import threading

from . import _ffi, _tensors
from .errors import (ArchMismatchError, BadStructSizeError, CudaError, FlashAttnError,
                     InternalError, InvalidArgumentError, InvalidKernelConfigError,
                     ParseError, KernelNotAvailableError, NoDeviceError,
                     OutOfMemoryError, TuningEntriesIgnoredWarning, TuningFileError,
                     UnsupportedError, WorkspaceTooSmallError, WrongContextError, check)

__all__ = [
    "Context", "forward", "autotune", "kernels", "save_tuning", "load_tuning", "version",
    "FlashAttnError", "InvalidArgumentError", "BadStructSizeError", "UnsupportedError",
    "InvalidKernelConfigError", "KernelNotAvailableError", "ParseError",
    "NoDeviceError", "ArchMismatchError", "CudaError", "OutOfMemoryError",
    "WorkspaceTooSmallError", "WrongContextError", "InternalError", "TuningFileError",
    "TuningEntriesIgnoredWarning",
]


def version():
    """The loaded library's version string, e.g. "0.2.0"."""
    return _ffi.lib().fa_version_string().decode()


def _kernel_config(name):
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


def kernels():
    """Short names of every GPU kernel compiled into the library, in registry order, e.g.
    "(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles"."""
    lib = _ffi.lib()
    names = []
    for i in range(lib.fa_kernel_count()):
        kc = _ffi.fa_kernel_config()
        check(lib.fa_kernel_config_init(ctypes.byref(kc)))
        check(lib.fa_kernel_get(i, ctypes.byref(kc)))
        names.append(_kernel_name(kc))
    return names


class Context:
    """A libflashattn context on one CUDA device (ordinal >= 0) or the CPU (device=None).
    Safe to share between threads; the module functions keep one per device."""

    def __init__(self, device=None):
        lib = _ffi.lib()
        handle = _ffi.fa_context_p()
        check(lib.fa_context_create(_ffi.FA_DEVICE_CPU if device is None else int(device),
                                    ctypes.byref(handle)))
        self._handle = handle
        self.device = device

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            _ffi.lib().fa_context_destroy(handle)
            self._handle = None

    @property
    def tuned_count(self):
        """Number of shapes with a tuned kernel in this context."""
        n = ctypes.c_size_t()
        check(_ffi.lib().fa_context_tuned_count(self._handle, ctypes.byref(n)))
        return n.value

    def save_tuning(self, path):
        """Writes this context's tuning results to `path` (a versioned text file)."""
        check(_ffi.lib().fa_context_save_tuning(self._handle, os.fsencode(path)))

    def load_tuning(self, path):
        """Loads a tuning file; entries that no longer fit warn with TuningEntriesIgnoredWarning."""
        check(_ffi.lib().fa_context_load_tuning(self._handle, os.fsencode(path)))


_contexts = {}
_contexts_lock = threading.Lock()


def _context(device):
    with _contexts_lock:
        if device not in _contexts:
            _contexts[device] = Context(None if device == _ffi.FA_DEVICE_CPU else device)
        return _contexts[device]


def _problem(q, k, v, o, causal, softmax_scale):
    """fa_config for described tensors. Only the mapping of shapes onto the config is checked
    here; the library validates the problem itself."""
    for name, t in (("q", q), ("k", k), ("v", v), ("out", o)):
        if len(t.shape) != 4:
            raise ValueError(f"{name} must have 4 dimensions (batch, seq, heads, head_dim), "
                             f"got shape {t.shape}")
        # The C API reads three zero strides as "packed"; a tensor broadcast along all three
        # dimensions must be materialised first.
        if t.strides[:3] == (0, 0, 0) and t.shape[:3] != (1, 1, 1):
            raise ValueError(f"{name} is broadcast along batch, seq and heads (strides 0, 0, 0); "
                             "make it contiguous first")
        if t.strides[3] != 1 and t.shape[3] > 1:
            raise ValueError(f"{name}: the last dimension must be contiguous (stride "
                             f"{t.strides[3]})")
    if k.shape != v.shape:
        raise ValueError(f"k and v shapes differ: {k.shape} vs {v.shape}")
    if o.shape != q.shape:
        raise ValueError(f"out has shape {o.shape}, expected q's {q.shape}")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"k/v shape {k.shape} does not match q's batch and head_dim {q.shape}")
    for name, t in (("k", k), ("v", v), ("out", o)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has another dtype than q")
        if t.device != q.device:
            raise ValueError(f"{name} is on device {t.device}, q on {q.device}")
    cfg = _ffi.fa_config()
    check(_ffi.lib().fa_config_init(ctypes.byref(cfg)))
    cfg.dtype = q.dtype
    cfg.causal = 1 if causal else 0
    cfg.batch, cfg.seqlen_q, cfg.heads_q, cfg.head_dim = q.shape
    cfg.seqlen_k, cfg.heads_kv = k.shape[1], k.shape[2]
    cfg.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    for prefix, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        setattr(cfg, f"{prefix}_batch_stride", t.strides[0])
        setattr(cfg, f"{prefix}_seq_stride", t.strides[1])
        setattr(cfg, f"{prefix}_head_stride", t.strides[2])
    return cfg


def _prepare(q, k, v, out, return_lse, stream, causal, softmax_scale):
    """Describes the inputs, allocates missing outputs, resolves the stream."""
    handle = _tensors.stream_handle(stream)
    if handle is None:
        handle = _tensors.current_stream(q)
    tq = _tensors.describe(q, "q", handle)
    tk = _tensors.describe(k, "k", handle)
    tv = _tensors.describe(v, "v", handle)
    if isinstance(out, tuple):
        o, lse = out
    else:
        o, lse = out, None
    if o is None:
        o = _tensors.empty_like(tq, tq.shape)
    to = _tensors.describe(o, "out", handle)
    for name, arr in (("out", o), ("lse", lse)):
        if arr is not None and getattr(getattr(arr, "flags", None), "writeable", True) is False:
            raise ValueError(f"{name} is read-only")
    tlse = None
    if return_lse:
        if lse is None:
            lse = _tensors.empty_like(tq, (tq.shape[0], tq.shape[2], tq.shape[1]), float32=True)
        tlse = _tensors.describe(lse, "lse", handle)
        expected = (tq.shape[0], tq.shape[2], tq.shape[1])
        if tlse.shape != expected or tlse.dtype != _ffi.FA_DTYPE_FP32 or tlse.strides != (
                expected[1] * expected[2], expected[2], 1):
            raise ValueError(f"lse must be a contiguous float32 array of shape {expected}")
    cfg = _problem(tq, tk, tv, to, causal, softmax_scale)
    if tq.device == _ffi.FA_DEVICE_CPU and stream is not None:
        raise ValueError("stream= applies to GPU tensors only")
    return tq, tk, tv, to, tlse, o, lse, cfg, handle


def forward(q, k, v, *, causal=False, softmax_scale=None, out=None, return_lse=False,
            stream=None, kernel=None):
    """Attention forward: returns out (and lse when return_lse).

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim).
    causal: bottom-right aligned mask (key j visible to query i iff j <= i + seqlen_k - seqlen_q);
        a query row with no visible key gets out = 0 and lse = -inf.
    softmax_scale: multiplies the scores; None means 1 / sqrt(head_dim).
    out: an output array (batch, seqlen_q, heads_q, head_dim) written in place, or (out, lse) with
        lse (batch, heads_q, seqlen_q) float32; None allocates with q's library (numpy, PyTorch,
        CuPy; other producers must pass out).
    return_lse: also return the log-sum-exp of the scaled scores.
    stream: GPU only; an int (cudaStream_t) or an object with __cuda_stream__. None runs on q's
        library's current stream (PyTorch, CuPy), else the legacy default stream. The call
        returns without waiting for the GPU.
    kernel: pin a GPU kernel by its short name (see kernels()).
    """
    tq, tk, tv, to, tlse, o, lse, cfg, handle = _prepare(q, k, v, out, return_lse, stream, causal,
                                                         softmax_scale)
    ctx = _context(tq.device)
    lib = _ffi.lib()
    lse_ptr = ctypes.cast(tlse.ptr, ctypes.POINTER(ctypes.c_float)) if tlse else None
    if kernel is None:
        check(lib.fa_forward(ctx._handle, ctypes.byref(cfg), tq.ptr, tk.ptr, tv.ptr, to.ptr,
                             lse_ptr, handle))
    else:
        kc = _kernel_config(kernel)
        plan = _ffi.fa_plan_p()
        check(lib.fa_plan_create_with_kernel(ctx._handle, ctypes.byref(cfg), ctypes.byref(kc),
                                             ctypes.byref(plan)))
        try:
            check(lib.fa_plan_run(plan, tq.ptr, tk.ptr, tv.ptr, to.ptr, lse_ptr, None, 0, handle))
        finally:
            lib.fa_plan_destroy(plan)
    return (o, lse) if return_lse else o


def autotune(q, k, v, *, causal=False, softmax_scale=None, out=None, stream=None):
    """Times the kernels that can run this problem on q's GPU (fa_autotune) and makes the fastest
    the choice for its shape in this process (and in save_tuning()). Shapes as forward(); out is
    overwritten. Waits for the GPU. Returns (kernel name, median milliseconds)."""
    tq, tk, tv, to, _, _, _, cfg, handle = _prepare(q, k, v, out, False, stream, causal,
                                                   softmax_scale)
    ctx = _context(tq.device)
    lib = _ffi.lib()
    best = _ffi.fa_kernel_config()
    check(lib.fa_kernel_config_init(ctypes.byref(best)))
    ms = ctypes.c_float()
    check(lib.fa_autotune(ctx._handle, ctypes.byref(cfg), tq.ptr, tk.ptr, tv.ptr, to.ptr, None,
                          handle, ctypes.byref(best), ctypes.byref(ms)))
    return _kernel_name(best), ms.value


def save_tuning(path, device=0):
    """Writes the tuning results of `device`'s context (see autotune) to `path`."""
    _context(device).save_tuning(path)


def load_tuning(path, device=0):
    """Loads a tuning file into `device`'s context; stale entries warn (TuningEntriesIgnoredWarning)."""
    _context(device).load_tuning(path)
