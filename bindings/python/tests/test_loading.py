"""Library loading: a FLASHATTN_LIBRARY that does not load fails the import, naming the path,
instead of falling back to another library."""
import os
import subprocess
import sys
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
