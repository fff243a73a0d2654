#!/usr/bin/env bash
# Builds and runs every test, as the README says, after installing what the machine lacks
# (tools/setup.sh test: Debian's doctest, cargo and Rust crates, clang's fuzzing runtimes; numpy,
# ml_dtypes and pytest from PyPI; each named with its reason as it is installed):
#   1. the default build (the measured kernel set, sm_80 + sm_90; Ninja) and all its tests
#      (host tests; GPU tests, which report "skipped" without a GPU; header and export checks);
#   2. the Rust bindings (cargo test, the CPU example, cargo doc with warnings as errors) and the
#      Python bindings (pytest on the package's sources, the example notebook included), against
#      that build;
#   3. the packages that carry the library, each used away from any build tree or variable:
#      the wheel (pip wheel) installed in a fresh virtual environment, and a Rust project outside
#      the repository depending on bindings/rust/flashattn of a copy of the sources without
#      build/, so that flashattn-sys builds its bundled sources (CPU-only, nvcc off PATH, and
#      says so); both run a CPU forward against a reference with no FLASHATTN_* variable set;
#      and flashattn-sys with a broken flashattn.pc on PKG_CONFIG_PATH (it must say so and go on);
#   3b. the CPU-only build (FA_CUDA=OFF) with nvcc off PATH: host tests, the C++ wrapper's
#      tests, install, no CUDA dependency or symbol in the library, the Python tests against it;
#   4. the host tests again under AddressSanitizer + UndefinedBehaviorSanitizer, then the Python
#      suite (the runtime preloaded) and the Rust suite (debug: overflow checks on) against that
#      library;
#   5. the concurrent-use test under ThreadSanitizer;
#   6. the libFuzzer targets and the leak check (tools/run_fuzz.sh), where that script exists.
# The sanitizer builds and the packages compile a reduced kernel set (the 7 bf16 progression
# kernels, sm_80 only): they test host code and packaging, and every host test still runs.
# Extra CMake arguments for the default and sanitizer builds can be given in FA_TEST_CMAKE_ARGS;
# FA_JOBS sets the build parallelism (default: every core).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${FA_JOBS:-$(nproc)}"
extra=(${FA_TEST_CMAKE_ARGS:-})
reduced_defs=(FA_KERNEL_SET=progression FA_DTYPES=bf16 FA_HEAD_DIMS=128 FA_CUDA_ARCHS=80)
reduced=("${reduced_defs[@]/#/-D}" -DFA_BUILD_EXAMPLES=OFF -DFA_BUILD_BENCH=OFF
         -DCMAKE_BUILD_TYPE=RelWithDebInfo)

step_start=$SECONDS
step_name=""
banner() {
  [[ -n $step_name ]] && printf '(%s: %d s)\n' "$step_name" $((SECONDS - step_start))
  step_name="$*" step_start=$SECONDS
  printf '\n==== %s ====\n' "$*"
}

banner "set-up: tools/setup.sh test"
source tools/setup.sh test
py="$FA_PYTHON"

work="$(mktemp -d)"  # this run's scratch: cargo's home, the package tests' environments
trap 'rm -rf "$work"' EXIT
# PATH without nvcc, for the CPU-only steps: the toolkit's own directories left out, and any other
# directory holding an nvcc (images put wrappers around the toolkit in /usr/local/bin) replaced by
# links to everything else in it.
nocuda_path=""
mirrors=0
while IFS= read -r dir; do
  [[ -z $dir || ${dir,,} == *cuda* ]] && continue
  if [[ -e $dir/nvcc ]]; then
    mirrors=$((mirrors + 1))
    mirror="$work/path-without-nvcc-$mirrors"
    mkdir -p "$mirror"
    for f in "$dir"/*; do [[ ${f##*/} == nvcc ]] || ln -s "$f" "$mirror/"; done
    dir=$mirror
  fi
  nocuda_path+="${nocuda_path:+:}$dir"
