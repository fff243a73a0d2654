"""One exception class per fa_status value, each carrying the library's detail message."""
import warnings
from typing import Optional

from . import _ffi


class FlashAttnError(RuntimeError):
    """A libflashattn call failed. `status` is the fa_status value, `detail` the library's message
    naming the offending value."""

    status: Optional[int] = None

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        name = _ffi.lib().fa_status_string(status).decode()
        super().__init__(f"{name}: {detail}" if detail else name)


class InvalidArgumentError(FlashAttnError, ValueError):
    """FA_STATUS_INVALID_ARGUMENT: a size, stride, flag or pointer the library refuses."""

    status = 1


class BadStructSizeError(FlashAttnError, ValueError):
    """FA_STATUS_BAD_STRUCT_SIZE: a struct was not filled by its *_init() function."""

    status = 2


class UnsupportedError(FlashAttnError):
    """FA_STATUS_UNSUPPORTED: a valid problem that no kernel of this library runs (a head_dim,
    dtype or alignment the kernels do not cover)."""

    status = 3


class InvalidKernelConfigError(FlashAttnError, ValueError):
    """FA_STATUS_INVALID_KERNEL_CONFIG: a kernel config breaks a rule of the kernel template."""

    status = 4


class KernelNotAvailableError(FlashAttnError):
    """FA_STATUS_KERNEL_NOT_AVAILABLE: a valid kernel that is not compiled in, or cannot run the
    problem."""

    status = 5


class ParseError(FlashAttnError, ValueError):
    """FA_STATUS_PARSE_ERROR: a kernel name or tuning file that could not be parsed."""

    status = 6


class NoDeviceError(FlashAttnError):
    """FA_STATUS_NO_DEVICE: no CUDA device with that ordinal, or no usable driver."""

    status = 7


class ArchMismatchError(FlashAttnError):
    """FA_STATUS_ARCH_MISMATCH: the GPU is older than sm_80, or no compiled architecture runs
    on it."""

    status = 8


class CudaError(FlashAttnError):
    """FA_STATUS_CUDA_ERROR: a CUDA runtime call failed (the detail gives CUDA's error name)."""

    status = 9


class OutOfMemoryError(FlashAttnError, MemoryError):
    """FA_STATUS_OUT_OF_MEMORY: a host allocation failed."""

    status = 10


class WorkspaceTooSmallError(FlashAttnError, ValueError):
    """FA_STATUS_WORKSPACE_TOO_SMALL: the workspace is smaller than the plan needs."""

    status = 11


class WrongContextError(FlashAttnError):
    """FA_STATUS_WRONG_CONTEXT: a GPU-only operation on the CPU backend, or a stream given to it."""

    status = 12


class InternalError(FlashAttnError):
    """FA_STATUS_INTERNAL_ERROR: an internal invariant failed; please report it."""

    status = 13


class TuningFileError(FlashAttnError, OSError):
    """FA_STATUS_IO_ERROR: a tuning file could not be opened, read or written."""

    status = 14


class TuningEntriesIgnoredWarning(UserWarning):
    """fa_context_load_tuning() skipped entries that no longer fit (status 15, a warning)."""


_BY_STATUS = {cls.status: cls for cls in FlashAttnError.__subclasses__()}
_WARNINGS = {15: TuningEntriesIgnoredWarning}


def check(status: int) -> None:
    """Raises the exception class of a failing status (a warning status warns instead)."""
    if status == 0:
        return
    # The library cuts a long message at a fixed length, which may split a UTF-8 sequence of
    # the value it names (a kernel name, a tuning file's path).
    detail = (_ffi.lib().fa_last_error_detail() or b"").decode("utf-8", "replace")
    if status in _WARNINGS:
        warnings.warn(detail, _WARNINGS[status], stacklevel=3)
        return
    raise _BY_STATUS.get(status, FlashAttnError)(status, detail)
