// The sm90 family's rules (src/cuda/sm90/family.cpp): what its TMA kernels refuse, and the
// persistent grid.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/family_cases.hpp"
#include "cuda/sm80/family.hpp"
#include "cuda/sm90/config.hpp"
#include "cuda/sm90/family.hpp"

namespace fa::cuda {

TEST_SUITE("family") {
  TEST_CASE("sm90: paged caches of any page size and splits run; strides past TMA's reach are refused") {
    KernelFamily const& f = sm90::kFamily;
    KernelConfig const k = test::sm90_kernel(128, true);
    Problem p = test::dense_problem(2, 1000, 1000, 16, 4);
    CHECK(f.cannot_run(k, p).empty());
    p.causal = true;
    p.softcap = 20.f;
    p.sinks = true;
    CHECK(f.cannot_run(k, p).empty());

    // A paged cache of any page size: TMA boxes of gcd(B_c, page_size) rows, or gathered rows.
    Problem paged = p;
    paged.layout = Layout::kPagedKv;
    paged.max_pages_per_seq = 1000;
    paged.num_pages = 2000;
    for (int64_t page : {1, 3, 8, 12, 16, 48, 64, 100, 128, 256, 1024}) {
      paged.page_size = page;
      CHECK_MESSAGE(f.cannot_run(k, paged).empty(), "page_size ", page);
    }
    paged.num_pages = (int64_t(1) << 31) - 1;
    CHECK(f.cannot_run(k, paged).find("num_pages") != std::string::npos);
    Problem split = p;
    split.num_splits = 2;
    CHECK(f.cannot_run(k, split).empty());
    Problem strided = p;
    strided.k.batch = int64_t(1) << 39;
    CHECK(f.cannot_run(k, strided).find("2^39") != std::string::npos);
    strided.k.batch = (int64_t(1) << 39) - 8;
    CHECK(f.cannot_run(k, strided).empty());
  }

  TEST_CASE("sm90: a paged cache ranks kernels by the rows of their TMA boxes, gathered rows by their stages") {
    KernelFamily const& f = sm90::kFamily;
    Problem p = test::dense_problem(4, 512, 16384, 32, 8, 256);
    auto rank = [&](int B_c, int64_t page) {
      p.layout = page == 0 ? Layout::kKvCache : Layout::kPagedKv;
      p.page_size = page;
      return f.paged_rank(test::sm90_kernel(B_c, false, 256), p);
    };
    CHECK(rank(80, 0) == 0);    // not paged
    CHECK(rank(80, 64) == 1);   // boxes of 16 rows
    CHECK(rank(64, 64) == 3);   // whole blocks in a page
    CHECK(rank(80, 256) == 1);
    CHECK(rank(64, 256) == 3);
    CHECK(rank(128, 64) == 3);  // two boxes of 64 rows per block
    CHECK(rank(128, 16) == 1);
    CHECK(rank(64, 16) == 1);   // no tile does better at page 16
    CHECK(rank(128, 32) == 2);  // boxes of 32 rows: between 16 and 64
    CHECK(rank(96, 48) == 2);
    CHECK(rank(128, 1) == 0);   // gathered rows, two stages
    CHECK(rank(128, 12) == 0);
    CHECK(sm80::kFamily.paged_rank(test::mma_sync_kernel(64, 128, 4), p) == 0);
    // Gathered rows: a third stage keeps another block's copies in flight; TMA boxes rank by
    // their rows whatever the stages.
    KernelConfig three = test::sm90_kernel(128, true, 128);
    three.stages = 3;
    for (int64_t page : {1, 3, 12, 100}) {
      p.page_size = page;
      CHECK(f.paged_rank(three, p) == 1);
      CHECK(f.paged_rank(test::sm90_kernel(128, true, 128), p) == 0);
    }
    p.page_size = 16;
    CHECK(f.paged_rank(three, p) == 1);
    p.page_size = 64;
    CHECK(f.paged_rank(three, p) == 3);
  }

  TEST_CASE("sm90: never packs or decodes; a persistent grid has a block per SM at most") {
    KernelFamily const& f = sm90::kFamily;
    Problem const p = test::dense_problem(4, 2048, 2048, 16, 4);  // 16 x 16 x 4 = 1024 tiles
    KernelEntry persistent{test::sm90_kernel(128, true), nullptr, nullptr, nullptr, nullptr};
    KernelEntry plain{test::sm90_kernel(128, false), nullptr, nullptr, nullptr, nullptr};
    Device const device = test::device_with(&persistent, 1);
    CHECK_FALSE(f.pack_gqa(persistent.config, test::dense_problem(1, 1, 8192, 32, 8)));
    CHECK(f.decode_rank(persistent.config, test::dense_problem(1, 1, 8192, 32, 8)) == 0);

    Schedule const s = f.schedule(device, persistent, p, true);
    CHECK(s.blocks == 132);
    CHECK(s.num_splits == 1);
    CHECK(s.workspace_bytes == 0);
    CHECK_FALSE(s.general);
    CHECK(f.schedule(device, plain, p, true).blocks == 1024);
    // Fewer tiles than SMs: one block per tile.
    CHECK(f.schedule(device, persistent, test::dense_problem(1, 128, 4096, 8, 8), false).blocks == 8);
    // Allowed to split, those 8 tiles take 8 splits of their 32 key blocks each: 64 blocks.
    CHECK(f.schedule(device, persistent, test::dense_problem(1, 128, 4096, 8, 8), true).blocks == 64);

    Problem biased = p;
    biased.alibi = Alibi::kPerHead;
    CHECK(f.schedule(device, persistent, biased, true).general);
    Problem paged = p;  // its producer reads pages in either instantiation
    paged.layout = Layout::kPagedKv;
    paged.page_size = 64;
    CHECK_FALSE(f.schedule(device, persistent, paged, true).general);
    // Decode leaves SMs idle unsplit (32 heads x 1 query block): the keys split to fill them,
    // with a workspace and the general instantiation (the partials' epilogue).
    Problem decode = test::dense_problem(1, 1, 8192, 32, 8);
    Schedule const d = f.schedule(device, persistent, decode, true);
    CHECK(d.num_splits > 1);
    CHECK(d.general);
    CHECK(d.workspace_bytes == split_workspace_bytes(decode, d.num_splits));
    CHECK(d.blocks == std::min<int64_t>(32 * d.num_splits, 132));
    CHECK(f.schedule(device, persistent, decode, false).num_splits == 1);

    // A head dim below the kernel's alone needs no general instantiation: the launch runs a
    // narrow pair (launch.cuh). Its general features still do.
    Problem narrow = test::dense_problem(4, 2048, 2048, 16, 4, 80);
    CHECK_FALSE(f.schedule(device, persistent, narrow, false).general);
    Problem narrow_paged = narrow;
    narrow_paged.layout = Layout::kPagedKv;
    narrow_paged.page_size = 64;
    CHECK_FALSE(f.schedule(device, persistent, narrow_paged, false).general);
    Problem with_feature[4] = {narrow, narrow, narrow, narrow};
    with_feature[0].softcap = 30.f;
    with_feature[1].alibi = Alibi::kPerHead;
    with_feature[2].sinks = true;
    with_feature[3].softmax_scale = -0.125f;
    for (Problem const& q : with_feature) CHECK(f.schedule(device, persistent, q, false).general);
    // An e4m3 cache: with bf16 queries this d 128 kernel reads its K as loaded in the plain
    // instantiation (rules::e4m3_keys; the launch puts head dims below the kernel's on the
    // general e4m3 copy); a general feature still asks for the general one, and fp16 queries,
    // whose kernels convert K too, always do.
    REQUIRE(sm90::rules::e4m3_keys(persistent.config));
    Problem e4m3 = p;
    e4m3.kv_dtype = DType::kE4M3;
    CHECK_FALSE(f.schedule(device, persistent, e4m3, false).general);
    Problem narrow_e4m3 = narrow;
    narrow_e4m3.kv_dtype = DType::kE4M3;
    CHECK_FALSE(f.schedule(device, persistent, narrow_e4m3, false).general);
    Problem capped = e4m3;
    capped.softcap = 30.f;
    CHECK(f.schedule(device, persistent, capped, false).general);
    KernelEntry half = persistent;
    half.config.dtype = DType::kFP16;
    REQUIRE(sm90::rules::fp8_kv_tile(half.config));
    CHECK_FALSE(sm90::rules::e4m3_keys(half.config));
    Problem half_e4m3 = e4m3;
    half_e4m3.dtype = DType::kFP16;
    CHECK(f.schedule(device, half, half_e4m3, false).general);
    CHECK(f.schedule(device, persistent, test::dense_problem(1, 1, 8192, 32, 8, 80), true).general);
    decode.num_splits = 5;
    CHECK(f.schedule(device, persistent, decode, false).num_splits == 5);
    ForwardParams const params = f.params(persistent.config, p, s);
    CHECK(params.n_q_blocks == 16);
    CHECK(params.pack_gqa == 0);
  }

  TEST_CASE("sm90: a head dim below the kernel's runs in multiples of 8, with zero columns") {
    KernelFamily const& f = sm90::kFamily;
    KernelConfig const k = test::sm90_kernel(128, true);
    for (int64_t d : {8, 16, 64, 72, 96, 120, 128}) {
      Problem p = test::dense_problem(2, 1000, 1000, 16, 4, d);
      CHECK_MESSAGE(f.cannot_run(k, p).empty(), "head_dim ", d);
      p.layout = Layout::kPagedKv;  // the gather zero-fills the chunks past head_dim
      p.page_size = 3;
      p.max_pages_per_seq = 400;
      p.num_pages = 800;
      CHECK_MESSAGE(f.cannot_run(k, p).empty(), "paged, head_dim ", d);
    }
    for (int64_t d : {1, 4, 100, 124}) {
      std::string const why = f.cannot_run(k, test::dense_problem(2, 1000, 1000, 16, 4, d));
      CHECK_MESSAGE(why.find("head_dim = " + std::to_string(d) + " is not a multiple of 8") !=
                        std::string::npos, why);
    }
  }

  TEST_CASE("sm90: a d 192 kernel of 128 keys holds V in 128 columns and runs value head dims up to 128") {
    KernelFamily const& f = sm90::kFamily;
    KernelConfig const v128 = test::sm90_kernel(128, false, 192);
    KernelConfig const full = test::sm90_kernel(112, false, 192);
    REQUIRE(sm90::v_cols(v128) == 128);
    REQUIRE(sm90::v_cols(full) == 192);
    Problem p = test::dense_problem(2, 1000, 1000, 16, 4, 192);
    p.head_dim_v = 128;
    CHECK(f.cannot_run(v128, p).empty());
    CHECK(f.cannot_run(full, p).empty());
    KernelEntry entry{v128, nullptr, nullptr, nullptr, nullptr};
    Device const device = test::device_with(&entry, 1);
    CHECK_FALSE(f.schedule(device, entry, p, false).general);  // at its own dims: plain
    for (int64_t dv : {8, 64, 120}) {
      Problem q = p;
      q.head_dim_v = dv;
      CHECK_MESSAGE(f.cannot_run(v128, q).empty(), "head_dim_v ", dv);
      // Narrower dims alone are the launch's to place (a narrow pair of the plain instantiation,
      // or the general one: launch.cuh); a general feature still asks for the general one.
      CHECK_FALSE_MESSAGE(f.schedule(device, entry, q, false).general, "head_dim_v ", dv);
      q.softcap = 30.f;
      CHECK_MESSAGE(f.schedule(device, entry, q, false).general, "softcap, head_dim_v ", dv);
    }
    Problem paged = p;  // gathered rows: V's two 64-column passes
    paged.layout = Layout::kPagedKv;
    paged.page_size = 3;
    paged.max_pages_per_seq = 400;
    paged.num_pages = 800;
    CHECK(f.cannot_run(v128, paged).empty());
    for (int64_t dv : {136, 192}) {
      Problem q = p;
      q.head_dim_v = dv;
      std::string const why = f.cannot_run(v128, q);
      CHECK_MESSAGE(why.find("head_dim_v = " + std::to_string(dv) + ": this kernel holds V and O "
                             "in 128 columns") != std::string::npos, why);
      CHECK(f.cannot_run(full, q).empty());
    }
  }

  TEST_CASE("sm90: e4m3 caches run on the fp8 tiles at d 64, 128 and 256 in TMA boxes") {
    KernelFamily const& f = sm90::kFamily;
    KernelConfig const tile = test::sm90_kernel(128, true);  // stages 2, overlap, persistent
    REQUIRE(sm90::rules::fp8_kv_tile(tile));
    REQUIRE(sm90::rules::fp8_kv_tile(test::sm90_kernel(128, true, 64)));
    CHECK_FALSE(sm90::rules::fp8_kv_tile(test::sm90_kernel(128, false)));  // not persistent
    CHECK_FALSE(sm90::rules::fp8_kv_tile(test::sm90_kernel(176, true)));   // wider key blocks
    KernelConfig pingpong = tile;
    pingpong.pingpong = true;
    CHECK_FALSE(sm90::rules::fp8_kv_tile(pingpong));
    KernelConfig three = tile;
    three.stages = 3;
    CHECK_FALSE(sm90::rules::fp8_kv_tile(three));
    // d 256 with 64 keys, one tile per block: one e4m3 stage per tensor beside two 16-bit ones
    // (the Q tile 64 KiB, the stages 128 KiB, the e4m3 ones 2 x 16 KiB and their barriers).
    KernelConfig const wide = test::sm90_kernel(64, false, 256);
    CHECK(sm90::rules::fp8_kv_tile(wide));
    CHECK_FALSE(sm90::rules::fp8_kv_tile(test::sm90_kernel(64, true, 256)));  // persistent
    CHECK(sm90::e4m3_slots(wide) == 1);
    // bf16 queries read the keys as loaded at d 128 and 256, not at d 64 (64-byte rows).
    CHECK(sm90::rules::e4m3_keys(wide));
    CHECK(sm90::rules::e4m3_keys(tile));
    CHECK_FALSE(sm90::rules::e4m3_keys(test::sm90_kernel(128, true, 64)));
    CHECK(sm90::e4m3_smem_bytes(wide) == 1024 + 65536 + 131072 + 80 + (2 * 16384 + 32));
    CHECK_FALSE(sm90::rules::fp8_kv_tile(test::sm90_kernel(80, false, 256)));  // 80 keys
    CHECK_FALSE(sm90::rules::fp8_kv_tile(test::sm90_kernel(112, false, 192)));  // d 192
    Problem wide_p = test::dense_problem(2, 1000, 1000, 16, 4, 256);
    wide_p.kv_dtype = DType::kE4M3;
    CHECK(f.cannot_run(wide, wide_p).empty());
    CHECK(f.smem_bytes(wide, wide_p) == sm90::e4m3_smem_bytes(wide));

    Problem p = test::dense_problem(2, 1000, 1000, 16, 4);
    p.kv_dtype = DType::kE4M3;
    CHECK(f.cannot_run(tile, p).empty());
    // The e4m3 layout: two e4m3 stages of K and V (16 KiB each at d 128) in place of O's buffer.
    CHECK(f.smem_bytes(tile, p) == sm90::e4m3_smem_bytes(tile));
    CHECK(sm90::e4m3_smem_bytes(tile) == 1024 + 32768 + 131072 + 80 + 2 * (2 * 16384 + 32));
    CHECK(sm90::e4m3_smem_bytes(tile) <= kMaxSmemBytesAnyArch);
    Problem bf16 = p;
    bf16.kv_dtype = DType::kBF16;
    CHECK(f.smem_bytes(tile, bf16) == tile.smem_bytes());
    std::string why = f.cannot_run(pingpong, p);
    CHECK(why.find("kv_dtype = 4 (FA_DTYPE_E4M3)") != std::string::npos);

    // Pages in boxes of a multiple of 8 rows; pages the producer would gather are refused.
    Problem paged = p;
    paged.layout = Layout::kPagedKv;
    paged.max_pages_per_seq = 1000;
    paged.num_pages = 2000;
    for (int64_t page : {8, 16, 48, 64, 256, 1024}) {
      paged.page_size = page;
      CHECK_MESSAGE(f.cannot_run(tile, paged).empty(), "page_size ", page);
    }
    for (int64_t page : {1, 3, 12, 100}) {
      paged.page_size = page;
      why = f.cannot_run(tile, paged);
      CHECK_MESSAGE(why.find("page_size = " + std::to_string(page)) != std::string::npos, why);
    }
    // Rows in 16-byte units: a stride that is not a multiple of 16 elements is named.
    Problem odd = p;
    odd.v.seq = 16 * 136 + 8;
    why = f.cannot_run(tile, odd);
    CHECK(why.find("v_seq_stride = " + std::to_string(odd.v.seq)) != std::string::npos);

  }

  TEST_CASE("sm90: e4m3 queries run on the FP8 kernels in TMA boxes, their rows in 16-byte units") {
    KernelFamily const& f = sm90::kFamily;
    KernelConfig fp8 = test::sm90_kernel(128, true);
    fp8.dtype = DType::kE4M3;
    REQUIRE(sm90::rules::own(fp8));
    Problem q8 = test::dense_problem(2, 1000, 1000, 16, 4);
    q8.dtype = q8.kv_dtype = DType::kE4M3;
    CHECK(f.cannot_run(fp8, q8).empty());
    // Its own layout, whatever the problem (no 16-bit stages to convert into).
    CHECK(f.smem_bytes(fp8, q8) == sm90::smem_bytes(fp8));
    // The choice matches dtypes: a 16-bit kernel is refused there (choice.cpp), by its dtype.
    KernelConfig const bf16 = test::sm90_kernel(128, true);
    CHECK(cannot_run(bf16, q8).find("its dtype differs from fa_config.dtype = 4") != std::string::npos);
    CHECK(cannot_run(fp8, q8).empty());
    Problem paged = q8;
    paged.layout = Layout::kPagedKv;
    paged.max_pages_per_seq = 1000;
    paged.num_pages = 2000;
    for (int64_t page : {8, 16, 64, 256}) {
      paged.page_size = page;
      CHECK_MESSAGE(f.cannot_run(fp8, paged).empty(), "page_size ", page);
    }
    for (int64_t page : {1, 3, 12}) {
      paged.page_size = page;
      std::string const why = f.cannot_run(fp8, paged);
      CHECK_MESSAGE(why.find("page_size = " + std::to_string(page) + ": the sm90 family's e4m3 "
                             "kernels read pages in TMA boxes") != std::string::npos, why);
    }
    for (auto [stride, name] : {std::pair{&TensorStrides::seq, "q_seq_stride"},
                                std::pair{&TensorStrides::head, "q_head_stride"}}) {
      Problem odd = q8;
      odd.q.*stride += 8;
      std::string const why = f.cannot_run(fp8, odd);
      CHECK_MESSAGE(why.find(std::string(name) + " = " + std::to_string(odd.q.*stride) +
                             " is not a multiple of 16 elements") != std::string::npos, why);
    }
    Problem odd_k = q8;
    odd_k.k.head += 8;
    CHECK(f.cannot_run(fp8, odd_k).find("k_head_stride") != std::string::npos);
  }

  TEST_CASE("sm90: an FP8 problem's V is transposed ahead of the run where enough query tiles read each block") {
    KernelFamily const& f = sm90::kFamily;
    KernelConfig fp8 = test::sm90_kernel(128, true);
    fp8.dtype = DType::kE4M3;
    KernelEntry entry{fp8, nullptr, nullptr, nullptr, nullptr};
    Device const device = test::device_with(&entry, 1);
    auto e4m3 = [](Problem p) {
      p.dtype = p.kv_dtype = DType::kE4M3;
      return p;
    };
    // 2 x 2000 keys x 4 K/V heads: ceil(2000 / B_c) blocks each, one stage image per block.
    Problem const gqa = e4m3(test::dense_problem(2, 2048, 2000, 16, 4));
    Schedule const s = f.schedule(device, entry, gqa, true);
    int64_t const blocks = (2000 + fp8.B_c - 1) / fp8.B_c;
    CHECK(s.num_splits == 1);
    CHECK(s.v_image_bytes == size_t(2 * 4 * blocks * sm90::e4m3_v_image_bytes(fp8)));
    CHECK(s.workspace_bytes == s.v_image_bytes);  // what fa_plan_workspace_size() reports
    CHECK(f.params(fp8, gqa, s).v_image_blocks == blocks);
    // 16 query tiles per V block (2048 rows / B_r 128, one query head per K/V head), 32 with a
    // causal mask or a window.
    Problem one = e4m3(test::dense_problem(1, 2048, 2048, 8, 8));
    CHECK(f.schedule(device, entry, one, true).v_image_bytes > 0);
    one.causal = true;
    CHECK(f.schedule(device, entry, one, true).v_image_bytes == 0);
    one.seqlen_q = 4096;
    CHECK(f.schedule(device, entry, one, true).v_image_bytes > 0);
    Problem const short_rows = e4m3(test::dense_problem(4, 1024, 1024, 8, 8));  // 8 per block
    CHECK(f.schedule(device, entry, short_rows, true).workspace_bytes == 0);
    // A varlen batch: per K/V head total_k / B_c + batch slots (each sequence's blocks from its
    // first key row / B_c + its index on); its query rows per sequence averaged.
    Problem varlen = gqa;
    varlen.layout = Layout::kVarlen;
    varlen.total_q = 4096;
    varlen.total_k = 3000;
    int64_t const slots = 3000 / fp8.B_c + 2;
    Schedule const v = f.schedule(device, entry, varlen, true);
    CHECK(v.v_image_bytes == size_t(4 * slots * sm90::e4m3_v_image_bytes(fp8)));
    CHECK(f.params(fp8, varlen, v).v_image_blocks == slots);
    varlen.total_q = 2 * 128;  // one query tile per sequence and head: 4 per V block
    CHECK(f.schedule(device, entry, varlen, true).v_image_bytes == 0);
    // Not for caches, V rows in 8-byte halves, or 16-bit kernels.
    Problem cache = gqa;
    cache.layout = Layout::kKvCache;
    CHECK(f.schedule(device, entry, cache, true).v_image_bytes == 0);
    Problem narrow = gqa;
    narrow.head_dim_v = 120;
    CHECK(f.schedule(device, entry, narrow, true).v_image_bytes == 0);
    narrow.head_dim_v = 112;
    CHECK(f.schedule(device, entry, narrow, true).v_image_bytes > 0);
    KernelEntry bf16{test::sm90_kernel(128, true), nullptr, nullptr, nullptr, nullptr};
    CHECK(f.schedule(device, bf16, test::dense_problem(2, 2048, 2000, 16, 4), true).v_image_bytes == 0);
  }

  TEST_CASE("sm90: the FP8 tile that copies V's images runs where they pay, unsplit, with a workspace") {
    KernelFamily const& f = sm90::kFamily;
    KernelConfig copying = test::sm90_kernel(128, true, 256);  // S, P, O: 208 registers
    copying.dtype = DType::kE4M3;
    KernelConfig transposing = copying;
    transposing.B_c = 64;
    REQUIRE(sm90::e4m3_images_only(copying));
    REQUIRE(!sm90::e4m3_images_only(transposing));
    Problem p = test::dense_problem(2, 2048, 2048, 16, 16);  // 16 query tiles per V block
    p.dtype = p.kv_dtype = DType::kE4M3;
    p.head_dim = p.head_dim_v = 256;
    CHECK(f.cannot_run(copying, p).empty());
    KernelEntry entry{copying, nullptr, nullptr, nullptr, nullptr};
    Device const device = test::device_with(&entry, 1);
    Schedule const s = f.schedule(device, entry, p, true);
    CHECK(s.images_required);
    CHECK(s.num_splits == 1);
    CHECK(s.v_image_bytes == size_t(2 * 16 * 16 * sm90::e4m3_v_image_bytes(copying)));
    CHECK(s.workspace_bytes == s.v_image_bytes);
    KernelEntry other{transposing, nullptr, nullptr, nullptr, nullptr};
    CHECK(!f.schedule(device, other, p, true).images_required);
    // Without a workspace (a plan's fallback launch), split, or where the images do not pay
    // (at d 256 4 query tiles per block, 16 with a causal mask; a cache's capacity would be
    // transposed for every step).
    Problem bare = p;
    bare.no_workspace = true;
    CHECK(f.cannot_run(copying, bare).find("the run brings none") != std::string::npos);
    CHECK(f.cannot_run(transposing, bare).empty());
    Problem split = p;
    split.num_splits = 2;
    CHECK(f.cannot_run(copying, split).find("num_splits = 2") != std::string::npos);
    Problem causal = p;
    causal.causal = true;
    CHECK(f.cannot_run(copying, causal).empty());  // 16 query tiles per block
    CHECK(f.schedule(device, other, causal, true).v_image_bytes == 0);  // its own rule: 32
    causal.seqlen_q = causal.seqlen_k = 1024;
    std::string const why = f.cannot_run(copying, causal);
    CHECK_MESSAGE(why.find("from 16 query tiles of 128 rows per key block of this problem's "
                           "mask") != std::string::npos, why);
    CHECK(f.cannot_run(transposing, causal).empty());
    Problem few = p;
    few.seqlen_q = 384;  // 3 query tiles per block
    CHECK(f.cannot_run(copying, few).find("from 4 query tiles") != std::string::npos);
    few.seqlen_q = 512;
    CHECK(f.cannot_run(copying, few).empty());
    few.seqlen_q = 384;
    // At d 128 the copying tile (192 keys) wants as many as the transposing one: 16, 32 masked.
    KernelConfig copying128 = test::sm90_kernel(192, true);
    copying128.dtype = DType::kE4M3;
    REQUIRE(sm90::e4m3_images_only(copying128));
    Problem p128 = test::dense_problem(2, 2048, 2048, 16, 16);
    p128.dtype = p128.kv_dtype = DType::kE4M3;
    CHECK(f.cannot_run(copying128, p128).empty());
    p128.causal = true;
    CHECK(f.cannot_run(copying128, p128).find("from 32 query tiles") != std::string::npos);
    Problem cache = p;
    cache.layout = Layout::kKvCache;
    CHECK(!f.cannot_run(copying, cache).empty());
    // Query tiles of fewer rows than a tile (decode-like): bound by reading K and V.
    Problem short_rows = p;
    short_rows.seqlen_q = 64;
    short_rows.heads_kv = 2;  // 8 query heads per K/V head: 8 tiles per block, of 64 rows
    CHECK(f.cannot_run(copying, short_rows).find("whole query tiles") != std::string::npos);
    // The choice: the copying tile (the larger) where it runs, else the transposing one.
    Device both = test::device_with(&entry, 1);
    both.kernels = {&other, &entry};
    KernelEntry const* chosen = nullptr;
    REQUIRE(choose_kernel(both, p, &chosen) == FA_STATUS_SUCCESS);
    CHECK(chosen == &entry);
    for (Problem const& q : {bare, causal, cache, few, short_rows}) {
      REQUIRE(choose_kernel(both, q, &chosen) == FA_STATUS_SUCCESS);
      CHECK(chosen == &other);
    }
    // A grid that leaves SMs idle: the copying tile runs unsplit, the transposing one splits.
    // One sequence of 128 query rows, 32 query heads over 2 K/V heads (16 tiles per V block),
    // 32k keys: 32 blocks on 132 SMs.
    Problem narrow_grid = test::dense_problem(1, 128, 32768, 32, 2, 256);
    narrow_grid.dtype = narrow_grid.kv_dtype = DType::kE4M3;
    CHECK(f.cannot_run(copying, narrow_grid).empty());
    std::string const idle = cannot_run(both, copying, narrow_grid);
    CHECK_MESSAGE(idle.find("runs unsplit, and its 32 blocks would leave SMs") != std::string::npos,
                  idle);
    CHECK(f.schedule(both, other, narrow_grid, true).num_splits > 1);
    REQUIRE(choose_kernel(both, narrow_grid, &chosen) == FA_STATUS_SUCCESS);
    CHECK(chosen == &other);
    // Tuning builds hold a tile in several knobs: among equal tiles e4m3 queries take the FP8
    // sweep's (persistent, two stages, no ping-pong), whatever the registry's order.
    KernelConfig plain = copying;
    plain.persistent = false;
    KernelEntry plain_entry{plain, nullptr, nullptr, nullptr, nullptr};
    Device tuning = test::device_with(&entry, 1);
    tuning.kernels = {&other, &plain_entry, &entry};
    REQUIRE(choose_kernel(tuning, p, &chosen) == FA_STATUS_SUCCESS);
    CHECK(chosen == &entry);
  }
}

}  // namespace fa::cuda