done < <(tr ':' '\n' <<<"$PATH")

# Cargo builds from Debian's packaged crates instead of crates.io (which CI cannot reach): the
# README's tools/cargo-debian.toml, as the config of a CARGO_HOME of this run only.
if [[ -d /usr/share/cargo/registry ]]; then
  export CARGO_HOME="$work/cargo-home"
  mkdir -p "$CARGO_HOME"
  cp tools/cargo-debian.toml "$CARGO_HOME/config.toml"
fi

banner "default build: all tests"
# FA_CUOBJDUMP (tools/setup.sh, where the toolkit lacks cuobjdump) registers the sm90_sass test.
# nvcc --time logs each compile phase (outputs unchanged): the build's time is issue 18's bar (10
# minutes on CI's 2 cores), and tools/build_times.py says where it goes. Ninja (tools/setup.sh)
# starts a file whenever a core is free, where Make starts a target's files only once the targets
# it links are built: at 819f06a, back to back on one 2-core machine, 767 s against 810 s.
CUDAFLAGS="${CUDAFLAGS:-} --time $work/nvcc-time.csv" \
  cmake -G Ninja -S . -B build "${extra[@]}" ${FA_CUOBJDUMP:+"-DFA_CUOBJDUMP=$FA_CUOBJDUMP"}
build_start=$SECONDS
cmake --build build -j "$jobs" 2>&1 | tee "$work/build.log"
echo "default build: $((SECONDS - build_start)) s on $jobs jobs"
"$py" tools/build_times.py "$work/nvcc-time.csv" --top 5
# A default build prints no ptxas spill report (FA_WARN_SPILLS is for tools/device_check.sh).
if grep 'bytes spill' "$work/build.log"; then echo "ptxas spill warnings in the default build" >&2; exit 1; fi
ctest --test-dir build --output-on-failure

banner "Rust bindings: cargo test (flashattn-sys, flashattn), the CPU example, cargo doc"
(
  export FLASHATTN_LIB_DIR="$PWD/build" FLASHATTN_INCLUDE_DIR="$PWD/include"
  cargo test --manifest-path bindings/rust/Cargo.toml
  cargo run --manifest-path bindings/rust/Cargo.toml --example cpu_forward
  RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --manifest-path bindings/rust/Cargo.toml
)

banner "Python bindings: pytest (the package's sources, notebook included)"
FLASHATTN_LIBRARY="$PWD/build/libflashattn.so.0" PYTHONPATH="$PWD/bindings/python" \
  "$py" -m pytest -q -p no:cacheprovider bindings/python/tests

banner "packages: the wheel in a fresh virtual environment"
rm -rf build/wheel
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "$py" -m pip wheel --no-deps --wheel-dir build/wheel \
  "${reduced_defs[@]/#/--config-settings=cmake.define.}" bindings/python
# The wheel declares the licence (SPDX) and carries its texts.
"$py" - build/wheel/flashattn-*.whl <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
metadata = zipfile.ZipFile(sys.argv[1]).read(next(n for n in names if n.endswith("/METADATA")))
assert b"\nLicense-Expression: MIT OR Apache-2.0\n" in metadata, "no SPDX licence in METADATA"
assert {"flashattn/LICENSE-MIT", "flashattn/LICENSE-APACHE"} <= set(names), names
PY
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet build/wheel/flashattn-*.whl
# Run from outside the repository, with nothing pointing at a library: the package's own.
(cd "$work" && env -u FLASHATTN_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH venv/bin/python - <<'PY'
from pathlib import Path

import numpy as np
import flashattn
from flashattn import _ffi

rng = np.random.default_rng(0)
b, sq, sk, hq, hkv, d = 2, 37, 53, 4, 2, 16
q = rng.standard_normal((b, sq, hq, d), dtype=np.float32)
k = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
v = rng.standard_normal((b, sk, hkv, d), dtype=np.float32)
o = flashattn.forward(q, k, v, causal=True)

kk, vv = (np.repeat(x.astype(np.float64), hq // hkv, axis=2) for x in (k, v))
s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), kk) / np.sqrt(d)
visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq  # bottom-right causal
s = np.where(visible, s, -np.inf)
p = np.exp(s - s.max(axis=-1, keepdims=True))
ref = np.einsum("bhqk,bkhd->bqhd", p / p.sum(axis=-1, keepdims=True), vv)
err = float(np.abs(o - ref).max())
loaded = Path(_ffi.lib()._name).resolve()
print(f"wheel: {loaded}: causal GQA forward, max abs error vs float64 {err:.1e}")
assert loaded.parent == Path(flashattn.__file__).resolve().parent, "not the wheel's library"
assert err < 1e-5, err
PY
)

