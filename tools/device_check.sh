#!/usr/bin/env bash
# Build, test, sanitise and benchmark on the GPU machine in one call (device minutes are scarce).
#   bash tools/device_check.sh                    # every step, logs in $OUT (or ./device-out)
#   FA_DEVICE_STEPS="build gpu_tests decode" bash tools/device_check.sh   # a subset
# Steps: build ctest gpu_tests sm90_gpu_tests gpu_features sm90_paged serving_tests
#        head_dims head_dims_memcheck head_dims_racecheck head_dims_synccheck head_dims_bench
#        fp8_tests fp8_memcheck fp8_racecheck fp8_synccheck fp8_bench fp8_tiles fp8_ncu
#        context_parallel example
#        memcheck racecheck
#        sm90_memcheck sm90_racecheck sm90_synccheck sm90_paged_memcheck sm90_paged_racecheck
#        sm90_paged_synccheck python_gpu rust_device
#        compare before_after serving_before_after sweep autotune decode decode_paged decode_spec
#        decode_fp8
#        chunked_prefill varlen copy python_overhead
# (gpu_features, sm90_paged, serving_tests and context_parallel, the simulated ring of
# examples/context_parallel, are parts of gpu_tests, for calls that need only them; memcheck
# runs them all.)
# fp8_tiles (every FP8 kernel pinned on the FA-paper grid) and fp8_ncu (ncu of the FP8 forward
# and image kernels) run by name only.
# ring_example and ring_py (asked for by name only) run examples/context_parallel/ring_attention.cpp
# and .py as one rank (WORLD_SIZE=1: NCCL set up, no transfer; their check against single-GPU
# attention); ring_nccl and ring_nccl_py (by name only) run them over every GPU of the machine,
# one process per GPU, at each of FA_CP_SEQLENS rows per rank (default "65536 262144"). Asking
# for ring_example or ring_nccl configures with -DFA_BUILD_CONTEXT_PARALLEL_EXAMPLE=ON (NCCL from
# NCCL_ROOT, else PyTorch's NCCL package). context_parallel_memcheck and
# context_parallel_racecheck (by name only) run the one-GPU simulated ring under each tool.
# before_after times the built-in choice of this build against another commit's library, back to
# back on the paper grid (tools/compare_builds.py): that library is .deps/before/libflashattn.so.0,
# or, where only its sources are there (.deps/before-src, e.g. `git archive COMMIT | tar -x -C
# .deps/before-src`), it is built beside this one (build-before/) by the build step.
# serving_before_after does the same for chunked prefill and decode on contiguous and paged
# caches (tools/compare_builds.py --serving, this build's decode_bench; FA_SERVING_PAGES, default
# "0,1,16,64"; FA_SERVING_KINDS, default "prefill,decode"; FA_SERVING_HEAD_DIMS, default every
# point's; FA_SERVING_KV_DTYPES, default "bf16": "bf16,e4m3" times e4m3 caches beside bf16 ones
# and reports each build's e4m3 over bf16 cache speed).
# Needs: nvcc, cmake, ninja, python3, compute-sanitizer on PATH; doctest headers in .deps/include
# (copied from a machine that has them: cp -r /usr/include/doctest .deps/include/).
# FA_DEVICE_CMAKE_ARGS adds CMake options (e.g. -DFA_CUDA_ARCHS=90 to build sm_90 only).
set -uo pipefail
out="${OUT:-$PWD/device-out}"
logs="$out/logs"  # bundled into logs.tar.gz at the end: the device tool returns at most 8 files
mkdir -p "$logs"
build=build-device
status=0
steps=" ${FA_DEVICE_STEPS:-build sass ctest gpu_tests head_dims_memcheck head_dims_racecheck head_dims_synccheck head_dims_bench fp8_memcheck fp8_racecheck fp8_synccheck fp8_bench example memcheck racecheck sm90_memcheck sm90_racecheck sm90_synccheck sm90_paged_memcheck sm90_paged_racecheck sm90_paged_synccheck python_gpu rust_device compare before_after serving_before_after sweep autotune decode decode_paged decode_spec decode_fp8 chunked_prefill varlen copy python_overhead} "
want() { [[ "$steps" == *" $1 "* ]]; }
step() {  # step NAME COMMAND...: runs if selected, logs to $logs/NAME.log, records failure, goes on
  local name=$1; shift
  want "$name" || return 0
  echo "== $name: $*"
  local t0=$SECONDS
  # A hung kernel must not take the call's whole limit: each step ends after FA_STEP_TIMEOUT s.
  if timeout "${FA_STEP_TIMEOUT:-900}" "$@" >"$logs/$name.log" 2>&1; then echo "   ok ($((SECONDS - t0)) s)"; else
    echo "   FAILED ($((SECONDS - t0)) s); tail of $name.log:"; tail -n 40 "$logs/$name.log"; status=1; fi
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
nvidia-smi topo -m >>"$out/gpu.txt" 2>&1  # how the GPUs are linked (NVLink: NV<n>)
cat "$out/gpu.txt"
if want build; then
  steps="$steps configure "
  if want ring_example || want ring_nccl; then
    # The NCCL program builds only on request; where NCCL_ROOT is unset, PyTorch's NCCL package
    # (nvidia-nccl-*: include/nccl.h, lib/libnccl.so.2) serves.
    if [ -z "${NCCL_ROOT:-}" ]; then
      NCCL_ROOT=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null ||
                  dirname "$(dirname "$(find / -name nccl.h -path '*nccl*' 2>/dev/null | head -n 1)")")
      export NCCL_ROOT
    fi
    echo "   NCCL_ROOT=$NCCL_ROOT"
    FA_DEVICE_CMAKE_ARGS="${FA_DEVICE_CMAKE_ARGS:-} -DFA_BUILD_CONTEXT_PARALLEL_EXAMPLE=ON"
  fi
  # FA_WARN_SPILLS: ptxas reports register spills here (the default build keeps them quiet).
  # FA_MMA_SYNC_SM90=all: the mma.sync prefill tiles get sm_90 code too, so the GPU suite runs
  # them here (a default build compiles them for sm_80 alone, and no A100 is at hand).
  step configure cmake -S . -B "$build" -G Ninja -DFA_DOCTEST_INCLUDE_DIR="$PWD/.deps/include" \
    -DFA_WARN_SPILLS=ON -DFA_MMA_SYNC_SM90=all ${FA_DEVICE_CMAKE_ARGS:-}
  if [ -f .deps/before-src/CMakeLists.txt ] && [ ! -f .deps/before/libflashattn.so.0 ]; then
    steps="$steps configure_before "
    step configure_before cmake -S .deps/before-src -B build-before -G Ninja \
      -DFA_BUILD_TESTS=OFF -DFA_BUILD_EXAMPLES=OFF -DFA_BUILD_BENCH=OFF ${FA_DEVICE_CMAKE_ARGS:-}
    ninja -C build-before -j8 >"$logs/build_before.log" 2>&1 &
    before_pid=$!
  fi
  step build ninja -C "$build" -j16
  if [ -n "${before_pid:-}" ] && ! wait "$before_pid"; then
    echo "   build_before FAILED; tail:"; tail -n 20 "$logs/build_before.log"; status=1
  fi
  if [[ -f $logs/build.log ]]; then
    echo "   register spills reported by ptxas: $(grep -c 'bytes spill' "$logs/build.log")" \
      "(the lines are in build.log)"
    grep 'bytes spill' "$logs/build.log" | sort | uniq -c | head -n 20
  fi
