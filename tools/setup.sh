#!/usr/bin/env bash
# Installs what the README's commands need and this machine lacks, saying what and why; what is
# present is left alone, and with everything present it needs no root.
#   bash tools/setup.sh build   the library, its tests and the example (the README's first command)
#   bash tools/setup.sh test    plus what tools/run_tests.sh runs: the Rust and Python bindings,
#                               their packages, and the fuzz targets
# Debian packages come from apt (as root, or through sudo); PyPI packages from pip. The CUDA
# Toolkit (nvcc, 12 or newer) is checked, not installed: Debian 12 packages only 11.8; without it
# the build is CPU-only.
# Sourced by tools/run_tests.sh, it leaves FA_PYTHON naming the Python to test with: python3, or a
# virtual environment in build-venv/ where python3 refuses pip installs (PEP 668, e.g. Debian's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fa_setup_level="${1:-build}"
case "$fa_setup_level" in build | test) ;; *) echo "usage: $0 [build|test]" >&2; exit 2 ;; esac

fa_apt=()
# fa_need <Debian package> <why> <check...>: queues the package unless the check succeeds.
fa_need() {
  local package=$1 why=$2
  shift 2
  "$@" >/dev/null 2>&1 && return
  echo "setup: installing $package (Debian): $why"
  fa_apt+=("$package")
}
fa_has_deb() { dpkg-query -W -f='${Status}' "$1" | grep -q 'install ok installed'; }
fa_has_fuzzer() { [[ -f "$(clang -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a" ]]; }

fa_need cmake "configures the build (3.25+; Debian 12 has 3.25.1)" command -v cmake
fa_need g++ "compiles the host code (C++20)" command -v g++
fa_need python3 "generates the kernel instantiations at configure time" command -v python3
fa_need doctest-dev "the C++ tests' framework" test -f /usr/include/doctest/doctest.h
fa_need pkg-config "the install test builds a consumer from flashattn.pc" command -v pkg-config
if [[ $fa_setup_level == test ]]; then
  fa_need ninja-build "generates the default build in tools/run_tests.sh (Make holds each \
target's files until the targets it links are built, leaving one of CI's 2 cores idle)" \
    command -v ninja
  fa_need cargo "builds the Rust bindings" command -v cargo
  # The crates the Rust bindings build with, offline from Debian's registry
  # (/usr/share/cargo/registry; tools/run_tests.sh points cargo at it). bindgen brings libclang.
  fa_need librust-bindgen-dev "flashattn-sys generates its declarations with bindgen" \
    fa_has_deb librust-bindgen-dev
  fa_need librust-pkg-config-dev "flashattn-sys finds an installed library with pkg-config" \
    fa_has_deb librust-pkg-config-dev
  fa_need librust-cmake-dev "flashattn-sys builds its bundled sources with CMake" \
    fa_has_deb librust-cmake-dev
  fa_need clang "compiles the libFuzzer targets (tools/run_fuzz.sh)" command -v clang
  fa_need libclang-rt-dev "clang's libFuzzer and AddressSanitizer runtimes, for the fuzz targets" \
    fa_has_fuzzer
  # Debian's python3 leaves out ensurepip, without which venv cannot make an environment.
  fa_need python3-venv "the wheel test installs the package in a fresh virtual environment" \
    python3 -c 'import ensurepip'
  fa_need python3-pip "installs the Python test dependencies and builds the wheel" \
    python3 -m pip --version
fi

