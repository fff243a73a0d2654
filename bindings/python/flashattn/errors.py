"""One exception class per fa_status value, each carrying the library's detail message."""
import warnings

from . import _ffi


class FlashAttnError(RuntimeError):
    """A libflashattn call failed. `status` is the fa_status value, `detail` the library's message
    naming the offending value."""

    status = None

    def __init__(self, status, detail):
        self.status = status
        self.detail = detail
        name = _ffi.lib().fa_status_string(status).decode()
        super().__init__(f"{name}: {detail}" if detail else name)


class InvalidArgumentError(FlashAttnError, ValueError):
    status = 1


class BadStructSizeError(FlashAttnError, ValueError):
    status = 2


class UnsupportedError(FlashAttnError):
    status = 3


class InvalidKernelConfigError(FlashAttnError, ValueError):
    status = 4


class KernelNotAvailableError(FlashAttnError):
    status = 5


class ParseError(FlashAttnError, ValueError):
    status = 6


class NoDeviceError(FlashAttnError):
    status = 7


class ArchMismatchError(FlashAttnError):
    status = 8


class CudaError(FlashAttnError):
    status = 9


class OutOfMemoryError(FlashAttnError, MemoryError):
    status = 10


class WorkspaceTooSmallError(FlashAttnError, ValueError):
    status = 11


class WrongContextError(FlashAttnError):
    status = 12


class InternalError(FlashAttnError):
    status = 13


class TuningFileError(FlashAttnError, OSError):
    status = 14


class TuningEntriesIgnoredWarning(UserWarning):
    """fa_context_load_tuning() skipped entries that no longer fit (status 15, a warning)."""


_BY_STATUS = {cls.status: cls for cls in FlashAttnError.__subclasses__()}
_WARNINGS = {15: TuningEntriesIgnoredWarning}


def check(status):
    """Raises the exception class of a failing status (a warning status warns instead)."""
    if status == 0:
        return
    detail = _ffi.lib().fa_last_error_detail().decode()
    if status in _WARNINGS:
        warnings.warn(detail, _WARNINGS[status], stacklevel=3)
        return
    raise _BY_STATUS.get(status, FlashAttnError)(status, detail)
