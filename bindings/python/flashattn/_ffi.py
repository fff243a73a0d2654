"""ctypes declarations of include/flashattn.h, one to one, and the library loader.

Every function of the header is declared here with its argtypes and restype; nothing else in the
package calls the library without going through these declarations.
"""
import ctypes
import operator
import os
import threading
import warnings
from ctypes import (POINTER, Structure, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t,
                    c_uint, c_void_p)
from pathlib import Path

# ---- Types ----------------------------------------------------------------------------------------

fa_status = c_int  # enum fa_status; values in flashattn.errors
fa_stream_t = c_void_p
fa_context_p = c_void_p  # fa_context_t*
fa_plan_p = c_void_p  # fa_plan_t*

FA_DEVICE_CPU = -1
FA_DTYPE_FP16 = 1
FA_DTYPE_BF16 = 2
FA_DTYPE_FP32 = 3
FA_DTYPE_E4M3 = 4  # since 0.3.0: FP8 E4M3 ("e4m3fn"), an input type
FA_DESCALE_PER_TENSOR, FA_DESCALE_PER_HEAD_KV = 0, 1
FA_LAYOUT_DENSE, FA_LAYOUT_VARLEN, FA_LAYOUT_KV_CACHE, FA_LAYOUT_PAGED_KV = 0, 1, 2, 3
FA_ALIBI_NONE, FA_ALIBI_PER_HEAD, FA_ALIBI_PER_BATCH = 0, 1, 2


# The values each integer field's C type holds: ctypes stores any other value modulo 2^bits
# (window_left = 2**64 + 3 became 3), so the library would see a value the caller never passed.
_INT_RANGES = {c_int32: (-2**31, 2**31 - 1), c_int64: (-2**63, 2**63 - 1),
               c_size_t: (0, 2**64 - 1)}


class CheckedStructure(Structure):
    """A Structure whose integer fields take only integers (Python or numpy) within their C
    type's range: ValueError (TypeError for another type) names the field and the value."""

    _ranges = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._ranges = {field[0]: _INT_RANGES[field[1]] for field in cls.__dict__["_fields_"]
                       if field[1] in _INT_RANGES}

    def __setattr__(self, name, value):
        bounds = self._ranges.get(name)
        if bounds is not None:
            try:
                value = operator.index(value)
            except TypeError:
                raise TypeError(f"{type(self).__name__}.{name} must be an integer, got "
                                f"{type(value).__name__}") from None
            if not bounds[0] <= value <= bounds[1]:
                raise ValueError(f"{type(self).__name__}.{name} = {value} is outside "
                                 f"[{bounds[0]}, {bounds[1]}]")
        super().__setattr__(name, value)


class fa_config(CheckedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int32),
        ("causal", c_int32),
        ("batch", c_int64),
        ("seqlen_q", c_int64),
        ("seqlen_k", c_int64),
        ("heads_q", c_int64),
        ("heads_kv", c_int64),
        ("head_dim", c_int64),
        ("softmax_scale", c_float),
        ("reserved0", c_int32),
        ("q_batch_stride", c_int64), ("q_seq_stride", c_int64), ("q_head_stride", c_int64),
        ("k_batch_stride", c_int64), ("k_seq_stride", c_int64), ("k_head_stride", c_int64),
        ("v_batch_stride", c_int64), ("v_seq_stride", c_int64), ("v_head_stride", c_int64),
        ("o_batch_stride", c_int64), ("o_seq_stride", c_int64), ("o_head_stride", c_int64),
        # Since 0.3.0.
        ("layout", c_int32),
        ("window", c_int32),
        ("window_left", c_int64),
        ("window_right", c_int64),
        ("softcap", c_float),
        ("alibi", c_int32),
        ("sinks", c_int32),
        ("num_splits", c_int32),
        ("total_q", c_int64),
        ("total_k", c_int64),
        ("num_pages", c_int64),
        ("page_size", c_int64),
        ("max_pages_per_seq", c_int64),
        # Since 0.3.0, after max_pages_per_seq.
        ("head_dim_v", c_int64),
        # Since 0.3.0, after head_dim_v: FP8 types (the Python API does not expose them yet; the
        # fields keep the struct the size the library writes).
        ("kv_dtype", c_int32),
        ("out_dtype", c_int32),
        ("descale", c_int32),
        ("reserved1", c_int32),
    ]


class fa_run_args(CheckedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("cu_seqlens_q", POINTER(c_int32)),
        ("cu_seqlens_k", POINTER(c_int32)),
        ("cache_seqlens", POINTER(c_int32)),
        ("block_table", POINTER(c_int32)),
        ("alibi_slopes", POINTER(c_float)),
        ("sinks", POINTER(c_float)),
        ("workspace", c_void_p),
        ("workspace_size", c_size_t),
        # Since 0.3.0, after workspace_size: FP8 descale factors (NULL: 1.0).
        ("q_descale", POINTER(c_float)),
        ("k_descale", POINTER(c_float)),
        ("v_descale", POINTER(c_float)),
    ]


