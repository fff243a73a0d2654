// The mma.sync family's rules (src/cuda/sm80/family.cpp): GQA packing, decode kernels, splits.
#include <doctest/doctest.h>

#include <string>

#include "cuda/family_cases.hpp"
#include "cuda/sm80/config.hpp"
#include "cuda/sm80/family.hpp"

namespace fa::cuda {

TEST_SUITE("family") {
  TEST_CASE("mma.sync: GQA packing only where one head's rows leave the tile mostly empty") {
    KernelFamily const& f = sm80::kFamily;
    KernelConfig const k = test::mma_sync_kernel(64, 128, 4);
    CHECK(f.pack_gqa(k, test::dense_problem(1, 1, 8192, 32, 8)));
    CHECK(f.pack_gqa(k, test::dense_problem(1, 63, 8192, 32, 8)));
    CHECK_FALSE(f.pack_gqa(k, test::dense_problem(1, 64, 8192, 32, 8)));
    CHECK_FALSE(f.pack_gqa(k, test::dense_problem(1, 1, 8192, 32, 32)));  // no GQA
    CHECK(f.cannot_run(k, test::dense_problem(1, 1, 8192, 32, 8)).empty());
  }

  TEST_CASE("mma.sync: decode kernels rank by their key block; others do not decode") {
    KernelFamily const& f = sm80::kFamily;
    Problem const decode = test::dense_problem(4, 2, 8192, 32, 8);  // 8 packed rows per tile
    CHECK(f.decode_rank(test::mma_sync_kernel(64, 128, 4), decode) == 2);
    CHECK(f.decode_rank(test::mma_sync_kernel(64, 64, 4), decode) == 1);
    CHECK(f.decode_rank(test::mma_sync_kernel(128, 128, 8), decode) == 0);
    CHECK(f.decode_rank(test::mma_sync_kernel(64, 128, 8), decode) == 0);
    // 17 queries x 4 heads = 68 rows per K/V head: not decode-like.
    CHECK(f.decode_rank(test::mma_sync_kernel(64, 128, 4), test::dense_problem(4, 17, 8192, 32, 8)) == 0);
  }

  TEST_CASE("mma.sync: splits fill the SMs for decode, are forced, or are left out") {
    KernelFamily const& f = sm80::kFamily;
    KernelEntry entry{test::mma_sync_kernel(64, 128, 4), nullptr, nullptr, nullptr, nullptr};
    Device const device = test::device_with(&entry, 2);  // 264 resident blocks
    Problem p = test::dense_problem(1, 1, 65536, 32, 8);  // 8 packed tiles, 512 key blocks

    Schedule const automatic = f.schedule(device, entry, p, true);
    CHECK(automatic.pack_gqa);
    CHECK(automatic.num_splits > 1);
    CHECK(automatic.num_splits <= 128);  // each split keeps >= 4 key blocks
    CHECK(automatic.blocks == 8 * automatic.num_splits);
    CHECK(automatic.blocks <= 2 * 264);
    CHECK(automatic.general);
    CHECK(automatic.workspace_bytes == split_workspace_bytes(p, automatic.num_splits));

    Schedule const unsplit = f.schedule(device, entry, p, false);
    CHECK(unsplit.num_splits == 1);
    CHECK(unsplit.blocks == 8);
    CHECK(unsplit.workspace_bytes == 0);

    p.num_splits = 3;
    Schedule const forced = f.schedule(device, entry, p, false);
    CHECK(forced.num_splits == 3);
    CHECK(forced.blocks == 24);

    // Short caches: a wave of splits of 4 key blocks or more would hold under 90% of the 264
    // slots (64 and 128 blocks at 4k and 8k), and 33 splits would leave each under 8 key
    // blocks, so one block per SM instead: 16 splits x 8 = 128.
    for (int64_t keys : {4096, 8192}) {
      CAPTURE(keys);
      Schedule const short_cache = f.schedule(device, entry, test::dense_problem(1, 1, keys, 32, 8), true);
      CHECK(short_cache.num_splits == 16);
      CHECK(short_cache.blocks == 128);
    }
    // Batch 8 at 4k: 64 packed tiles, 4 splits keep 8 key blocks each and fill the 264 slots.
    Schedule const batch8 = f.schedule(device, entry, test::dense_problem(8, 1, 4096, 32, 8), true);
    CHECK(batch8.num_splits == 4);
    // One wave holding 90% of the slots or more, with splits of 4 to 32 key blocks, before the
    // other rules: batch 2 (16 tiles) at 32k and 64k takes 16 splits (256 blocks), not two
    // waves of 33 (528); batch 5 (40 tiles) at 8k 6 (240 blocks), not 13; batch 2 at 8k 16
    // splits of 4 key blocks and batch 3 at 8k 11 of 5.8, not one block an SM (8 and 5); batch
    // 4 at 4k 8, batch 8 at 2k 4 (not 4 and 2); batch 1 at 16k and 32k 32 splits of 4 and 8 key
    // blocks, not 16 (at 32k the wave's 33 would leave one empty). Longer splits keep the
    // fullest waves, counted without empty splits: batch 2 at 128k 32 splits of 32 key blocks
    // (512 blocks; the fullest count, 33, is those 32 and an empty one), batch 5 at 32k 13 (one
    // wave would be 6 splits of 43 key blocks); so does a wave of 224 (0.85): batch 7 at 8k, 8
    // splits of 8 key blocks (9 would leave the last empty); a wave of 128 keeps one block an
    // SM (batch 2 at 4k: 8).
    auto automatic_splits = [&](int64_t batch, int64_t keys) {
      return f.schedule(device, entry, test::dense_problem(batch, 1, keys, 32, 8), true).num_splits;
    };
    CHECK(automatic_splits(2, 32768) == 16);
    CHECK(automatic_splits(2, 65536) == 16);
    CHECK(automatic_splits(2, 131072) == 32);
    CHECK(automatic_splits(5, 8192) == 6);
    CHECK(automatic_splits(5, 32768) == 13);
    CHECK(automatic_splits(7, 8192) == 8);
    CHECK(automatic_splits(1, 16384) == 32);
    CHECK(automatic_splits(1, 32768) == 32);
    CHECK(automatic_splits(1, 65536) == 32);
    CHECK(automatic_splits(2, 8192) == 16);
    // 8000 keys (63 key blocks): the wave's 15 splits of 5 key blocks leave two empty, so 13.
    CHECK(automatic_splits(2, 8000) == 13);
    CHECK(automatic_splits(3, 8192) == 11);
    CHECK(automatic_splits(4, 4096) == 8);
    CHECK(automatic_splits(8, 2048) == 4);
    CHECK(automatic_splits(2, 4096) == 8);
    // With one block per SM the fullest waves decide: 8 tiles at 32k take 32 splits (33 would
    // fill two waves of 132 with one split of the 256 key blocks left empty), not 16.
    Device const one_per_sm = test::device_with(&entry, 1);
    CHECK(f.schedule(one_per_sm, entry, test::dense_problem(1, 1, 32768, 32, 8), true).num_splits == 32);
    // No automatic count leaves a split without a key block: each reads ceil(key blocks / n),
    // so the last one starts inside the keys. Batches 1-64 x 1k-256k keys, awkward lengths
    // included, on devices of one and two blocks an SM.
    for (Device const* d : {&device, &one_per_sm}) {
      for (int64_t batch = 1; batch <= 64; ++batch) {
        for (int64_t keys :
             {1000, 2048, 3000, 6000, 8192, 12000, 24576, 50000, 65536, 100000, 262144}) {
          Problem const problem = test::dense_problem(batch, 1, keys, 32, 8);
          int const n = f.schedule(*d, entry, problem, true).num_splits;
          int64_t const key_blocks = (keys + 127) / 128;
          int64_t const per_split = (key_blocks + n - 1) / n;
          CAPTURE(batch);
          CAPTURE(keys);
          CHECK((n - 1) * per_split < key_blocks);
        }
      }
    }
    // 256 keys (2 key blocks): splits of fewer than 2 key blocks are not worth a combine.
    Schedule const tiny = f.schedule(device, entry, test::dense_problem(1, 1, 256, 32, 8), true);
    CHECK(tiny.num_splits == 1);

    // A grid that already fills the device stays unsplit.
    Problem const prefill = test::dense_problem(8, 4096, 4096, 32, 8);
    Schedule const big = f.schedule(device, entry, prefill, true);
    CHECK(big.num_splits == 1);
    CHECK(big.blocks == 64 * 32 * 8);
    CHECK_FALSE(big.general);
    ForwardParams const params = f.params(entry.config, prefill, big);
    CHECK(params.n_q_blocks == 64);
    CHECK(params.head_units == 32);
  }

  TEST_CASE("mma.sync: a decode tile's warps share its key blocks where its rows fit one warp") {
    KernelFamily const& f = sm80::kFamily;
    KernelEntry entry{test::mma_sync_kernel(64, 128, 4), nullptr, nullptr, nullptr, nullptr};
    Device const device = test::device_with(&entry, 2);
    // 1 query x 4 packed heads, 4 x 4 = 16 (a warp's 16 rows): split; 5 x 4 = 20: not.
    Schedule const decode = f.schedule(device, entry, test::dense_problem(1, 1, 8192, 32, 8), true);
    CHECK(decode.key_split);
    CHECK(decode.general);
    CHECK(f.params(entry.config, test::dense_problem(1, 1, 8192, 32, 8), decode).key_split == 1);
    CHECK(f.schedule(device, entry, test::dense_problem(1, 4, 8192, 32, 8), false).key_split);
    CHECK_FALSE(f.schedule(device, entry, test::dense_problem(1, 5, 8192, 32, 8), true).key_split);
    // MHA decode (no packing): one row per tile; still the general instantiation's split.
    Schedule const mha = f.schedule(device, entry, test::dense_problem(1, 1, 8192, 8, 8), false);
    CHECK(mha.key_split);
    CHECK(mha.general);
    // An e4m3 cache splits too (its own instantiation, reading e4m3 bytes into fragments),
    // with less shared memory: Q, two stages of e4m3 K and V, the rows' powers of two.
    Problem fp8 = test::dense_problem(1, 1, 8192, 32, 8);
    fp8.kv_dtype = DType::kE4M3;
    CHECK(f.schedule(device, entry, fp8, true).key_split);
    CHECK(f.smem_bytes(entry.config, fp8) == sm80::e4m3_split_smem_bytes(entry.config));
    CHECK(f.smem_bytes(entry.config, fp8) == 80 * 1024 + 4 * 64);
    Problem fp8_rows = test::dense_problem(1, 5, 8192, 32, 8);
    fp8_rows.kv_dtype = DType::kE4M3;
    CHECK_FALSE(f.schedule(device, entry, fp8_rows, true).key_split);
    CHECK(f.smem_bytes(entry.config, fp8_rows) == sm80::e4m3_smem_bytes(entry.config));
    // Prefill and non-decode tiles never split.
    Problem const prefill = test::dense_problem(1, 512, 8192, 32, 8);
    CHECK_FALSE(f.schedule(device, entry, prefill, true).key_split);
    KernelEntry wide{test::mma_sync_kernel(128, 128, 8), nullptr, nullptr, nullptr, nullptr};
    Problem const decode_wide = test::dense_problem(1, 1, 8192, 32, 8);
    CHECK_FALSE(f.schedule(test::device_with(&wide, 1), wide, decode_wide, true).key_split);
    // A decode tile of 32 keys (the tuning sets', d 256) leaves a warp less than a k16 step.
    KernelEntry narrow{test::mma_sync_kernel(64, 32, 4, 256), nullptr, nullptr, nullptr, nullptr};
    CHECK(sm80::rules::fp8_kv_tile(narrow.config));
    CHECK_FALSE(sm80::rules::key_split_tile(narrow.config));
    Problem const decode_256 = test::dense_problem(1, 1, 8192, 32, 8, 256);
    CHECK_FALSE(f.schedule(test::device_with(&narrow, 2), narrow, decode_256, true).key_split);
    CHECK(sm80::rules::key_split_tile(test::mma_sync_kernel(64, 64, 4, 256)));
  }

  TEST_CASE("mma.sync: a head dim below the kernel's runs in multiples of 8, with zero columns") {
    KernelFamily const& f = sm80::kFamily;
    KernelConfig const k = test::mma_sync_kernel(64, 128, 4);
    for (int64_t d : {8, 64, 72, 120, 128}) {
      CHECK_MESSAGE(f.cannot_run(k, test::dense_problem(1, 100, 100, 8, 8, d)).empty(),
                    "head_dim ", d);
    }
    for (int64_t d : {1, 4, 100, 124}) {
      std::string const why = f.cannot_run(k, test::dense_problem(1, 100, 100, 8, 8, d));
      CHECK_MESSAGE(why.find("head_dim = " + std::to_string(d) + " is not a multiple of 8") !=
                        std::string::npos, why);
    }
  }

  TEST_CASE("mma.sync: e4m3 caches run on the fp8 decode tiles only; e4m3 queries nowhere") {
    KernelFamily const& f = sm80::kFamily;
    KernelConfig const decode = test::mma_sync_kernel(64, 128, 4);  // B_c 128: an fp8 tile
    KernelConfig const prefill = test::mma_sync_kernel(128, 64, 4);
    REQUIRE(sm80::rules::fp8_kv_tile(decode));
    REQUIRE_FALSE(sm80::rules::fp8_kv_tile(prefill));
    Problem p = test::dense_problem(1, 100, 100, 8, 8);
    p.kv_dtype = DType::kE4M3;  // bf16 queries against an e4m3 cache
    CHECK(f.cannot_run(decode, p).empty());
    std::string const why = f.cannot_run(prefill, p);
    CHECK(why.find("kv_dtype = 4") != std::string::npos);
    CHECK(why.find("64-row, 4-warp tiles") != std::string::npos);
    Problem odd = test::dense_problem(1, 100, 100, 3, 3, 72);  // rows of 3 x 72 bytes
    odd.kv_dtype = DType::kE4M3;
    std::string const unaligned = f.cannot_run(decode, odd);
    CHECK(unaligned.find("k_seq_stride = 216") != std::string::npos);
    CHECK(unaligned.find("multiple of 16") != std::string::npos);
    odd.kv_dtype = DType::kBF16;
    CHECK(f.cannot_run(decode, odd).empty());
    // The e4m3 instantiation stages K and V too, and a float per query row (bf16 queries'
    // powers of two): 112 KiB + 256 bytes at d 128, past sm_86/89's 99 KiB.
    CHECK(f.smem_bytes(decode, p) == sm80::e4m3_smem_bytes(decode));
    CHECK(f.smem_bytes(decode, p) == 112 * 1024 + 4 * 64);
    CHECK(f.smem_bytes(decode, odd) == sm80::smem_bytes(decode));
    p.dtype = DType::kE4M3;
    CHECK(f.cannot_run(decode, p).find("dtype = 4 (FA_DTYPE_E4M3)") != std::string::npos);
    p.dtype = p.kv_dtype = DType::kBF16;
    CHECK(f.cannot_run(prefill, p).empty());
  }

  TEST_CASE("mma.sync: one fp8 decode tile per head dim: B_c 128, else whole-block loads at 192+") {
    using sm80::rules::fp8_kv_tile;
    CHECK(fp8_kv_tile(test::mma_sync_kernel(64, 128, 4, 64)));
    CHECK_FALSE(fp8_kv_tile(test::mma_sync_kernel(64, 64, 4, 64)));
    CHECK_FALSE(fp8_kv_tile(test::mma_sync_kernel(64, 128, 8)));
    CHECK(fp8_kv_tile(test::mma_sync_kernel(64, 64, 4, 256)));
    KernelConfig streamed = test::mma_sync_kernel(64, 64, 4, 256);
    streamed.K_mma_load_K_tiles = 2;
    CHECK_FALSE(fp8_kv_tile(streamed));
    KernelConfig sync_copy = test::mma_sync_kernel(64, 128, 4);
    sync_copy.async_copy = false;
    CHECK_FALSE(fp8_kv_tile(sync_copy));
  }
}

}  // namespace fa::cuda