fi
# Each overlapped sm90 kernel's softmax between its two waits, the d <= 128 kernels' wgmma
# descriptors in uniform registers, and no local memory (spills) in any kernel
# (tools/check_sass.py; the toolkit's cuobjdump). A kernel set other than the default (a
# sweep's tuning candidates) may spill: there local memory is counted, not failed.
sass_local=""
grep -q '^FA_KERNEL_SET:STRING=default$' "$build/CMakeCache.txt" 2>/dev/null ||
  sass_local=--allow-local-memory
step sass python3 tools/check_sass.py "$build/libflashattn.so.0" --csv "$out/sass.csv" $sass_local
step ctest ctest --test-dir "$build" --output-on-failure -LE "gpu|sass"
step gpu_tests "$build/tests/flashattn_gpu_tests" --duration=true
step sm90_gpu_tests env FA_GPU_TEST_FAMILY=1 "$build/tests/flashattn_gpu_tests" \
  --test-case="every registered kernel*"
step gpu_features "$build/tests/flashattn_gpu_tests" --source-file="*test_gpu_features*"
step sm90_paged "$build/tests/flashattn_gpu_tests" --test-case="every sm90 kernel reads paged*"
# The serving paths alone: paged and chunked-prefill reads, malformed tables, the captured decode
# step, NaN through the kernels, split combine and merge_states.
step serving_tests "$build/tests/flashattn_gpu_tests" \
  --test-case="every sm90 kernel reads paged*,*chunked prefill*,malformed*,one captured decode*,*NaN*,merge_states*"
