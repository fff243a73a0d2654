#!/usr/bin/env bash
# Tuning sweep on the GPU machine: builds every kernel the seed ever named (FA_KERNEL_SET=sweep)
# for one dtype and head dims 64/128/192/256 (FA_SWEEP_HEAD_DIMS), checks a sample of them
# against the CPU backend, times all of them on the FA-paper grid, and times PyTorch SDPA (flash,
# cuDNN) in the same run.
#   OUT=dir bash tools/device_sweep.sh
# Output: $OUT/sweep.csv (every kernel at every grid point), $OUT/compare/ (bench_compare.py).
set -uo pipefail
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
build=build-sweep
dtype="${FA_SWEEP_DTYPE:-bf16}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
cmake -S . -B "$build" -G Ninja -DFA_DOCTEST_INCLUDE_DIR="$PWD/.deps/include" -DFA_KERNEL_SET=sweep \
  -DFA_DTYPES="$dtype" -DFA_HEAD_DIMS="${FA_SWEEP_HEAD_DIMS:-64;128;192;256}" -DFA_CUDA_ARCHS=90 \
  -DFA_KERNELS_PER_FILE=4 \
  >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
SECONDS=0
ninja -C "$build" -j16 flashattn_bench flashattn_gpu_tests >"$out/build.log" 2>&1 ||
  { grep -B2 -A10 -m3 error "$out/build.log"; exit 1; }
echo "build: $SECONDS s"
SECONDS=0
FA_GPU_TEST_SAMPLE="${FA_SWEEP_TEST_SAMPLE:-7}" "$build/tests/flashattn_gpu_tests" \
  --test-case="every registered kernel*" >"$out/gpu_tests.log" 2>&1
echo "gpu tests (rc $?): $SECONDS s"; tail -4 "$out/gpu_tests.log"
SECONDS=0
"$build/bench/flashattn_bench" --all-kernels --dtype "$dtype" --window-ms "${FA_SWEEP_WINDOW_MS:-30}" --csv \
  >"$out/sweep.csv" 2>"$out/sweep.err"
echo "sweep: $SECONDS s, $(wc -l <"$out/sweep.csv") rows"
SECONDS=0
FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" PYTHONPATH="$PWD/bindings/python" \
  python3 tools/bench_compare.py --bench "$build/bench/flashattn_bench" --out "$out/compare" \
  --dtype "$dtype" >"$out/compare.log" 2>&1
echo "compare: $SECONDS s"; tail -3 "$out/compare.log"