banner "packages: a Rust project outside the repository, bundled build"
# A copy of the sources as a fresh clone has them (tracked and new files, no build trees).
git ls-files -z --cached --others --exclude-standard |
  tar --null --ignore-failed-read -cf - -T - | tar -xf - -C "$(mkdir -p "$work/src" && echo "$work/src")"
mkdir -p "$work/app/src"
cat >"$work/app/Cargo.toml" <<TOML
[package]
name = "app"
version = "0.1.0"
edition = "2021"

[dependencies]
flashattn = { path = "$work/src/bindings/rust/flashattn" }
TOML
cat >"$work/app/src/main.rs" <<'RS'
use flashattn::{Config, Context, DType, Device};

fn main() -> Result<(), flashattn::Error> {
    // 3 query rows against 5 keys, causal (bottom-right): row i sees keys 0..=i + 2.
    let (sq, sk, d) = (3usize, 5usize, 4usize);
    let config = Config::builder(DType::F32, 1, sq as i64, sk as i64, 1, 1, d as i64).causal(true).build()?;
    let q: Vec<f32> = (0..sq * d).map(|i| ((i * 7 % 11) as f32 - 5.0) / 8.0).collect();
    let k: Vec<f32> = (0..sk * d).map(|i| ((i * 5 % 13) as f32 - 6.0) / 8.0).collect();
    let v: Vec<f32> = (0..sk * d).map(|i| ((i * 3 % 7) as f32 - 3.0) / 4.0).collect();
    let mut o = vec![f32::NAN; sq * d];
    Context::new(Device::Cpu)?.forward(&config, &q, &k, &v, &mut o, None)?;
    let mut worst = 0f64;
    for i in 0..sq {
        let s: Vec<f64> = (0..=i + sk - sq)
            .map(|j| (0..d).map(|c| (q[i * d + c] * k[j * d + c]) as f64).sum::<f64>() / (d as f64).sqrt())
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let l: f64 = s.iter().map(|x| (x - m).exp()).sum();
        for c in 0..d {
            let want: f64 = s.iter().enumerate().map(|(j, x)| (x - m).exp() / l * v[j * d + c] as f64).sum();
            worst = worst.max((want - o[i * d + c] as f64).abs());
        }
    }
    println!("app: libflashattn {} on the CPU, max abs error {worst:.1e}", flashattn::version());
    assert!(worst < 1e-6, "max abs error {worst}");
    Ok(())
}
RS
# As on a laptop without the CUDA Toolkit: nvcc off PATH and the CPU-only build forced (CMake
# would find /usr/local/cuda by itself); the bundled build says so in a cargo warning.
(cd "$work/app" &&
  env -u FLASHATTN_LIB_DIR -u FLASHATTN_INCLUDE_DIR -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH \
    -u CARGO_TARGET_DIR PATH="$nocuda_path" NUM_JOBS="$jobs" FLASHATTN_CMAKE_ARGS=-DFA_CUDA=OFF \
    cargo run 2>"$work/app.log") || { cat "$work/app.log" >&2; exit 1; }
ls "$work"/app/target/debug/build/flashattn-sys-*/out/lib/libflashattn.so.0 >/dev/null ||
  { echo "the app did not use flashattn-sys's bundled build" >&2; exit 1; }
