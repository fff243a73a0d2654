#!/usr/bin/env bash
# Times decode points at forced split counts with each decode kernel, to set the split heuristic
# (src/cuda/sm80/family.cpp, schedule) and the decode kernel choice (kDecodeKeys there).
#   bash tools/sweep_decode_splits.sh build/bench/decode_bench > splits.csv
set -euo pipefail
bench=$1
first=1
for kernel in "(BF16, 128, 64, 64, 4): async+eager+swizzled+load_0_0_0_tiles" \
              "(BF16, 128, 64, 128, 4): async+eager+swizzled+load_2_2_2_tiles"; do
  for point in "1 8192" "1 32768" "1 65536" "1 131072" "8 4096" "8 8192" "32 4096"; do
    set -- $point
    for splits in 1 2 4 8 16 24 33 48 66 99 132 198 264; do
      out=$("$bench" decode --batches "$1" --kv-lens "$2" --splits "$splits" --kernel "$kernel" \
            --iters 20 2>/dev/null) || continue
      if ((first)); then echo "$out" | head -1; first=0; fi
      echo "$out" | tail -n +2
    done
  done
done
