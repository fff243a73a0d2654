"""Errors, the one-to-one ctypes layer, kernel listing and pinning, autotuning and tuning files."""
import ctypes
import doctest
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import flashattn
from flashattn import _ffi, errors

HEADER = Path(__file__).resolve().parents[3] / "include" / "flashattn.h"


def _qkv(backend, dtype, hq=4, hkv=2, sq=16, sk=16, d=64):
    rng = np.random.default_rng(0)
    return (backend.array(rng.standard_normal((1, sq, hq, d)), dtype),
            backend.array(rng.standard_normal((1, sk, hkv, d)), dtype),
            backend.array(rng.standard_normal((1, sk, hkv, d)), dtype))


def test_ffi_declares_every_header_function_once():
    declared = re.findall(r"FA_API\s+[^;(]*?\b(fa_\w+)\s*\(", HEADER.read_text())
    assert len(declared) == len(set(declared))
    assert set(declared) == set(_ffi.SIGNATURES)
    lib = _ffi.lib()
    for name, (restype, argtypes) in _ffi.SIGNATURES.items():
        fn = getattr(lib, name)
        assert fn.restype == restype and fn.argtypes == argtypes, name


def test_struct_layouts_match_the_library():
    cfg = _ffi.fa_config()
    assert _ffi.lib().fa_config_init(ctypes.byref(cfg)) == 0
    assert cfg.struct_size == ctypes.sizeof(_ffi.fa_config)
    kc = _ffi.fa_kernel_config()
    assert _ffi.lib().fa_kernel_config_init(ctypes.byref(kc)) == 0
    assert kc.struct_size == ctypes.sizeof(_ffi.fa_kernel_config)
    args = _ffi.fa_run_args()
    assert _ffi.lib().fa_run_args_init(ctypes.byref(args)) == 0
    assert args.struct_size == ctypes.sizeof(_ffi.fa_run_args)
    merge = _ffi.fa_merge_config()
    assert _ffi.lib().fa_merge_config_init(ctypes.byref(merge)) == 0
    assert merge.struct_size == ctypes.sizeof(_ffi.fa_merge_config)


def test_raw_declarations_take_addresses_as_ints():
    run = _ffi.raw("fa_plan_run")
    restype, argtypes = _ffi.SIGNATURES["fa_plan_run"]
    assert run.restype == restype and len(run.argtypes) == len(argtypes)
    for raw, declared in zip(run.argtypes, argtypes):
        assert raw == (ctypes.c_void_p if issubclass(declared, ctypes._Pointer) else declared)
    assert _ffi.lib().fa_plan_run.argtypes == argtypes  # the declared one is untouched
    # NULL plan: refused with a status, the pointer arguments accepted as plain ints.
    assert run(None, 16, 16, 16, 16, 16, None, 0, None) == 1


def test_every_status_maps_to_its_class():
    lib = _ffi.lib()
    classes = {1: flashattn.InvalidArgumentError, 2: flashattn.BadStructSizeError,
               3: flashattn.UnsupportedError, 4: flashattn.InvalidKernelConfigError,
               5: flashattn.KernelNotAvailableError, 6: flashattn.ParseError,
               7: flashattn.NoDeviceError, 8: flashattn.ArchMismatchError, 9: flashattn.CudaError,
               10: flashattn.OutOfMemoryError, 11: flashattn.WorkspaceTooSmallError,
               12: flashattn.WrongContextError, 13: flashattn.InternalError,
               14: flashattn.TuningFileError}
    for status, cls in classes.items():
        with pytest.raises(cls) as info:
            errors.check(status)
        assert info.value.status == status
        assert lib.fa_status_string(status).decode() in str(info.value)
    with pytest.warns(flashattn.TuningEntriesIgnoredWarning):
        errors.check(15)
    with pytest.raises(flashattn.FlashAttnError):
        errors.check(999)
    errors.check(0)


def test_library_errors_carry_the_detail(backend):
    dtype = backend.dtypes()[-1]
    q, k, v = _qkv(backend, dtype, hq=5, hkv=2)
    with pytest.raises(flashattn.InvalidArgumentError, match="heads_q = 5 is not a multiple of heads_kv = 2"):
        flashattn.forward(q, k, v)
    q, k, v = _qkv(backend, dtype)
    with pytest.raises(flashattn.InvalidArgumentError, match="softmax_scale"):
        flashattn.forward(q, k, v, softmax_scale=float("inf"))


def test_translation_errors(backend):
    dtype = backend.dtypes()[-1]
    q, k, v = _qkv(backend, dtype)
    with pytest.raises(ValueError, match="4 dimensions"):
        flashattn.forward(q[0], k, v)
    with pytest.raises(ValueError, match="k and v shapes differ"):
        flashattn.forward(q, k, v[:, :8])
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        flashattn.forward(q[..., ::2], k[..., ::2], v[..., ::2])
    with pytest.raises(ValueError, match="out has shape"):
        flashattn.forward(q, k, v, out=backend.empty((1, 16, 4, 32), dtype))
    other = backend.dtypes()[0] if backend.dtypes()[0] != dtype else backend.dtypes()[1]
    with pytest.raises(TypeError, match="another dtype"):
        flashattn.forward(q, backend.array(backend.numpy(k), other), v)
    with pytest.raises(TypeError, match="neither"):
        flashattn.forward([1, 2], k, v)
    if not backend.gpu:  # numpy-only cases: broadcasts, read-only outputs, byte order
        qb = np.broadcast_to(backend.numpy(q)[:1, :1, :1].astype(q.dtype), q.shape)
        with pytest.raises(ValueError, match="broadcast along its leading dimensions"):
            flashattn.forward(qb, k, v)
        out = np.empty_like(q)
        out.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            flashattn.forward(q, k, v, out=out)
        q32, k32, v32 = _qkv(backend, "float32")
        with pytest.raises(TypeError, match="byte order"):
            flashattn.forward(q32.astype(">f4"), k32, v32)