class fa_merge_config(CheckedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int32),
        ("reserved0", c_int32),
        ("batch", c_int64), ("seqlen", c_int64), ("heads", c_int64), ("head_dim", c_int64),
        ("o_batch_stride", c_int64), ("o_seq_stride", c_int64), ("o_head_stride", c_int64),
    ]


class fa_kernel_config(CheckedStructure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int32),
        ("d_head", c_int32),
        ("B_r", c_int32),
        ("B_c", c_int32),
        ("n_warps", c_int32),
        ("async_copy", c_int32),
        ("eager_load_blocks", c_int32),
        ("swizzled", c_int32),
        ("Q_mma_load_K_tiles", c_int32),
        ("K_mma_load_K_tiles", c_int32),
        ("V_mma_load_K_tiles", c_int32),
        ("mma_double_buffer_loads", c_int32),
        ("optimized_softmax", c_int32),
        ("family", c_int32),  # since 0.3
        ("stages", c_int32),
        ("overlap", c_int32),
        ("pingpong", c_int32),
        ("persistent", c_int32),
    ]


_P = POINTER

# name: (restype, argtypes), in header order.
SIGNATURES = {
    "fa_version_number": (c_uint, []),
    "fa_version_string": (c_char_p, []),
    "fa_status_string": (c_char_p, [fa_status]),
    "fa_last_error_detail": (c_char_p, []),
    "fa_run_args_init": (fa_status, [_P(fa_run_args)]),
    "fa_config_init": (fa_status, [_P(fa_config)]),
    "fa_config_validate": (fa_status, [_P(fa_config)]),
    "fa_config_extents": (fa_status, [_P(fa_config), _P(c_int64), _P(c_int64), _P(c_int64),
                                      _P(c_int64), _P(c_int64)]),
    "fa_context_create": (fa_status, [c_int, _P(fa_context_p)]),
    "fa_context_destroy": (None, [fa_context_p]),
    "fa_context_device": (fa_status, [fa_context_p, _P(c_int)]),
    "fa_forward": (fa_status, [fa_context_p, _P(fa_config), c_void_p, c_void_p, c_void_p,
                               c_void_p, _P(c_float), fa_stream_t]),
    "fa_forward_ex": (fa_status, [fa_context_p, _P(fa_config), c_void_p, c_void_p, c_void_p,
                                  c_void_p, _P(c_float), _P(fa_run_args), fa_stream_t]),
    "fa_merge_config_init": (fa_status, [_P(fa_merge_config)]),
    "fa_merge_states": (fa_status, [fa_context_p, _P(fa_merge_config), c_void_p, _P(c_float),
                                    c_void_p, _P(c_float), c_void_p, _P(c_float), fa_stream_t]),
    "fa_kernel_config_init": (fa_status, [_P(fa_kernel_config)]),
    "fa_kernel_count": (c_size_t, []),
    "fa_kernel_get": (fa_status, [c_size_t, _P(fa_kernel_config)]),
    "fa_kernel_config_name": (fa_status, [_P(fa_kernel_config), c_char_p, c_size_t,
                                          _P(c_size_t)]),
    "fa_kernel_config_parse": (fa_status, [c_char_p, _P(fa_kernel_config)]),
    "fa_kernel_config_validate": (fa_status, [_P(fa_kernel_config)]),
    "fa_kernel_config_autotune_filter": (fa_status, [_P(fa_kernel_config), _P(c_int)]),
    "fa_kernel_config_canonical": (fa_status, [_P(fa_kernel_config), _P(fa_kernel_config)]),
    "fa_kernel_is_registered": (fa_status, [_P(fa_kernel_config), _P(c_int)]),
    "fa_context_set_kernel": (fa_status, [fa_context_p, _P(fa_config), _P(fa_kernel_config)]),
    "fa_autotune": (fa_status, [fa_context_p, _P(fa_config), c_void_p, c_void_p, c_void_p,
                                c_void_p, _P(c_float), fa_stream_t, _P(fa_kernel_config),
                                _P(c_float)]),
    "fa_context_save_tuning": (fa_status, [fa_context_p, c_char_p]),
    "fa_context_load_tuning": (fa_status, [fa_context_p, c_char_p]),
    "fa_context_tuned_count": (fa_status, [fa_context_p, _P(c_size_t)]),
    "fa_plan_create": (fa_status, [fa_context_p, _P(fa_config), _P(fa_plan_p)]),
    "fa_plan_create_with_kernel": (fa_status, [fa_context_p, _P(fa_config),
                                               _P(fa_kernel_config), _P(fa_plan_p)]),
    "fa_plan_kernel": (fa_status, [fa_plan_p, _P(fa_kernel_config)]),
    "fa_plan_workspace_size": (fa_status, [fa_plan_p, _P(c_size_t)]),
    "fa_plan_run": (fa_status, [fa_plan_p, c_void_p, c_void_p, c_void_p, c_void_p, _P(c_float),
                                c_void_p, c_size_t, fa_stream_t]),
    "fa_plan_run_ex": (fa_status, [fa_plan_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                   _P(c_float), _P(fa_run_args), fa_stream_t]),
    "fa_plan_num_splits": (fa_status, [fa_plan_p, _P(c_int)]),
    "fa_plan_destroy": (None, [fa_plan_p]),
}

