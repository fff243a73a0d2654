"""Reads pointer, shape, strides, dtype and device off numpy arrays, PyTorch tensors, DLPack
producers and `__cuda_array_interface__` objects, without importing any array library; allocates
outputs with the input's own library. Translation only: every check of the attention problem is
the C library's.

This runs on every forward() call, so each reader takes the cheapest route its producer offers:
numpy's attributes, PyTorch's C-level tensor methods (about 1 us a tensor, where torch's Python
__dlpack__ costs about 20: it looks up two streams and allocates a capsule), and one read of the
CUDA array interface per object."""
import collections
import ctypes
import functools
import sys

from . import _ffi

# DLPack (dmlc/dlpack, include/dlpack/dlpack.h).
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_FLOAT, _DL_BFLOAT, _DL_FLOAT8_E4M3FN = 2, 4, 10
_DL_CODES = {(_DL_FLOAT, 16): _ffi.FA_DTYPE_FP16, (_DL_BFLOAT, 16): _ffi.FA_DTYPE_BF16,
             (_DL_FLOAT, 32): _ffi.FA_DTYPE_FP32, (_DL_FLOAT8_E4M3FN, 8): _ffi.FA_DTYPE_E4M3}

# __cuda_array_interface__ typestr: (fa_dtype, bytes per element).
_CAI_CODES = {"<f2": (_ffi.FA_DTYPE_FP16, 2), "<f4": (_ffi.FA_DTYPE_FP32, 4)}

# CUDA's legacy default stream as DLPack and __cuda_array_interface__ v3 spell it; as a stream
# handle it is NULL (0), which is also what PyTorch reports for its default stream.
_LEGACY_STREAM = 1


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


class Tensor(collections.namedtuple("Tensor", "ptr shape strides dtype device library obj stream "
                                           "keepalive")):
    """One array as the C API sees it, in the caller's dimension order.

    ptr: address of element 0; shape; strides in elements; dtype: fa_dtype; device: CUDA ordinal
    or _ffi.FA_DEVICE_CPU; library: "numpy", "torch", "cupy" or "" (another producer); obj: the
    array; stream: the stream handle the array was exported for (0: the legacy default stream);
    keepalive: what must outlive the call (a DLPack capsule), or None.

    A tuple made by _tensor(), whose fields read in C: a class with an __init__ ran one more
    Python frame per array (four per forward() call), and in a process whose frames cost more
    (a frame-evaluation hook, as torch.compile's, or a profiler) every frame counts."""

    __slots__ = ()


# A Tensor from a tuple of its fields, in C (a partial of tuple.__new__: no Python frame).
_tensor = functools.partial(tuple.__new__, Tensor)


@functools.lru_cache(maxsize=None)  # one entry per array type
def _library_of_type(cls):
    module = cls.__module__.split(".")[0]
    return module if module in ("numpy", "torch", "cupy") else ""


def _library_of(obj):
    return _library_of_type(type(obj))


# Strides come in few distinct values per program; a cached conversion costs 0.1 us where
# computing it costs 0.6 to 1.
@functools.lru_cache(maxsize=1024)
def _packed_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.insert(0, step)
        step *= extent
    return tuple(strides)


