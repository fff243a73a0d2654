"""The same suite runs on two backends: numpy arrays (the CPU backend; always) and PyTorch CUDA
tensors (skipped where PyTorch or a GPU is missing)."""
import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # bfloat16 numpy cases are skipped without it
    ml_dtypes = None


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


class Backend:
    """Makes arrays for one backend from numpy data and reads them back."""

    def __init__(self, name):
        self.name = name
        self.torch = _torch_cuda() if name == "torch-cuda" else None
        self.gpu = name == "torch-cuda"

    def dtypes(self):
        names = ["float16"] + (["bfloat16"] if self.gpu or ml_dtypes else [])
        return names if self.gpu else ["float32"] + names

    def np_dtype(self, name):
        return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)

    def array(self, data, dtype):
        """`data` (numpy, any float) rounded to `dtype`, as this backend's array."""
        if self.gpu:
            t = self.torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32)).cuda()
            return t.to(getattr(self.torch, dtype))
        return np.ascontiguousarray(data).astype(self.np_dtype(dtype))

    def empty(self, shape, dtype):
        if self.gpu:
            return self.torch.full(shape, float("nan"), dtype=getattr(self.torch, dtype),
                                   device="cuda")
        return np.full(shape, np.nan, dtype=self.np_dtype(dtype))

    def numpy(self, arr):
        """float64 numpy copy of an array of this backend."""
        if self.gpu:
            self.torch.cuda.synchronize()
            return arr.detach().float().cpu().numpy().astype(np.float64)
        return np.asarray(arr).astype(np.float64)


@pytest.fixture(params=["numpy", "torch-cuda"])
def backend(request):
    if request.param == "torch-cuda" and _torch_cuda() is None:
        pytest.skip("no PyTorch with CUDA")
    return Backend(request.param)