grep "warning: .*flashattn-sys: built libflashattn without CUDA" "$work/app.log" ||
  { cat "$work/app.log" >&2; echo "no notice of the CPU-only bundled build" >&2; exit 1; }

banner "packages: flashattn-sys with a broken flashattn.pc on PKG_CONFIG_PATH"
# A .pc naming a prefix with nothing in it: flashattn-sys must say so and go on to the next way
# (the repository's build tree), not hand bindgen a header that does not exist.
mkdir -p "$work/broken-pc"
sed -e 's|^prefix=.*|prefix=/nonexistent/flashattn|' build/flashattn.pc >"$work/broken-pc/flashattn.pc"
env -u FLASHATTN_LIB_DIR -u FLASHATTN_INCLUDE_DIR PKG_CONFIG_PATH="$work/broken-pc" \
  cargo build --manifest-path bindings/rust/Cargo.toml -p flashattn-sys 2>"$work/sys.log" ||
  { cat "$work/sys.log" >&2; exit 1; }
grep "warning: .*flashattn-sys: pkg-config flashattn: the .pc file .* names no libflashattn.so" \
  "$work/sys.log" || { cat "$work/sys.log" >&2; echo "no notice of the broken .pc" >&2; exit 1; }

banner "CPU-only build (FA_CUDA=OFF), nvcc off PATH: host tests, C++ wrapper, install, no CUDA symbol"
(
  export PATH="$nocuda_path"
  if command -v nvcc; then echo "nvcc is still on PATH" >&2; exit 1; fi
  cmake -S . -B build-cpu -DFA_CUDA=OFF "${extra[@]}"
  cmake --build build-cpu -j "$jobs"
  ctest --test-dir build-cpu --output-on-failure
  build-cpu/examples/flashattn_example
  FLASHATTN_LIBRARY="$PWD/build-cpu/libflashattn.so.0" PYTHONPATH="$PWD/bindings/python" \
    "$py" -m pytest -q -p no:cacheprovider bindings/python/tests
)

banner "host tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DFA_SANITIZE=address,undefined "${reduced[@]}" "${extra[@]}"
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -L 'api|choice|core|cpu|concurrency|cxx|family'

banner "Python and Rust suites against the ASan + UBSan library"
# The bindings' suites drive the library's host code under the sanitizers. Python's interpreter
# is not instrumented, so the ASan runtime is preloaded (it must come first); cargo builds the
# Rust tests in debug (overflow checks on) and runs each test binary with the runtime preloaded,
# cargo and rustc themselves without it (doctests, which cargo runs without a runner, ran in the
# plain step). Leak detection is off: the interpreter keeps its allocations until exit; the
# library's own leaks are the host tests' and fuzz/leak_check.cpp's to find.
asan_env=("LD_PRELOAD=$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libubsan.so)"
          ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1)
env "${asan_env[@]}" FLASHATTN_LIBRARY="$PWD/build-asan/libflashattn.so.0" \
  PYTHONPATH="$PWD/bindings/python" "$py" -m pytest -q -p no:cacheprovider bindings/python/tests
(
  export FLASHATTN_LIB_DIR="$PWD/build-asan" FLASHATTN_INCLUDE_DIR="$PWD/include"
  export CARGO_TARGET_DIR="$PWD/build-asan/cargo"
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="env ${asan_env[*]}"
  cargo test --tests --manifest-path bindings/rust/Cargo.toml
)

banner "concurrent use under ThreadSanitizer"
cmake -S . -B build-tsan -DFA_SANITIZE=thread "${reduced[@]}" "${extra[@]}"
cmake --build build-tsan -j "$jobs"
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -L concurrency

if [[ -f tools/run_fuzz.sh ]]; then
  banner "fuzzing: tools/run_fuzz.sh"
  bash tools/run_fuzz.sh
fi

banner "all tests passed"
printf '(total: %d s)\n' "$SECONDS"