@functools.lru_cache(maxsize=1024)
def _torch_strides(shape):
    """The strides PyTorch gives a new contiguous tensor of `shape`: packed, an extent of 0
    counting as 1 (c10's TensorImpl), so that new_empty_strided(shape, _torch_strides(shape))
    makes what new_empty(shape) makes, an empty tensor included."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.insert(0, step)
        step *= max(extent, 1)
    return tuple(strides)


@functools.lru_cache(maxsize=1024)
def _whole_elements(byte_strides, itemsize):
    """Strides in elements, or None when one is not a whole number of elements."""
    if any([s % itemsize for s in byte_strides]):
        return None
    return tuple([s // itemsize for s in byte_strides])


def _element_strides(byte_strides, itemsize, name):
    strides = _whole_elements(tuple(byte_strides), itemsize)
    if strides is None:
        raise ValueError(f"{name}: strides {tuple(byte_strides)} are not whole elements")
    return strides


# ---- numpy ----------------------------------------------------------------------------------------

# numpy dtype -> (fa_dtype, itemsize), filled on first sight: dtype.name is a Python property that
# costs 2 us, a dict lookup 0.1 us.
_numpy_codes = {}


def _numpy_code(dtype, name):
    if not dtype.isnative:
        raise TypeError(f"{name}: byte order {dtype.byteorder!r} is not the machine's")
    # "bfloat16" and "float8_e4m3fn" are ml_dtypes' types.
    code = {"float16": _ffi.FA_DTYPE_FP16, "bfloat16": _ffi.FA_DTYPE_BF16,
            "float32": _ffi.FA_DTYPE_FP32, "float8_e4m3fn": _ffi.FA_DTYPE_E4M3}.get(dtype.name)
    if code is None:
        raise TypeError(f"dtype {dtype.name} is not supported (float16, bfloat16, float32, "
                        "float8_e4m3fn)")
    _numpy_codes[dtype] = (code, dtype.itemsize)
    return _numpy_codes[dtype]


# A writable contiguous array lends its buffer to a ctypes object, whose address is the array's
# (0.5 us on the CI machine); arr.ctypes builds a helper object (1.5 us), taken for the others
# (read-only, strided or empty: from_buffer refuses them).
_addressof, _c_char = ctypes.addressof, ctypes.c_char


def _from_numpy(arr, name):
    dtype = arr.dtype
    code, itemsize = _numpy_codes.get(dtype) or _numpy_code(dtype, name)
    # The address (see _addressof) and _element_strides() inline: two Python frames less
    # per array.
    try:
        ptr = _addressof(_c_char.from_buffer(arr))
    except (TypeError, ValueError, BufferError):
        ptr = arr.ctypes.data
    strides = _whole_elements(arr.strides, itemsize)
    if strides is None:
        raise ValueError(f"{name}: strides {arr.strides} are not whole elements")
    return _tensor((ptr, arr.shape, strides, code, _ffi.FA_DEVICE_CPU, "numpy", arr, 0, None))


# ---- PyTorch --------------------------------------------------------------------------------------

class _Torch:
    """What the PyTorch reader needs from an imported torch module, looked up once."""

    def __init__(self, torch):
        self.module = torch
        self.tensor = torch.Tensor
        self.strided = torch.strided
        self.codes = {torch.float16: _ffi.FA_DTYPE_FP16, torch.bfloat16: _ffi.FA_DTYPE_BF16,
                      torch.float32: _ffi.FA_DTYPE_FP32}
        e4m3 = getattr(torch, "float8_e4m3fn", None)  # PyTorch 2.1 and later
        if e4m3 is not None:
            self.codes[e4m3] = _ffi.FA_DTYPE_E4M3
        # describe_aux's kinds (getattr: a stand-in module in the tests may lack them).
        self.aux = {kind: getattr(torch, kind, None) for kind in ("int32", "float32")}
        # The current stream's raw handle: 0.2 us, where torch.cuda.current_stream(d).cuda_stream
        # builds a Stream object (3 us). The private function is what torch's own compiler uses;
        # the public one stands in where a release lacks it.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.current_stream = raw or (lambda d: torch.cuda.current_stream(d).cuda_stream)
        # device -> an empty float32 tensor there (_float32_on).
        self.float32_on = {}


def _float32_on(reader, obj, device):
    """An empty float32 tensor on `device`, the device of PyTorch tensor obj as its Tensor
    names it, made once per device: its new_empty_strided() allocates float32 without a dtype
    argument, whose parsing costs 0.4 us of the 2.1 that new_empty_strided(..., dtype=
    torch.float32) takes on the GPU machine. It has no element, so it holds no memory (inside
    a graph capture either)."""
    template = reader.float32_on.get(device)
    if template is None:
        template = obj.new_empty((0,), dtype=reader.module.float32)
        # A subclass's (DTensor, FakeTensor) would make every later output of the device one.
        if type(obj) is reader.tensor:
            reader.float32_on[device] = template
    return template


_torch = None


def _torch_reader():
    """The _Torch of the imported torch module, or None when torch is not imported."""
    global _torch
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if _torch is None or _torch.module is not torch:
        _torch = _Torch(torch)
    return _torch


# ---- DLPack and the CUDA array interface ----------------------------------------------------------

def _from_dlpack(obj, name, stream):
    # The consumer's stream: the producer makes its pending work on obj visible to it.
    device_type, device_id = obj.__dlpack_device__()
    if device_type not in (_DL_CPU, _DL_CUDA_HOST, _DL_CUDA, _DL_CUDA_MANAGED):
        raise TypeError(f"{name}: DLPack device type {device_type} is neither CPU nor CUDA")
    if device_type in (_DL_CUDA, _DL_CUDA_MANAGED):
        if stream is None:
            stream = current_stream(obj)
        # DLPack reserves 0 for "no stream"; the legacy default stream is 1.
        capsule = obj.__dlpack__(stream=stream if stream else _LEGACY_STREAM)
    else:
        capsule = obj.__dlpack__()
    managed = _capsule_get_pointer(capsule, b"dltensor")
    t = _DLTensor.from_address(managed)  # DLManagedTensor starts with its DLTensor
    dt = t.dtype
    code = _DL_CODES.get((dt.code, dt.bits)) if dt.lanes == 1 else None
    if code is None:
        raise TypeError(f"{name}: DLPack dtype (code {dt.code}, bits {dt.bits}, lanes {dt.lanes}) "
                        "is not float16, bfloat16, float32 or float8_e4m3fn")
    ndim = t.ndim
    shape = tuple(t.shape[:ndim])
    strides = tuple(t.strides[:ndim]) if t.strides else _packed_strides(shape)
    device = device_id if device_type in (_DL_CUDA, _DL_CUDA_MANAGED) else _ffi.FA_DEVICE_CPU
    return _tensor(((t.data or 0) + t.byte_offset, shape, strides, code, device,
                    _library_of(obj), obj, stream or 0, capsule))


def _cai_stream(cai):
    # CAI v3: 1 is the legacy default stream, 2 the per-thread default, others a handle.
    stream = cai.get("stream")
    return 0 if stream is None or stream == _LEGACY_STREAM else int(stream)


def _address(cai, name):
    """The data pointer a __cuda_array_interface__ names, as a pointer value: ctypes would wrap
    (or refuse with its own ArgumentError) an int outside [0, 2^64)."""
    ptr = cai["data"][0]
    if not isinstance(ptr, int) or not 0 <= ptr < 2**64:
        raise ValueError(f"{name}: __cuda_array_interface__ data pointer {ptr!r} is not a "
                         "pointer value in [0, 2^64)")
    return ptr


def _from_cai(obj, cai, name, stream):
    typestr = cai["typestr"]
    if typestr not in _CAI_CODES:
        raise TypeError(f"{name}: __cuda_array_interface__ typestr {typestr!r} is not <f2 or <f4 "
                        "(bfloat16 needs DLPack)")
    code, itemsize = _CAI_CODES[typestr]
    shape = tuple(cai["shape"])
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides = _packed_strides(shape)
    else:
        strides = _element_strides(byte_strides, itemsize, name)
    device = getattr(getattr(obj, "device", None), "id", 0)
    return _tensor((_address(cai, name), shape, strides, code, device, _library_of(obj), obj,
                    _cai_stream(cai) if stream is None else stream, None))


def describe(obj, name, stream=None, known=None):
    """A Tensor for `obj`: a numpy array, a PyTorch tensor, a DLPack producer, or a CUDA array
    interface. `stream` is the handle of the stream the call runs on, or None for the producer's
    current stream (then the Tensor's `stream` says which that is). `known` is (device, current
    stream) of a PyTorch tensor described before in the same call on the same thread (the
    current stream is per device and thread), or None: k, v and out skip reading it again."""
    # A tensor of the PyTorch module read before is recognised first, by its type alone: the
    # numpy test and the sys.modules look-up it skips cost 0.1 us a tensor, four a call.
    reader = _torch
    if reader is None or type(obj) is not reader.tensor:
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):
            return _from_numpy(obj, name)
        reader = _torch_reader()
        if reader is not None and type(obj) is not reader.tensor:
            reader = None
    if reader is not None:
        # A CUDA tensor read through its attributes, here rather than in a function of its own
        # (a Python frame per array, three or four a call, is what a process with a frame hook
        # multiplies). DLPack takes the others, where only __dlpack__ gives the right answer or
        # error: another device type or dtype, a tensor that requires grad or has the negative
        # bit set (DLPack refuses or resolves those), a sparse or nested layout, or a stream
        # other than the tensor's current one (DLPack makes that stream wait for it).
        code = reader.codes.get(obj.dtype)
        if not (code is None or not obj.is_cuda or obj.requires_grad
                or obj.layout is not reader.strided or obj.is_nested or obj.is_neg()):
            device = obj.get_device()
            current = known[1] if known is not None and known[0] == device else \
                reader.current_stream(device)
            if stream is None or (0 if stream == _LEGACY_STREAM else stream) == current:
                return _tensor((obj.data_ptr(), obj.shape, obj.stride(), code, device, "torch",
                                obj, current, None))
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, name, stream)
    # Often a property that builds a new dict (1.3 us, as long as hasattr() takes): read it once.
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(obj, cai, name, stream)
    raise TypeError(f"{name}: {type(obj).__name__} is not a numpy array and has neither "
                    "__dlpack__ nor __cuda_array_interface__")


def stream_handle(stream):
    """A raw cudaStream_t (int) from None, an int, or an object with __cuda_stream__ (or a
    PyTorch stream's .cuda_stream)."""
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        handle = stream
    elif hasattr(stream, "__cuda_stream__"):
        handle = int(stream.__cuda_stream__()[1])
    elif hasattr(stream, "cuda_stream"):
        handle = int(stream.cuda_stream)
    else:
        raise TypeError(f"stream: {type(stream).__name__} is not an int and has no "
                        "__cuda_stream__")
    # A cudaStream_t is a pointer: ctypes would wrap a value outside [0, 2^64).
    if not 0 <= handle < 2**64:
        raise ValueError(f"stream = {handle} is not a pointer value in [0, 2^64)")
    return handle


def current_stream(obj):
    """The producer's current stream: that of a PyTorch or CuPy GPU array, the one a
    __cuda_array_interface__ names, else 0 (the legacy default stream)."""
    if not hasattr(obj, "__dlpack__"):
        cai = getattr(obj, "__cuda_array_interface__", None)
        return 0 if cai is None else _cai_stream(cai)
    library = _library_of(obj)
    if library == "torch" and obj.is_cuda:
        return int(_torch_reader().current_stream(obj.get_device()))
    if library == "cupy":
        cupy = sys.modules["cupy"]
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def empty_like(t, shape, float32=False):
    """A new array of `shape` with t's dtype (or float32), allocated by t's own library."""
    obj = t.obj
    if t.library == "numpy":
        numpy = sys.modules["numpy"]
        return numpy.empty(shape, dtype=numpy.float32 if float32 else obj.dtype)
    if t.library == "torch":
        # new_empty keeps the device and dtype without parsing them again (1 us less than
        # torch.empty with keywords).
        return obj.new_empty(shape, dtype=_torch_reader().module.float32) if float32 \
            else obj.new_empty(shape)
    if t.library == "cupy":
        cupy = sys.modules["cupy"]
        with obj.device:  # cupy.empty allocates on the current device, which may not be t's
            return cupy.empty(shape, dtype=cupy.float32 if float32 else obj.dtype)
    raise TypeError(f"cannot allocate an output for {type(obj).__name__}: pass out= (and lse "
                    "through return_lse with out given as a (o, lse) pair)")


def describe_new(obj, t, name, stream):
    """describe(obj, name, stream) of an array that empty_like(t, ...) has just allocated. A
    PyTorch tensor read through its attributes has the current stream, t's device and a dense
    layout by construction, so only its address, shape and strides are read (0.2 us, not 1)."""
    if t.library == "torch" and t.keepalive is None:
        code = _torch.codes[obj.dtype]
        return _tensor((obj.data_ptr(), obj.shape, obj.stride(), code, t.device, "torch", obj,
                        t.stream, None))
    if t.library == "numpy":
        return _from_numpy(obj, name)
    return describe(obj, name, stream)


def new_output(t, shape, name, stream, float32=False):
    """(array, Tensor): empty_like(t, shape, float32) described as describe_new() does, for the
    outputs a call allocates: one Python frame for PyTorch (two before), two for numpy with
    _from_numpy (three)."""
    obj = t.obj
    if t.library == "torch" and t.keepalive is None:
        # new_empty_strided with PyTorch's own strides (a cached tuple) takes 1.7 us on the GPU
        # machine where new_empty takes 2.35 (0.8 and 1.1 on the CI machine's CPU), and the new
        # tensor's shape, strides and dtype are then known rather than read (0.2 us more).
        strides = _torch_strides(shape)
        if float32:
            reader = _torch if _torch is not None and type(obj) is _torch.tensor else \
                _torch_reader()
            arr = _float32_on(reader, obj, t.device).new_empty_strided(shape, strides)
            code = _ffi.FA_DTYPE_FP32
        else:
            arr, code = obj.new_empty_strided(shape, strides), t.dtype
        return arr, _tensor((arr.data_ptr(), shape, strides, code, t.device, "torch", arr,
                             t.stream, None))
    if t.library == "numpy":
        numpy = sys.modules["numpy"]
        arr = numpy.empty(shape, dtype=numpy.float32 if float32 else obj.dtype)
        return arr, _from_numpy(arr, name)
    arr = empty_like(t, shape, float32)
    return arr, describe(arr, name, stream)


def empty_float32(t, shape, name, stream):
    """(array, address) of a new dense float32 array of `shape` allocated by t's library on t's
    device (split-KV scratch, merge_states' lse): only its address is read, in this frame for
    PyTorch and numpy (describe_aux() of it took 0.8 us and a frame more)."""
    obj = t.obj
    if t.library == "torch":
        reader = _torch if _torch is not None and type(obj) is _torch.tensor else _torch_reader()
        # new_empty_strided: 0.6 us less than new_empty on the GPU machine (see new_output).
        arr = _float32_on(reader, obj, t.device).new_empty_strided(shape, _torch_strides(shape))
        return arr, arr.data_ptr()
    if t.library == "numpy":
        numpy = sys.modules["numpy"]
        arr = numpy.empty(shape, dtype=numpy.float32)
        try:
            return arr, _addressof(_c_char.from_buffer(arr))
        except ValueError:  # no element: from_buffer refuses an empty buffer
            return arr, arr.ctypes.data
    arr = empty_like(t, shape, float32=True)
    return arr, describe_aux(arr, name, "float32", stream)[0]


def new_strided_output(t, name, stream):
    """(array, Tensor): empty_strided_like(t) described as describe_new() does: one Python
    frame for a PyTorch tensor (two before), two for a C-contiguous numpy array (four)."""
    obj = t.obj
    if t.library == "torch" and t.keepalive is None:
        # The new tensor has the shape and strides asked for: t's own objects rather than
        # copies or reads of them (0.3 us on the GPU machine).
        arr = obj.new_empty_strided(t.shape, t.strides)
        return arr, _tensor((arr.data_ptr(), t.shape, t.strides, t.dtype, t.device, "torch", arr,
                             t.stream, None))
    if t.library == "numpy" and obj.flags.c_contiguous:
        arr = sys.modules["numpy"].empty(t.shape, dtype=obj.dtype)
        return arr, _from_numpy(arr, name)
    arr = empty_strided_like(t)
    if arr is None:
        arr = empty_like(t, t.shape)
    return arr, describe_new(arr, t, name, stream)


def empty_strided_like(t):
    """A new array with t's shape, dtype and strides, dense or not (a view with o_a's gaps into
    a buffer of its extent: fa_merge_config has one set of strides for o_a, o_b and o); for
    negative strides or no element, one in t's dimension order. None for other producers."""
    obj = t.obj
    if t.library == "torch":
        return obj.new_empty_strided(tuple(t.shape), tuple(t.strides))
    if t.library not in ("numpy", "cupy"):
        return None
    module = sys.modules[t.library]
    if obj.flags.c_contiguous:  # the common case, without as_strided's 10 us
        return empty_like(t, t.shape)
    if 0 in tuple(t.shape) or any(s < 0 for s in t.strides):
        return module.empty_like(obj)
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.strides))
    byte_strides = tuple(s * obj.itemsize for s in t.strides)
    if t.library == "numpy":
        base = module.empty(extent, dtype=obj.dtype)
        return module.lib.stride_tricks.as_strided(base, tuple(t.shape), byte_strides)
    with obj.device:  # cupy.empty allocates on the current device, which may not be t's
        base = module.empty(extent, dtype=obj.dtype)
        return module.lib.stride_tricks.as_strided(base, tuple(t.shape), byte_strides)