# Head dims below the built ones (sm90: kernel.cuh's narrow pairs) and value head dims: the tests,
# then under memcheck, racecheck and synccheck (every FA_HEAD_DIMS_SAMPLE-th kernel, default 3), then every
# multiple of 8 up to 256 timed at 32 heads each (head-dims.csv), each padded dim against the
# compiled dim above it (tools/padded_dims.py; FA_HEAD_DIMS_WINDOW_MS, default 40).
head_dim_tests="every multiple of 8 up to*,every kernel runs head dims below*,a value head dim below*"
step head_dims "$build/tests/flashattn_gpu_tests" --test-case="$head_dim_tests"
for tool in memcheck racecheck synccheck; do
  step "head_dims_$tool" env FA_GPU_TEST_SAMPLE="${FA_HEAD_DIMS_SAMPLE:-3}" compute-sanitizer \
    --tool "$tool" --error-exitcode 3 "$build/tests/flashattn_gpu_tests" \
    --test-case="every kernel runs head dims below*"
done
step head_dims_bench bash -c '"$0" --head-dims "$(seq -s, 8 8 256)" --heads 32 --csv \
  --window-ms "$2" > "$1/head-dims.csv" && python3 tools/padded_dims.py "$1/head-dims.csv" \
  --compiled 16,32,48,64,80,96,112,128,144,160,176,192,224,256' \
  "$build/bench/flashattn_bench" "$out" "${FA_HEAD_DIMS_WINDOW_MS:-40}"
# The FP8 kernels (e4m3 Q, K and V) alone, then under each tool (every FA_FP8_SAMPLE-th case;
# doctest splits filters at commas, so the comma in the first test's name is matched by '?').
step fp8_tests "$build/tests/flashattn_gpu_tests" --test-case="e4m3 queries*"
for tool in memcheck racecheck synccheck; do
  step "fp8_$tool" env FA_GPU_TEST_SAMPLE="${FA_FP8_SAMPLE:-2}" compute-sanitizer --tool "$tool" \
    --error-exitcode 3 "$build/tests/flashattn_gpu_tests" \
    --test-case="e4m3 queries? keys and values*,e4m3 queries on pages*"
done
# FP8 prefill beside bf16 on the FA-paper grid at d 128 and 256 (the same build, back to back).
step fp8_bench bash -c 'for t in e4m3 bf16; do "$0" --dtype $t --head-dims 128,256 --csv \
  --window-ms "$2" > "$1/fp8-prefill-$t.csv" || exit 1; done' "$build/bench/flashattn_bench" "$out" \
  "${FA_FP8_WINDOW_MS:-100}"
# Every FP8 kernel of the build pinned on the same grid (the copying tiles where the images pay;
# the others' points printed as skipped), for tile experiments and FA_KERNEL_SET=sm90 sweeps.
step fp8_tiles sh -c "'$build/bench/flashattn_bench' --dtype e4m3 --head-dims 128,256 --all-kernels \
  --csv --window-ms ${FA_FP8_WINDOW_MS:-60} > '$out/fp8-tiles.csv'"
# ncu of the chosen FP8 forward (non-causal, 2k and 8k keys) and of the image kernel at 2k, one
# CSV each (the clocks ncu locks: compare within the step, not with the bench's figures).
step fp8_ncu bash -c 'rc=0; for d in 128 256; do for s in 2048 8192; do
  ncu --kernel-name regex:forward_kernel --launch-skip 4 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --csv --page details "$0" --dtype e4m3 --head-dims $d \
    --seqlens $s --causal 0 --iters 1 --window-ms 1 > "$1/ncu-fp8-d$d-$s.csv" || rc=1; done
  ncu --kernel-name regex:v_images --launch-skip 4 --launch-count 1 --section SpeedOfLight \
    --csv --page details "$0" --dtype e4m3 --head-dims $d --seqlens 2048 --causal 0 --iters 1 \
    --window-ms 1 > "$1/ncu-fp8-images-d$d-2048.csv" || rc=1; done; exit $rc' \
  "$build/bench/flashattn_bench" "$out"