if ((${#fa_apt[@]})); then
  fa_sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "setup: root (or sudo) is needed to install: ${fa_apt[*]}" >&2
      exit 1
    fi
    fa_sudo=(sudo)
  fi
  "${fa_sudo[@]}" apt-get update -qq
  "${fa_sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${fa_apt[@]}"
fi

# The GPU kernels need nvcc from CUDA 12 or newer (C++20 device code); without one the build is
# CPU-only (FA_CUDA=OFF, detected by CMake), which is said here rather than failed.
if fa_nvcc="$(command -v nvcc || command -v /usr/local/cuda/bin/nvcc)"; then
  fa_cuda_version="$("$fa_nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
  if [[ -z $fa_cuda_version || ${fa_cuda_version%%.*} -lt 12 ]]; then
    echo "setup: $fa_nvcc is CUDA ${fa_cuda_version:-of unknown version}; the GPU kernels need" \
         "12 or newer (install it, or build the CPU backend alone with -DFA_CUDA=OFF)" >&2
    exit 1
  fi
  echo "setup: CUDA $fa_cuda_version ($fa_nvcc): the GPU kernels will be built"
else
  echo "setup: no nvcc (CUDA Toolkit 12+) found: the build will be CPU-only (FA_CUDA=OFF); install" \
       "the toolkit and put its bin/ on PATH for the GPU kernels"
fi

# The sm90_sass test (tools/check_sass.py) reads the kernels' SASS with cuobjdump and the nvdisasm
# it runs, which some packagings of the toolkit leave out (CI's: nvcc, ptxas and fatbinary only).
# NVIDIA publishes both on PyPI as wheels; unpacked into build-tools/ (not installed), they are
# named to CMake through FA_CUOBJDUMP (tools/run_tests.sh). Without them the test is not
# registered, which CMake says.
fa_cuobjdump_version=13.5.37
if [[ $fa_setup_level == test && -n ${fa_nvcc:-} ]] && ! command -v cuobjdump >/dev/null &&
   [[ ! -x $(dirname "$(readlink -f "$fa_nvcc")")/cuobjdump ]]; then
  fa_tools="$PWD/build-tools/cuobjdump-$fa_cuobjdump_version"
  if [[ ! -x $fa_tools/nvidia/cu13/bin/cuobjdump ]]; then
    echo "setup: fetching cuobjdump and nvdisasm $fa_cuobjdump_version (PyPI, NVIDIA's wheels):" \
         "the sm90_sass test reads the kernels' SASS with them and this toolkit lacks them"
    if python3 -m pip download -q --no-deps --only-binary=:all: -d "$fa_tools/wheels" \
         "nvidia-cuda-cuobjdump==$fa_cuobjdump_version" "nvidia-cuda-nvdisasm==$fa_cuobjdump_version"; then
      python3 - "$fa_tools" <<'PY'
import glob, os, sys, zipfile
for wheel in glob.glob(os.path.join(sys.argv[1], "wheels", "*.whl")):
    zipfile.ZipFile(wheel).extractall(sys.argv[1])
for tool in glob.glob(os.path.join(sys.argv[1], "nvidia", "cu13", "bin", "*")):
    os.chmod(tool, 0o755)  # zip entries keep no mode here
PY
    else
      echo "setup: could not fetch them (offline?): the sm90_sass test will not be registered"
    fi
  fi
  [[ -x $fa_tools/nvidia/cu13/bin/cuobjdump ]] && export FA_CUOBJDUMP="$fa_tools/nvidia/cu13/bin/cuobjdump"
fi

FA_PYTHON=python3
if [[ $fa_setup_level == test ]]; then
  fa_pip=()
  for module in numpy ml_dtypes pytest; do
    python3 -c "import $module" 2>/dev/null || fa_pip+=("$module")
  done
  if ((${#fa_pip[@]})); then
    echo "setup: installing ${fa_pip[*]} (PyPI): the Python bindings' tests" \
         "(arrays, bfloat16 arrays, the runner)"
    stdlib="$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"
    if [[ -f $stdlib/EXTERNALLY-MANAGED ]]; then
      echo "setup: python3 is externally managed (PEP 668): installing into build-venv/"
      [[ -x build-venv/bin/python ]] || python3 -m venv build-venv
      FA_PYTHON="$PWD/build-venv/bin/python"
      "$FA_PYTHON" -c 'import numpy, ml_dtypes, pytest' 2>/dev/null ||
        "$FA_PYTHON" -m pip install --quiet numpy ml_dtypes pytest
    else
      python3 -m pip install --quiet "${fa_pip[@]}"
    fi
  fi
fi

if ((${#fa_apt[@]})) || [[ ${fa_pip[*]-} ]]; then
  echo "setup: done"
else
  echo "setup: everything needed for '$fa_setup_level' is installed"
fi