# ---- Loading --------------------------------------------------------------------------------------

_lock = threading.Lock()
_lib = None


def _candidates():
    here = Path(__file__).resolve().parent
    # An explicit choice is the only candidate: falling back to the packaged library would run
    # code other than the one asked for, silently.
    if os.environ.get("FLASHATTN_LIBRARY"):
        return [("$FLASHATTN_LIBRARY", Path(os.environ["FLASHATTN_LIBRARY"]))]
    paths = [("next to the package", here / "libflashattn.so.0"),
              ("next to the package", here / "libflashattn.so")]
    # This repository's build tree, when the package is used from a checkout (bindings/python).
    if len(here.parents) >= 3:
        paths.append(("the repository's build tree", here.parents[2] / "build" / "libflashattn.so.0"))
    return paths


def lib():
    """The loaded library, with every header function declared. Raises OSError naming the
    places tried when it cannot be found."""
    global _lib
    with _lock:
        if _lib is None:
            tried = []
            for where, path in _candidates():
                if not path.exists():
                    tried.append(f"{path} ({where}: not found)")
                    continue
                try:
                    handle = ctypes.CDLL(str(path))
                except OSError as e:
                    tried.append(f"{path} ({where}: {e})")
                    continue
                for name, (restype, argtypes) in SIGNATURES.items():
                    fn = getattr(handle, name)
                    fn.restype = restype
                    fn.argtypes = argtypes
                _lib = handle
                _warn_if_cpu_only_beside_a_gpu(path)
                break
            else:
                if os.environ.get("FLASHATTN_LIBRARY"):
                    raise ImportError(f"FLASHATTN_LIBRARY={os.environ['FLASHATTN_LIBRARY']} does "
                                      f"not load: {tried[0]}; unset it to use the packaged library")
                raise OSError("libflashattn.so not found; tried:\n  " + "\n  ".join(tried) +
                              "\nSet FLASHATTN_LIBRARY to the library's path.")
        return _lib


def _nvidia_gpu_present():
    """Whether this machine has an NVIDIA driver with a device (its control node exists)."""
    return os.path.exists("/dev/nvidiactl")


def _warn_if_cpu_only_beside_a_gpu(path):
    # A wheel built where CMake found no CUDA compiler is CPU-only (FA_CUDA=OFF), and pip shows
    # the build's notice only with -v; said once here where it matters: a GPU the library
    # cannot use. Without a GPU, a CPU-only library is what the machine can run: no warning.
    if _lib.fa_kernel_count() == 0 and _nvidia_gpu_present():
        warnings.warn(f"libflashattn ({path}) has no GPU kernels: it was built without CUDA "
                      "(FA_CUDA=OFF, e.g. where pip found no CUDA compiler), so this machine's "
                      "NVIDIA GPU cannot be used and GPU contexts raise; install the CUDA Toolkit "
                      "12+ and reinstall (pip install -v shows the build's messages)",
                      RuntimeWarning, stacklevel=3)


# A library named by FLASHATTN_LIBRARY is loaded at import, so a wrong path fails `import
# flashattn` with an ImportError naming it rather than at the first call.
if os.environ.get("FLASHATTN_LIBRARY"):
    lib()


def raw(name):
    """A second declaration of the header function `name` in which every pointer argument is a
    c_void_p, for hot paths that hold addresses as Python ints: ctypes passes an int as c_void_p
    directly, where a POINTER(c_float) argument needs a ctypes.cast per call (0.5 us)."""
    restype, argtypes = SIGNATURES[name]
    fn = lib()[name]  # indexing makes a new function object; lib().<name> keeps its declaration
    fn.restype = restype
    fn.argtypes = [c_void_p if issubclass(t, ctypes._Pointer) else t for t in argtypes]
    return fn
