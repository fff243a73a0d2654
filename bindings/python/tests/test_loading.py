"""Library loading: a FLASHATTN_LIBRARY that does not load fails the import, naming the path,
instead of falling back to another library."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("bad", ["/nonexistent/libflashattn.so.0", __file__])
def test_flashattn_library_that_does_not_load_is_an_import_error(bad):
    env = dict(os.environ, FLASHATTN_LIBRARY=bad, PYTHONPATH=str(PACKAGE_ROOT))
    run = subprocess.run([sys.executable, "-c", "import flashattn"], env=env,
                         capture_output=True, text=True)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: FLASHATTN_LIBRARY=" + bad), run.stderr


def test_cpu_only_library_warns_once_where_a_gpu_is_present(monkeypatch):
    # A fresh load of the same library, on a machine made to look as if it had an NVIDIA GPU:
    # a library without GPU kernels (the CPU-only build) warns that the GPU cannot be used; a
    # library with kernels does not. CI runs this suite against both builds.
    from flashattn import _ffi

    loaded = _ffi.lib()
    monkeypatch.setattr(_ffi, "_nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(_ffi, "_lib", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _ffi.lib()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if loaded.fa_kernel_count():
        assert messages == []
    else:
        assert len(messages) == 1 and "built without CUDA" in messages[0], messages
