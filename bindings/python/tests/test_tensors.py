"""The array readers of flashattn._tensors. PyTorch tensors are read through their attributes
except where only __dlpack__ gives the right stream order or error; a stand-in torch module
checks which route each case takes, and the streams, on machines without PyTorch or a GPU (the
torch-cuda backend of the other suites runs the real thing)."""
import sys
import types

import numpy as np
import pytest

from flashattn import _ffi, _tensors

CURRENT = {0: 0xC0DE, 1: 0}  # device -> current stream handle; device 1 is on its default stream


class _FakeTorch(types.ModuleType):
    def __init__(self):
        super().__init__("torch")
        self.float16, self.bfloat16, self.float32, self.float64 = (object() for _ in range(4))
        self.strided, self.sparse_coo = object(), object()
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: CURRENT[d])
        torch = self

        class Tensor:
            def __init__(self, shape=(1, 16, 2, 64), device=0, dtype=None, requires_grad=False,
                         layout=None, neg=False):
                self.shape, self.device_index = shape, device
                self.dtype = torch.bfloat16 if dtype is None else dtype
                self.requires_grad, self.neg = requires_grad, neg
                self.layout = torch.strided if layout is None else layout
                self.is_cuda, self.is_nested = device >= 0, False
                self.backing = np.zeros(shape, np.float16)
                self.dlpack_streams = []

            def is_neg(self):
                return self.neg

            def get_device(self):
                return self.device_index

            def data_ptr(self):
                return self.backing.ctypes.data

            def stride(self):
                return tuple(s // 2 for s in self.backing.strides)

            def new_empty(self, shape, dtype=None):
                return Tensor(shape, self.device_index, dtype or self.dtype)

            def new_empty_strided(self, shape, strides, dtype=None):
                assert strides == _tensors._torch_strides(tuple(shape))  # all the fake makes
                return Tensor(shape, self.device_index, dtype or self.dtype)

            def __dlpack_device__(self):
                return (_tensors._DL_CUDA, self.device_index)

            def __dlpack__(self, stream=None):
                if self.requires_grad:
                    raise BufferError("Can't export tensors that require gradient")
                self.dlpack_streams.append(stream)
                return self.backing.__dlpack__()

        Tensor.__module__ = "torch"
        self.Tensor = Tensor


@pytest.fixture
def torch(monkeypatch):
    fake = _FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


def test_torch_tensors_are_read_without_dlpack(torch):
    t = torch.Tensor()
    d = _tensors.describe(t, "q")
    assert (d.ptr, tuple(d.shape), d.strides) == (t.data_ptr(), (1, 16, 2, 64), (2048, 128, 64, 1))
    assert (d.dtype, d.device, d.library, d.stream) == (_ffi.FA_DTYPE_BF16, 0, "torch", 0xC0DE)
    # The stream the call runs on is the tensor's current one, however it is spelt.
    assert _tensors.describe(t, "k", 0xC0DE).ptr == t.data_ptr()
    assert _tensors.describe(torch.Tensor(device=1), "k", 1).stream == 0  # 1: legacy default
    assert t.dlpack_streams == []
    assert _tensors.current_stream(t) == 0xC0DE
    assert _tensors.describe(_tensors.empty_like(d, (2, 3, 1), float32=True), "lse").dtype == \
        _ffi.FA_DTYPE_FP32


def test_another_stream_goes_through_dlpack(torch):
    """DLPack makes the consumer's stream wait for the tensor's current stream; the attribute
    route cannot, so another stream takes DLPack's."""
    t = torch.Tensor()
    d = _tensors.describe(t, "k", 0x5EED)
    assert t.dlpack_streams == [0x5EED] and d.stream == 0x5EED and d.ptr == t.data_ptr()
    d = _tensors.describe(t, "k", 0)  # the legacy default stream, DLPack's 1
    assert t.dlpack_streams[-1] == 1


@pytest.mark.parametrize("case", ["requires_grad", "neg", "sparse", "float64", "cpu"])
def test_tensors_dlpack_must_judge_take_its_route(torch, case):
    kwargs = {"requires_grad": {"requires_grad": True}, "neg": {"neg": True},
              "sparse": {"layout": torch.sparse_coo}, "float64": {"dtype": torch.float64},
              "cpu": {"device": -1}}[case]
    t = torch.Tensor(**kwargs)
    if case == "requires_grad":
        with pytest.raises(BufferError, match="require gradient"):
            _tensors.describe(t, "q")
        return
    if case == "cpu":
        t.__dlpack_device__ = lambda: (_tensors._DL_CPU, 0)
    _tensors.describe(t, "q")
    assert len(t.dlpack_streams) == 1


def test_cuda_array_interface_is_read_once():
    class CAI:
        reads = 0

        @property
        def __cuda_array_interface__(self):
            CAI.reads += 1
            return {"shape": (1, 4, 2, 8), "typestr": "<f2", "data": (4096, False),
                    "strides": (256, 32, 16, 2), "version": 3, "stream": 0x5EED}

    d = _tensors.describe(CAI(), "q")
    assert CAI.reads == 1
    assert (d.ptr, d.shape, d.strides, d.dtype, d.stream) == (
        4096, (1, 4, 2, 8), (128, 16, 8, 1), _ffi.FA_DTYPE_FP16, 0x5EED)
    assert _tensors.describe(CAI(), "k", 7).stream == 7


def test_numpy_strides_in_elements():
    a = np.zeros((2, 3, 4, 8), np.float32)[:, ::2]
    d = _tensors.describe(a, "q")
    assert d.strides == (96, 64, 8, 1) and d.ptr == a.ctypes.data and d.stream == 0
    with pytest.raises(TypeError, match="byte order"):
        _tensors.describe(np.zeros((1, 1, 1, 4), ">f4"), "q")
    odd = np.lib.stride_tricks.as_strided(np.zeros(64, np.float32), (1, 1, 2, 4), (4, 4, 6, 4))
    with pytest.raises(ValueError, match="not whole elements"):
        _tensors.describe(odd, "q")


def test_a_known_current_stream_is_not_read_again(torch, monkeypatch):
    """k, v and out of a call reuse q's (device, current stream); another device reads its own."""
    reads = []
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream",
                        lambda d: reads.append(d) or CURRENT[d])
    q = _tensors.describe(torch.Tensor(), "q")
    assert reads == [0]
    k = _tensors.describe(torch.Tensor(), "k", q.stream, known=(q.device, q.stream))
    assert reads == [0] and k.stream == 0xC0DE
    other = _tensors.describe(torch.Tensor(device=1), "k", 0, known=(q.device, q.stream))
    assert reads == [0, 1] and other.stream == 0


def test_new_outputs_are_described_as_describe_does(torch):
    """describe_new() and new_output() read a just-allocated PyTorch output through three
    attributes; what they return is what describe() returns, for out (q's dtype) and lse
    (float32)."""
    q = _tensors.describe(torch.Tensor(), "q")
    for shape, float32 in (((1, 16, 2, 64), False), ((1, 2, 16), True)):
        new = _tensors.empty_like(q, shape, float32=float32)
        fast = _tensors.describe_new(new, q, "out", q.stream)
        assert fast == _tensors.describe(new, "out", q.stream)
        assert fast.dtype == (_ffi.FA_DTYPE_FP32 if float32 else _ffi.FA_DTYPE_BF16)
        new, fast = _tensors.new_output(q, shape, "out", q.stream, float32)
        assert fast == _tensors.describe(new, "out", q.stream) and tuple(fast.shape) == shape
        assert fast.dtype == (_ffi.FA_DTYPE_FP32 if float32 else _ffi.FA_DTYPE_BF16)
