#!/usr/bin/env bash
# Builds the libFuzzer targets and the leak check (fuzz/, clang with ASan + UBSan, the library's
# host sources and no GPU kernels) and runs them:
#   fuzz_kernel_name, fuzz_tuning_file, fuzz_config_forward, fuzz_merge_states
#       FA_FUZZ_SECONDS each (default 60), starting from the committed corpus
#       fuzz/corpus/<target>/ (so every regression input in it is replayed first); new inputs go
#       to the build folder, never into fuzz/corpus/;
#   leak_check  10^5 CPU context and plan create/destroy cycles under LeakSanitizer.
# Prints each target's executions (libFuzzer's final stats) and fails on any finding: a crash,
# a sanitizer report, a leak, a timeout (10 s per input) or a broken property. A finding's input
# is kept as build-fuzz/artifacts/<target>-crash-<sha1>; replay it with
#   build-fuzz/fuzz_<target> build-fuzz/artifacts/<target>-crash-<sha1>
# Needs clang and its libFuzzer/sanitizer runtimes (Debian: clang, libclang-rt-dev), CMake,
# Python 3 and the CUDA Toolkit (headers and the static runtime; no GPU).
# Two fuzzers run at once (they are single-threaded but for the CPU backend that
# fuzz_config_forward drives; a 2-core CI machine has two cores): fuzz_kernel_name with
# fuzz_tuning_file, then fuzz_config_forward with fuzz_merge_states: about 2 x FA_FUZZ_SECONDS
# of fuzzing in all.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FA_FUZZ_SECONDS:-60}"
jobs="${FA_JOBS:-$(nproc)}"
build="${FA_FUZZ_BUILD_DIR:-build-fuzz}"

cmake -S fuzz -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
cmake --build "$build" -j "$jobs"
rm -rf "$build/artifacts" "$build/logs" "$build/new-corpus"
mkdir -p "$build/artifacts" "$build/logs"

# fuzz_one <target> <max input length>: runs in the background; its log is $build/logs/<target>.
fuzz_one() {
  local target=$1 max_len=$2 dict=()
  [[ -f "fuzz/$target.dict" ]] && dict=(-dict="fuzz/$target.dict")
  mkdir -p "$build/new-corpus/$target"
  "$build/fuzz_$target" -max_total_time="$seconds" -timeout=10 -max_len="$max_len" \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" "${dict[@]}" \
    "$build/new-corpus/$target" "fuzz/corpus/$target" >"$build/logs/$target" 2>&1 &
}

failed=0
report() {
  local target=$1 status=$2 log="$build/logs/$1" runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [[ $status -eq 0 && -n $runs ]]; then
    echo "fuzz_$target: $runs executions in ${seconds} s, no findings"
  else
    echo "fuzz_$target: FAILED (exit status $status); the end of its log:" >&2
    tail -n 40 "$log" >&2
    failed=1
  fi
}

# fuzz_pair <target> <max_len> <target> <max_len>: two fuzzers side by side.
fuzz_pair() {
  local first=$1 second=$3 pid_first pid_second status
  echo "fuzzing fuzz_$first and fuzz_$second for ${seconds} s"
  fuzz_one "$first" "$2"
  pid_first=$!
  fuzz_one "$second" "$4"
  pid_second=$!
  status=0; wait "$pid_first" || status=$?
  report "$first" "$status"
  status=0; wait "$pid_second" || status=$?
  report "$second" "$status"
}

fuzz_pair kernel_name 256 tuning_file 4096
# config_forward's inputs reach the 0.3 fields and index tensors past 128 bytes with i64 strides.
fuzz_pair config_forward 256 merge_states 96

echo "leak check"
if ! "$build/leak_check"; then
  echo "leak_check: FAILED" >&2
  failed=1
fi

if [[ $failed -ne 0 ]]; then
  echo "run_fuzz.sh: findings (inputs in $build/artifacts/)" >&2
  exit 1
fi
echo "run_fuzz.sh: no findings"