step context_parallel "$build/tests/flashattn_gpu_tests" --source-file="*test_gpu_context_parallel*"
step example "$build/examples/flashattn_example"
step ring_example env WORLD_SIZE=1 RANK=0 "$build/examples/flashattn_ring_attention" \
  --seqlen-per-rank 16384 --iters 3
# ring_py (by name only): the torch.distributed script as one rank under torchrun.
step ring_py env FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" \
  PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m torch.distributed.run --standalone \
  --nproc-per-node 1 examples/context_parallel/ring_attention.py --seqlen-per-rank 16384 --iters 3
for tool in memcheck racecheck; do
  step "context_parallel_$tool" compute-sanitizer --tool "$tool" --error-exitcode 3 \
    "$build/tests/flashattn_gpu_tests" --source-file="*test_gpu_context_parallel*"
done
# NVLink multicast stays off (it can take a shared host's GPUs out of service): set here too,
# should the machine's environment lack it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export FA_CP_SEQLENS="${FA_CP_SEQLENS:-65536 262144}" FA_CP_GPUS build
FA_CP_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# Every rank of the C++ program at $1 rows per rank, in the background; fails if any rank fails.
ring_ranks() {
  local id="/tmp/fa-cp-$$-$1.id" pids=() rc=0 r p
  rm -f "$id"
  for ((r = 0; r < FA_CP_GPUS; ++r)); do
    FA_CP_ID_FILE="$id" WORLD_SIZE="$FA_CP_GPUS" RANK=$r LOCAL_RANK=$r \
      "$build/examples/flashattn_ring_attention" --seqlen-per-rank "$1" --iters 5 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  rm -f "$id"
  return $rc
}
export -f ring_ranks
step ring_nccl bash -c 'rc=0; for n in $FA_CP_SEQLENS; do ring_ranks "$n" || rc=1; done; exit $rc'
step ring_nccl_py env FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" \
  PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" bash -c 'rc=0; for n in $FA_CP_SEQLENS; do
    python3 -m torch.distributed.run --standalone --nproc-per-node "$FA_CP_GPUS" \
      examples/context_parallel/ring_attention.py --seqlen-per-rank "$n" --iters 5 || rc=1; done
    exit $rc'
# memcheck: a sample of the kernel tests, and every feature test (malformed indices included).
step memcheck env FA_GPU_TEST_SAMPLE=9 compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$build/tests/flashattn_gpu_tests"
step racecheck env FA_GPU_TEST_SAMPLE=16 compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$build/tests/flashattn_gpu_tests" --test-case="every registered kernel*"
# The sm90 family under each tool: every FA_SM90_SAMPLE-th of its kernels (3: in the default
# build that is both dtypes, every head dim, 2 and 3 stages; in FA_KERNEL_SET=sm90 every knob
# takes both values) on the kernel test's problems of up to 200000 score elements (66 of the 74:
# 1013 keys against 177 queries the largest; the many-tile batches included), each tool at most
# FA_SANITIZER_TIMEOUT seconds (240).
for tool in memcheck racecheck synccheck; do
  step "sm90_$tool" timeout "${FA_SANITIZER_TIMEOUT:-240}" env FA_GPU_TEST_FAMILY=1 \
    FA_GPU_TEST_SAMPLE="${FA_SM90_SAMPLE:-3}" FA_GPU_TEST_MAX_WORK=200000 compute-sanitizer \
    --tool "$tool" --error-exitcode 3 "$build/tests/flashattn_gpu_tests" \
    --test-case="every registered kernel*"
done
# The sm90 family's paged producer (every third kernel, every page-size class) under each tool.
for tool in memcheck racecheck synccheck; do
  step "sm90_paged_$tool" env FA_GPU_TEST_SAMPLE=3 compute-sanitizer --tool "$tool" \
    --error-exitcode 3 "$build/tests/flashattn_gpu_tests" --test-case="every sm90 kernel reads paged*"
done
step python_gpu env FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" \
  PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q -rs -p no:cacheprovider bindings/python/tests
# The Rust example is built where cargo is (the GPU machine may have none) and carried in .deps/bin:
#   cargo build --release --manifest-path bindings/rust/Cargo.toml --example device_forward
if [ -x .deps/bin/device_forward ]; then
  step rust_device env LD_LIBRARY_PATH="$PWD/$build" .deps/bin/device_forward
