"""Reads pointer, shape, strides, dtype and device off numpy arrays, DLPack producers and
`__cuda_array_interface__` objects, without importing any array library; allocates outputs with
the input's own library. Translation only: every check of the attention problem is the C
library's."""
import ctypes
import sys
from dataclasses import dataclass

from . import _ffi

# DLPack (dmlc/dlpack, include/dlpack/dlpack.h).
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_FLOAT, _DL_BFLOAT = 2, 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass
class Tensor:
    """One array as the C API sees it. `keepalive` holds what must outlive the call."""
    ptr: int
    shape: tuple
    strides: tuple  # in elements
    dtype: int      # fa_dtype
    device: int     # CUDA ordinal, or _ffi.FA_DEVICE_CPU
    library: str    # "numpy", "torch", "cupy" or "" (another producer)
    obj: object
    keepalive: object = None


def _library_of(obj):
    module = type(obj).__module__.split(".")[0]
    return module if module in ("numpy", "torch", "cupy") else ""


def _numpy_dtype_code(dtype):
    name = dtype.name
    if name == "float16":
        return _ffi.FA_DTYPE_FP16
    if name == "bfloat16":  # ml_dtypes.bfloat16
        return _ffi.FA_DTYPE_BF16
    if name == "float32":
        return _ffi.FA_DTYPE_FP32
    raise TypeError(f"dtype {name} is not supported (float16, bfloat16, float32)")


def _from_numpy(arr, name):
    if not arr.dtype.isnative:
        raise TypeError(f"{name}: byte order {arr.dtype.byteorder!r} is not the machine's")
    itemsize = arr.dtype.itemsize
    code = _numpy_dtype_code(arr.dtype)
    if any(s % itemsize for s in arr.strides):
        raise ValueError(f"{name}: strides {arr.strides} are not whole elements")
    return Tensor(arr.ctypes.data, tuple(arr.shape), tuple(s // itemsize for s in arr.strides), code,
                  _ffi.FA_DEVICE_CPU, "numpy", arr)


def _from_dlpack(obj, name, stream):
    # The consumer's stream: the producer makes its pending work on obj visible to it.
    device_type, device_id = obj.__dlpack_device__()
    if device_type not in (_DL_CPU, _DL_CUDA_HOST, _DL_CUDA, _DL_CUDA_MANAGED):
        raise TypeError(f"{name}: DLPack device type {device_type} is neither CPU nor CUDA")
    if device_type in (_DL_CUDA, _DL_CUDA_MANAGED):
        # DLPack reserves 0; the legacy default stream is 1.
        capsule = obj.__dlpack__(stream=stream if stream else 1)
    else:
        capsule = obj.__dlpack__()
    managed = _capsule_get_pointer(capsule, b"dltensor")
    t = _DLTensor.from_address(managed)  # DLManagedTensor starts with its DLTensor
    dt = t.dtype
    if dt.lanes != 1 or (dt.code, dt.bits) not in ((_DL_FLOAT, 16), (_DL_BFLOAT, 16), (_DL_FLOAT, 32)):
        raise TypeError(f"{name}: DLPack dtype (code {dt.code}, bits {dt.bits}, lanes {dt.lanes}) "
                        "is not float16, bfloat16 or float32")
    code = {(_DL_FLOAT, 16): _ffi.FA_DTYPE_FP16, (_DL_BFLOAT, 16): _ffi.FA_DTYPE_BF16,
            (_DL_FLOAT, 32): _ffi.FA_DTYPE_FP32}[(dt.code, dt.bits)]
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:  # compact row-major
        strides, step = [], 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= extent
        strides = tuple(strides)
    device = device_id if device_type in (_DL_CUDA, _DL_CUDA_MANAGED) else _ffi.FA_DEVICE_CPU
    return Tensor((t.data or 0) + t.byte_offset, shape, strides, code, device, _library_of(obj),
                  obj, keepalive=capsule)


def _from_cai(obj, name):
    cai = obj.__cuda_array_interface__
    typestr = cai["typestr"]
    codes = {"<f2": (_ffi.FA_DTYPE_FP16, 2), "<f4": (_ffi.FA_DTYPE_FP32, 4)}
    if typestr not in codes:
        raise TypeError(f"{name}: __cuda_array_interface__ typestr {typestr!r} is not <f2 or <f4 "
                        "(bfloat16 needs DLPack)")
    code, itemsize = codes[typestr]
    shape = tuple(cai["shape"])
    if cai.get("strides") is None:
        strides, step = [], 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= extent
    else:
        if any(s % itemsize for s in cai["strides"]):
            raise ValueError(f"{name}: strides {cai['strides']} are not whole elements")
        strides = [s // itemsize for s in cai["strides"]]
    device = getattr(getattr(obj, "device", None), "id", 0)
    return Tensor(cai["data"][0], shape, tuple(strides), code, device, _library_of(obj), obj)


def describe(obj, name, stream=None):
    """A Tensor for `obj`: a numpy array, a DLPack producer, or a CUDA array interface."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        return _from_numpy(obj, name)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, name, stream)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, name)
    raise TypeError(f"{name}: {type(obj).__name__} is not a numpy array and has neither "
                    "__dlpack__ nor __cuda_array_interface__")


def stream_handle(stream):
    """A raw cudaStream_t (int) from None, an int, or an object with __cuda_stream__ (or a
    PyTorch stream's .cuda_stream)."""
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    raise TypeError(f"stream: {type(stream).__name__} is not an int and has no __cuda_stream__")


def current_stream(obj):
    """The producer's current stream: that of a PyTorch or CuPy GPU array, the one a
    __cuda_array_interface__ names, else None (the legacy default stream)."""
    cai = getattr(obj, "__cuda_array_interface__", None) if not hasattr(obj, "__dlpack__") else None
    if cai is not None and cai.get("stream") is not None:
        # CAI v3: 1 is the legacy default stream, 2 the per-thread default, others a handle.
        return None if cai["stream"] == 1 else int(cai["stream"])
    library = _library_of(obj)
    if library == "torch" and obj.is_cuda:
        torch = sys.modules["torch"]
        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    if library == "cupy":
        cupy = sys.modules["cupy"]
        return int(cupy.cuda.get_current_stream().ptr)
    return None


def empty_like(t, shape, float32=False):
    """A new array of `shape` with t's dtype (or float32), allocated by t's own library."""
    obj = t.obj
    if t.library == "numpy":
        numpy = sys.modules["numpy"]
        return numpy.empty(shape, dtype=numpy.float32 if float32 else obj.dtype)
    if t.library == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=torch.float32 if float32 else obj.dtype, device=obj.device)
    if t.library == "cupy":
        cupy = sys.modules["cupy"]
        return cupy.empty(shape, dtype=cupy.float32 if float32 else obj.dtype)
    raise TypeError(f"cannot allocate an output for {type(obj).__name__}: pass out= (and lse "
                    "through return_lse with out given as a (o, lse) pair)")
