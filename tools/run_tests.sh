#!/usr/bin/env bash
# Builds and runs every test, as the README says:
#   1. the default build (the measured kernel set, sm_80 + sm_90) and all its tests
#      (host tests; GPU tests, which report "skipped" without a GPU; header and export checks);
#   2. the Rust bindings (cargo test, the CPU example) and the Python bindings (pytest on the
#      installed package, the example notebook included), against that build;
#   3. the host tests again under AddressSanitizer + UndefinedBehaviorSanitizer;
#   4. the concurrent-use test under ThreadSanitizer.
# Needs, besides the C++ toolchain: cargo (with libclang, for bindgen), Python 3 with pip, numpy,
# ml_dtypes and pytest.
# The sanitizer builds compile a reduced kernel set (the 7 bf16 progression kernels, sm_80 only):
# they test host code, and every host test still runs. Extra CMake arguments for all three builds
# can be given in FA_TEST_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${FA_JOBS:-$(nproc)}"
extra=(${FA_TEST_CMAKE_ARGS:-})
reduced=(-DFA_KERNEL_SET=progression -DFA_DTYPES=bf16 -DFA_HEAD_DIMS=128 -DFA_CUDA_ARCHS=80
         -DFA_BUILD_EXAMPLES=OFF -DFA_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)

banner() { printf '\n==== %s ====\n' "$*"; }

banner "default build: all tests"
cmake -S . -B build "${extra[@]}"
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure

banner "Rust bindings: cargo test (flashattn-sys, flashattn), the CPU example"
export FLASHATTN_LIB_DIR="$PWD/build" FLASHATTN_INCLUDE_DIR="$PWD/include"
cargo test --manifest-path bindings/rust/Cargo.toml
cargo run --manifest-path bindings/rust/Cargo.toml --example cpu_forward

banner "Python bindings: pytest (installed package, notebook included)"
rm -rf build/python
python3 -m pip install --quiet --no-deps --target build/python bindings/python
FLASHATTN_LIBRARY="$PWD/build/libflashattn.so.0" PYTHONPATH="$PWD/build/python" \
  python3 -m pytest -q -p no:cacheprovider bindings/python/tests

banner "host tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DFA_SANITIZE=address,undefined "${reduced[@]}" "${extra[@]}"
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -L 'api|choice|core|cpu|concurrency'

banner "concurrent use under ThreadSanitizer"
cmake -S . -B build-tsan -DFA_SANITIZE=thread "${reduced[@]}" "${extra[@]}"
cmake --build build-tsan -j "$jobs"
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -L concurrency

banner "all tests passed"