# ---- Index tensors and per-head parameters --------------------------------------------------------

# kind -> (CAI typestr, DLPack (code, bits))
_AUX = {"int32": ("<i4", (0, 32)), "float32": ("<f4", (_DL_FLOAT, 32))}

# kind -> numpy's dtype object, filled on first sight: numpy.dtype("int32") parses its string
# (0.2 us a call on the CI machine), an identity test of the array's dtype costs 0.03.
_numpy_aux = {}


def describe_aux(obj, name, kind, stream=None):
    """(pointer, shape, device, keepalive) of a contiguous int32 or float32 array (cu_seqlens,
    cache lengths, block tables, ALiBi slopes, sinks): numpy, PyTorch, DLPack or
    __cuda_array_interface__. shape is a tuple (torch.Size for a PyTorch tensor). keepalive (a
    DLPack capsule, else None) must be held until the library is done with the pointer: a
    producer may own the memory through the capsule alone.

    Runs for each index array of every forward_kvcache, forward_varlen and merge_states call,
    so it reads as describe() does: a PyTorch tensor first by its type, numpy's contiguity and
    address in one call (0.8 us on the CI machine, where the numpy branch took 1.05)."""
    reader = _torch
    if reader is None or type(obj) is not reader.tensor:
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):
            dtype = obj.dtype
            if dtype is not _numpy_aux.get(kind):
                # dtype.name costs 6 us: only for a dtype that is not the native one (yet).
                if dtype.name != kind:
                    raise TypeError(f"{name} must be {kind}, got {dtype.name}")
                # '>f4' is named float32 too: the library would read its bytes swapped.
                if not dtype.isnative:
                    raise TypeError(f"{name}: byte order {dtype.byteorder!r} is not the machine's")
                _numpy_aux[kind] = numpy.dtype(kind)
            # A writable C-contiguous array lends its buffer (from_buffer refuses any other):
            # contiguity and address in one call, where flags.c_contiguous builds an object.
            try:
                return _addressof(_c_char.from_buffer(obj)), obj.shape, _ffi.FA_DEVICE_CPU, None
            except (TypeError, ValueError, BufferError):
                if not obj.flags.c_contiguous:
                    raise ValueError(f"{name} must be contiguous") from None
                return obj.ctypes.data, obj.shape, _ffi.FA_DEVICE_CPU, None
        reader = _torch_reader()
        if reader is not None and type(obj) is not reader.tensor:
            reader = None
    if reader is not None:
        if obj.dtype is not reader.aux[kind]:
            raise TypeError(f"{name} must be {kind}, got {obj.dtype}")
        if not obj.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
        return (obj.data_ptr(), obj.shape, obj.get_device() if obj.is_cuda else _ffi.FA_DEVICE_CPU,
                None)
    typestr, dl_code = _AUX[kind]
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        device_type, device_id = obj.__dlpack_device__()
        cuda = device_type in (_DL_CUDA, _DL_CUDA_MANAGED)
        capsule = obj.__dlpack__(stream=stream or _LEGACY_STREAM) if cuda else obj.__dlpack__()
        t = _DLTensor.from_address(_capsule_get_pointer(capsule, b"dltensor"))
        if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (*dl_code, 1):
            raise TypeError(f"{name} must be {kind}")
        shape = tuple(t.shape[:t.ndim])
        if t.strides and tuple(t.strides[:t.ndim]) != _packed_strides(shape):
            raise ValueError(f"{name} must be contiguous")
        return ((t.data or 0) + t.byte_offset, shape, device_id if cuda else _ffi.FA_DEVICE_CPU,
                capsule)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        if cai["typestr"] != typestr:
            raise TypeError(f"{name} must be {kind} ({typestr}), got {cai['typestr']!r}")
        shape = tuple(cai["shape"])
        if cai.get("strides") is not None and tuple(cai["strides"]) != tuple(
                s * 4 for s in _packed_strides(shape)):
            raise ValueError(f"{name} must be contiguous")
        return _address(cai, name), shape, getattr(getattr(obj, "device", None), "id", 0), None
    raise TypeError(f"{name}: {type(obj).__name__} is not an array this package reads")
