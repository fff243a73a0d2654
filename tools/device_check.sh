#!/usr/bin/env bash
# Build, test and sanitise on the GPU machine in one call (device minutes are scarce).
#   bash tools/device_check.sh            # full check, logs in $OUT (or ./device-out)
# Needs: nvcc, cmake, ninja, python3, compute-sanitizer on PATH; doctest headers in .deps/include
# (copied from a machine that has them: cp -r /usr/include/doctest .deps/include/).
set -uo pipefail
out="${OUT:-$PWD/device-out}"
logs="$out/logs"  # bundled into logs.tar.gz at the end: the device tool returns at most 8 files
mkdir -p "$logs"
build=build-device
status=0
step() {  # step NAME COMMAND...: runs, logs to $out/NAME.log, records failure, keeps going
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  if "$@" >"$logs/$name.log" 2>&1; then echo "   ok ($((SECONDS - t0)) s)"; else
    echo "   FAILED ($((SECONDS - t0)) s); tail of $name.log:"; tail -n 40 "$logs/$name.log"; status=1; fi
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
step configure cmake -S . -B "$build" -G Ninja -DFA_DOCTEST_INCLUDE_DIR="$PWD/.deps/include" \
  ${FA_DEVICE_CMAKE_ARGS:-}
step build ninja -C "$build" -j16
step ctest ctest --test-dir "$build" --output-on-failure -LE gpu
step gpu_tests "$build/tests/flashattn_gpu_tests" --duration=true
step example "$build/examples/flashattn_example"
step memcheck env FA_GPU_TEST_SAMPLE=9 compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$build/tests/flashattn_gpu_tests"
step racecheck env FA_GPU_TEST_SAMPLE=16 compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$build/tests/flashattn_gpu_tests" --test-case="every registered kernel*"
step python_gpu env FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" \
  PYTHONPATH="$PWD/bindings/python" python3 -m pytest -q -rs -p no:cacheprovider bindings/python/tests
# The Rust example is built where cargo is (the GPU machine may have none) and carried in .deps/bin:
#   cargo build --release --manifest-path bindings/rust/Cargo.toml --example device_forward
if [ -x .deps/bin/device_forward ]; then
  step rust_device env LD_LIBRARY_PATH="$PWD/$build" .deps/bin/device_forward
fi
step compare python3 tools/bench_compare.py --bench "$build/bench/flashattn_bench" \
  --out "$out/compare" --iters 20
step autotune "$build/bench/flashattn_bench" --autotune --iters 20 --seqlens 1024,4096,16384
grep -h -E "random seed|test cases|assertions|ERROR SUMMARY|RACECHECK SUMMARY|kernels checked|Geometric" \
  "$logs"/*.log
tail -n 12 "$logs/autotune.log"
tail -n 3 "$logs/python_gpu.log" "$logs/rust_device.log" 2>/dev/null
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
exit $status
