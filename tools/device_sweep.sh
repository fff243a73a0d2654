#!/usr/bin/env bash
# Tuning sweep on the GPU machine: builds a kernel set (FA_SWEEP_SET: `sweep`, every kernel the
# seed ever named, by default; `sm90` for the Hopper family's tuning candidates) for one dtype
# and head dims 64/128/192/256 (FA_SWEEP_HEAD_DIMS; D:DV times value head dim DV on D's kernels,
# e.g. "192:128"), checks a sample of them against the CPU
# backend, times all of them on the FA-paper grid FA_SWEEP_PASSES times (1; passes of short
# windows put one kernel 0.90-1.15x apart, so tables are derived from the mean of two), and
# times PyTorch SDPA (flash, cuDNN) in the same run.
#   OUT=dir bash tools/device_sweep.sh
#   OUT=dir FA_SWEEP_SET=sm90 FA_SWEEP_HEAD_DIMS="192;256" FA_SWEEP_PASSES=2 \
#     FA_SWEEP_WINDOW_MS=40 FA_SWEEP_ITERS=1 bash tools/device_sweep.sh
# Output: $OUT/sweep.csv (every kernel at every grid point; with several passes their means, by
# tools/merge_sweep_passes.py, beside $OUT/sweep-pass<N>.csv), $OUT/compare/ (bench_compare.py).
set -uo pipefail
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
build=build-sweep
dtype="${FA_SWEEP_DTYPE:-bf16}"
head_dims="${FA_SWEEP_HEAD_DIMS:-64;128;192;256}"
passes="${FA_SWEEP_PASSES:-1}"
[[ "$passes" =~ ^[1-9][0-9]*$ ]] || { echo "FA_SWEEP_PASSES=$passes: expected 1 or more"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
cmake -S . -B "$build" -G Ninja -DFA_DOCTEST_INCLUDE_DIR="$PWD/.deps/include" -DFA_KERNEL_SET="${FA_SWEEP_SET:-sweep}" \
  -DFA_DTYPES="$dtype" -DFA_HEAD_DIMS="$(sed 's/:[0-9]*//g' <<<"$head_dims")" -DFA_CUDA_ARCHS=90 \
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
rm -f "$out"/sweep-pass*.csv "$out"/sweep-pass*.err
files=()
for p in $(seq 1 "$passes"); do
  SECONDS=0
  "$build/bench/flashattn_bench" --all-kernels --dtype "$dtype" --head-dims "${head_dims//;/,}" \
    --window-ms "${FA_SWEEP_WINDOW_MS:-30}" --iters "${FA_SWEEP_ITERS:-3}" --csv \
    >"$out/sweep-pass$p.csv" 2>"$out/sweep-pass$p.err"
  echo "sweep pass $p: $SECONDS s, $(wc -l <"$out/sweep-pass$p.csv") rows"
  files+=("$out/sweep-pass$p.csv")
done
if [ "$passes" -gt 1 ]; then
  python3 tools/merge_sweep_passes.py "${files[@]}" --out "$out/sweep.csv" || exit 1
else
  mv "${files[0]}" "$out/sweep.csv"
fi
SECONDS=0
FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" PYTHONPATH="$PWD/bindings/python" \
  python3 tools/bench_compare.py --bench "$build/bench/flashattn_bench" --out "$out/compare" \
  --dtype "$dtype" >"$out/compare.log" 2>&1
echo "compare: $SECONDS s"; tail -3 "$out/compare.log"