fi
# The FA-paper grid beside FlashAttention-4 (where installed: ../shared/tools/fa4-baseline), cuDNN
# and FA2, back-to-back timing, in FA_COMPARE_DTYPES (default bf16,fp16: about 4 minutes each
# with FA4, so one per call after the build) at FA_COMPARE_HEAD_DIMS (default 64,128,256).
# PYTHONPATH keeps what the FA4 install sourced before this script set (its site folder):
# replaced, FA4 was "not importable" and left out.
step compare env FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" \
  PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 tools/bench_compare.py --bench "$build/bench/flashattn_bench" --out "$out/compare" \
  --dtype "${FA_COMPARE_DTYPES:-bf16,fp16}" --head-dims "${FA_COMPARE_HEAD_DIMS:-64,128,256}"
# The other commit's library: carried in .deps/before, or built above into build-before (which a
# warm machine keeps between calls, while a carried .deps is replaced by each call's copy).
base=.deps/before
[ -f "$base/libflashattn.so.0" ] || base=build-before
if [ -f "$base/libflashattn.so.0" ]; then
  step before_after python3 tools/compare_builds.py --bench "$build/bench/flashattn_bench" \
    --base "$base" --out "$out/before-after"
  step serving_before_after python3 tools/compare_builds.py --serving \
    --bench "$build/bench/decode_bench" --base "$base" --out "$out/before-after" \
    --pages "${FA_SERVING_PAGES:-0,1,16,64}" --kinds "${FA_SERVING_KINDS:-prefill,decode}" \
    ${FA_SERVING_HEAD_DIMS:+--head-dims "$FA_SERVING_HEAD_DIMS"} \
    ${FA_SERVING_KV_DTYPES:+--kv-dtypes "$FA_SERVING_KV_DTYPES"}
fi
# Every registered kernel of both families on the grid: the data the choice table comes from.
step sweep sh -c "'$build/bench/flashattn_bench' --all-kernels --csv --window-ms 30 > '$out/sweep-bf16.csv'"
step autotune "$build/bench/flashattn_bench" --autotune --seqlens 1024,4096,16384
step decode python3 tools/bench_decode.py --bench "$build/bench/decode_bench" --out "$out/decode"
step decode_paged "$build/bench/decode_bench" decode --pages 0,16,64,256 --batches 8,64 \
  --kv-lens 8192,32768
step decode_spec "$build/bench/decode_bench" decode --sq 4,16 --batches 1,8,64 \
  --kv-lens 8192,131072
# An e4m3 (FP8) cache beside a bf16 one: decode, and chunked prefill 4 x 512 against 16k.
step decode_fp8 sh -c "'$build/bench/decode_bench' decode --kv-dtype bf16,e4m3 --batches 1,8,64 \
  --kv-lens 8192,131072 --pages 0,16 && '$build/bench/decode_bench' decode --kv-dtype bf16,e4m3 \
  --batches 4 --sq 512 --kv-lens 16384 --pages 0,16"
# Chunked prefill (issue 16's shapes: chunks of 256 to 4096 causal rows against 8k-32k cached
# keys, 32/8 heads, d 128), contiguous and paged.
step chunked_prefill sh -c "for shape in '4 512 8192,32768' '4 2048 16384' '16 256 8192' '1 4096 32768'; do
  set -- \$shape; '$build/bench/decode_bench' decode --batches \$1 --sq \$2 --kv-lens \$3 \
    --pages 0,1,16,64,256; done"
step varlen "$build/bench/decode_bench" varlen
step copy "$build/bench/decode_bench" copy
step python_overhead env FLASHATTN_LIBRARY="$PWD/$build/libflashattn.so.0" \
  PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" python3 tools/bench_python_overhead.py
grep -H -i -E "spill" "$logs/build.log" | sort | uniq -c | head -n 20
grep -H -E "random seed|test cases|assertions|ERROR SUMMARY|RACECHECK SUMMARY|kernels checked|feature cases|Geometric|ratio|copy," \
  "$logs"/*.log
for f in head_dims_bench ring_example ring_py ring_nccl ring_nccl_py before_after serving_before_after decode decode_paged decode_spec chunked_prefill varlen python_overhead; do
  [ -f "$logs/$f.log" ] && { echo "--- $f"; tail -n 40 "$logs/$f.log"; }
done
tail -n 12 "$logs/autotune.log" 2>/dev/null
tail -n 3 "$logs/python_gpu.log" "$logs/rust_device.log" 2>/dev/null
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
exit $status