def test_cpu_and_gpu_specific_errors(backend):
    if backend.gpu:
        torch = backend.torch
        q = torch.randn(1, 16, 2, 64, device="cuda")
        with pytest.raises(flashattn.UnsupportedError, match="FP32"):
            flashattn.forward(q, q, q)
        q, k, v = _qkv(backend, "bfloat16", d=264)  # above every built head dim (256)
        with pytest.raises(flashattn.UnsupportedError, match="head_dim 264"):
            flashattn.forward(q, k, v)
    else:
        q, k, v = _qkv(backend, "float32")
        with pytest.raises(ValueError, match="GPU tensors only"):
            flashattn.forward(q, k, v, stream=1)
        with pytest.raises(flashattn.WrongContextError):
            flashattn.autotune(q, k, v)
        with pytest.raises(flashattn.WrongContextError):
            flashattn.Context(None).save_tuning("x.txt")


def test_kernel_listing_and_pinning(backend):
    names = flashattn.kernels()
    if not names:  # only a library built without CUDA (FA_CUDA=OFF) has none, and it says so
        with pytest.raises(flashattn.NoDeviceError, match="built without CUDA"):
            flashattn.Context(0)
        return
    for name in names:  # E4M3: the sm90 family's FP8 kernels (e4m3 q, k and v)
        assert name.startswith(("(FP16, ", "(BF16, ", "(E4M3, "))
    with pytest.raises(flashattn.ParseError, match="turbo"):
        flashattn.forward(*_qkv(backend, backend.dtypes()[-1]),
                          kernel="(BF16, 64, 64, 64, 4): turbo+load_0_0_0_tiles")
    if not backend.gpu:
        with pytest.raises(flashattn.WrongContextError):
            flashattn.forward(*_qkv(backend, "float32"), kernel=names[0])
        return
    q, k, v = _qkv(backend, "bfloat16", sq=300, sk=200)
    ref = flashattn.forward(q, k, v)
    pinned = [n for n in names if n.startswith("(BF16, 64, ")]
    for name in pinned:
        o = flashattn.forward(q, k, v, kernel=name)
        assert (o.float() - ref.float()).abs().max().item() < 2e-2, name
    with pytest.raises(flashattn.KernelNotAvailableError, match="not compiled"):
        flashattn.forward(q, k, v, kernel="(BF16, 64, 128, 48, 4): swizzled+load_4_4_2_tiles")


def test_autotune_and_tuning_file(backend, tmp_path):
    if not backend.gpu:
        pytest.skip("autotuning is GPU-only (the CPU case is in test_cpu_and_gpu_specific_errors)")
    q, k, v = _qkv(backend, "bfloat16", hq=8, hkv=8, sq=1024, sk=1024, d=128)
    name, ms = flashattn.autotune(q, k, v)
    assert name in flashattn.kernels() and ms > 0
    path = tmp_path / "tuning.txt"
    flashattn.save_tuning(path)
    text = path.read_text()
    assert text.startswith("libflashattn-tuning 1") and name in text
    fresh = flashattn.Context(0)
    fresh.load_tuning(path)
    assert fresh.tuned_count >= 1
    path.write_text(text + "BF16 128 0 64 64 | (BF16, 128, 128, 48, 4): swizzled+load_4_4_2_tiles\n")
    with pytest.warns(flashattn.TuningEntriesIgnoredWarning, match="1 of"):
        flashattn.Context(0).load_tuning(path)
    path.write_text("not a tuning file\n")
    with pytest.raises(flashattn.ParseError, match="not a libflashattn tuning file"):
        fresh.load_tuning(path)
    with pytest.raises(flashattn.TuningFileError):
        fresh.load_tuning(tmp_path / "missing.txt")


def test_version_and_typing_marker():
    """__version__ is the loaded library's version and the header's, and pyproject.toml either
    states the same or takes it from the package; py.typed ships beside the package (PEP 561)."""
    assert re.fullmatch(r"\d+\.\d+\.\d+", flashattn.__version__)
    assert flashattn.__version__ == flashattn.version()
    header = re.search(r'#define FA_VERSION_STRING "([^"]+)"', HEADER.read_text()).group(1)
    assert flashattn.__version__ == header
    # The source tree's pyproject.toml: the package under test may be an installed or copied one.
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    static = re.search(r'^version\s*=\s*"([^"]+)"', pyproject, re.M)
    if static:
        assert static.group(1) == flashattn.__version__
    else:
        assert re.search(r'^dynamic\s*=.*"version"', pyproject, re.M)
    assert (Path(flashattn.__file__).parent / "py.typed").is_file()


def test_public_functions_are_typed_and_documented():
    import inspect
    for name in flashattn.__all__:
        obj = getattr(flashattn, name)
        assert obj.__doc__, name
        if inspect.isfunction(obj):
            sig = inspect.signature(obj)
            assert sig.return_annotation is not inspect.Signature.empty, name
            for p in sig.parameters.values():
                assert p.annotation is not inspect.Parameter.empty, (name, p.name)
    examples = doctest.testmod(flashattn)  # the module docstring's example runs
    assert examples.attempted and not examples.failed
    for section in ("Parameters", "Returns", "Raises", "Notes"):
        assert f"\n    {section}\n    ---" in flashattn.forward.__doc__, section
