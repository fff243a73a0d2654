#!/usr/bin/env python3
"""Generates the GPU kernel instantiations and the registry entries from one list.

CMake runs this at configure time with the build's options; it writes, into --out:
  fa_fwd_<arch>_hd<d>_<part>.cu         explicit instantiations of the kernel template plus a function
                                        that adds each one to the registry (one file per (kernel
                                        family, head dim) group, its dtypes together, split every
                                        --per-file kernels so builds parallelise; <arch> sm80no90
                                        for the mma.sync tiles without sm_90 code, off_sm90);
  registry_generated.cpp                calls every group's registration function;
  families_generated.cpp                find_family(): the families this build compiles;
  family_configs_generated.cpp          family_configs(): every family's config rules and names,
                                        in every build (the CPU-only one validates and names
                                        every family's configs too);
  config_sources.txt                    every family's config.cpp (those rules), for CMake;
  kernels.txt                           the short names of all kernels, in registry order (the tests
                                        check the built registry against it);
  families.txt                          one line per family built: its folder and the one arch it
                                        compiles for alone ("-": the build's arch list), for CMake;
  mma_sync_prefill.txt                  ON, or OFF where a build of sm_90 alone left the mma.sync
                                        prefill tiles out (off_sm90), for the tests' CMake;
  sources_<family>.txt                  each family's sources, for CMake: its generated .cu files and
                                        the host .cpp files of its folder but config.cpp.
Files whose content is unchanged are not rewritten, so a re-configure rebuilds nothing.

Kernel sets (--kernel-set):
  default      the kernels the measured choice table (src/cuda/heuristic_sm*.txt) names, picks,
               pad rows and autotuning candidates, at the chosen dtypes and head dims;
  all          default plus the seed's whole autotune space and progression at every head dim;
  seed         the seed's autotune space (its should_autotune_config filter) and its seven
               progression configs (sonnyli/flash_attention_from_scratch);
  autotune, progression: those two halves of seed;
  sweep        the autotune space and the progression at every block shape the seed names, for
               tuning runs (tools/device_sweep.sh).
The choice table is also emitted as C++ (heuristic_generated.cpp), so the kernels it names and the
kernels built come from one list.
"""
import argparse
import dataclasses
import itertools
import os
import sys

DTYPE_CODES = {"fp16": 1, "bf16": 2, "e4m3": 4}  # fa_dtype values; FP16 sorts first, as in the seed
DTYPE_NAMES = {1: "FP16", 2: "BF16", 4: "E4M3"}
DTYPE_CPP = {1: "DType::kFP16", 2: "DType::kBF16", 4: "DType::kE4M3"}
E4M3 = 4  # FP8 kernels (e4m3 Q, K and V): the sm90 family's fp8_prefill_configs only
KERNEL_SETS = ("default", "all", "seed", "autotune", "progression", "sweep", "sm90")
SUPPORTED_HEAD_DIMS = (64, 128, 192, 256)
# FA_NARROW_HEAD_DIMS's default: the sm90 family's narrow pairs (src/cuda/sm90/narrow.hpp), so
# that from 64 to 192 every multiple of 8 computes at most 8 columns it does not need (72 on 80,
# ..., 184 on 192), above it at most 24 (200-216 on 224, 232-248 on 256), and below 64 every 16
# columns (pairs for 8, 24 and 40 ran no faster than 16, 32 and 48: there the softmax takes the
# time, docs/performance.md); 192:128 is DeepSeek's value head dim. A built head dim's own (64,
# 128, 192, 256) is the pair at the kernel's width: the plain features with the column bounds,
# for the dims between its last pair and the kernel's (56, 120, 184, 232-248), which otherwise
# run the general instantiation. The pairs go on the kernels of the table's pad rows (those that
# run padded dims: 2 per head dim, kernel_pairs()), not on every kernel: they were 42% of the
# sm90 compile on all of them (docs/performance.md, session 55).
DEFAULT_NARROW_HEAD_DIMS = "16;32;48;64;80;96;112;128;144;160;176;192:128;192;224;256"
# narrow.hpp's NarrowList::kMax: the default's 15 pairs fit a build of any one head dim.
MAX_NARROW_PAIRS = 24


@dataclasses.dataclass(frozen=True, order=True)
class KernelConfig:
    # Field order is the registry order (src/core/kernel_config.hpp).
    dtype: int
    d_head: int
    B_r: int
    B_c: int
    n_warps: int
    async_copy: bool
    eager_load_blocks: bool
    swizzled: bool
    Q_tiles: int
    K_tiles: int
    V_tiles: int
    double_buffer: bool
    optimized_softmax: bool
    family: int = 0  # 0: mma.sync (sm_80+), 1: sm90 (sm_90a: TMA, wgmma, warp specialisation)
    stages: int = 0  # sm90: K/V pipeline stages
    overlap: bool = False  # sm90: softmax overlapped with the next block's wgmma
    pingpong: bool = False  # sm90, two consumers: wgmma issue in turns
    persistent: bool = False  # sm90: one block per SM walks the tiles

    def short_name(self):
        """fa::short_name() of a valid config: the head, then the family's tag and knob tokens."""
        family = FAMILIES[self.family]
        head = (f"({DTYPE_NAMES[self.dtype]}, {self.d_head}, {self.B_r}, {self.B_c}, "
                f"{self.n_warps}): ")
        return head + "+".join(([family.tag] if family.tag else []) + family.tokens(self))

    def cpp(self):
        b = lambda x: "true" if x else "false"
        return (f"KernelConfig{{{DTYPE_CPP[self.dtype]}, {self.d_head}, {self.B_r}, {self.B_c}, "
                f"{self.n_warps}, {b(self.async_copy)}, {b(self.eager_load_blocks)}, "
                f"{b(self.swizzled)}, {self.Q_tiles}, {self.K_tiles}, {self.V_tiles}, "
                f"{b(self.double_buffer)}, {b(self.optimized_softmax)}, {self.family}, "
                f"{self.stages}, {b(self.overlap)}, {b(self.pingpong)}, {b(self.persistent)}}}")


def canonical(c):
    """The config that compiles to the same code and is registered in c's place (fa::canonical():
    the family's)."""
    return FAMILIES[c.family].canonical(c)


def sm80_canonical(c):
    """canonical() in src/cuda/sm80/config.hpp: the same three rules."""
    k, v = c.K_tiles, c.V_tiles
    if c.Q_tiles == 0 and k * 8 == c.d_head:
        k = 0
    if v * 8 == c.B_c:
        v = 0
    groups = (k != 0 and k * 8 < c.d_head) or (v != 0 and v * 8 < c.B_c)
    return dataclasses.replace(c, K_tiles=k, V_tiles=v, double_buffer=c.double_buffer and groups)


def sm80_tokens(c):
    """The mma.sync knobs' tokens (src/cuda/sm80/config.cpp), the load token always."""
    feats = [f for f, on in (("async", c.async_copy), ("eager", c.eager_load_blocks),
                             ("swizzled", c.swizzled)) if on]
    feats.append(f"load_{c.Q_tiles}_{c.K_tiles}_{c.V_tiles}_tiles")
    if c.double_buffer:
        feats.append("buffer")
    if c.optimized_softmax:
        feats.append("opt_softmax")
    return feats


def sm80_parse(tokens, c):
    """`c` (the name's head, family 0) with the mma.sync knobs of `tokens`."""
    load = [t for t in tokens if t.startswith("load_")]
    if len(load) != 1:
        raise ValueError(f"no load_<Q>_<K>_<V>_tiles in {tokens}")
    q, k, v = (int(x) for x in load[0][5:-6].split("_"))
    return dataclasses.replace(c, async_copy="async" in tokens, eager_load_blocks="eager" in tokens,
                               swizzled="swizzled" in tokens, Q_tiles=q, K_tiles=k, V_tiles=v,
                               double_buffer="buffer" in tokens,
                               optimized_softmax="opt_softmax" in tokens)


def sm90_tokens(c):
    """The sm90 knobs' tokens (src/cuda/sm90/config.cpp): the stages always, the knobs on."""
    return [f"stages_{c.stages}"] + [k for k, on in (("overlap", c.overlap),
                                                     ("pingpong", c.pingpong),
                                                     ("persistent", c.persistent)) if on]


def sm90_parse(tokens, c):
    """`c` (the name's head, family 1) with the sm90 knobs of `tokens`."""
    stages = [int(t[7:]) for t in tokens if t.startswith("stages_")]
    return dataclasses.replace(c, stages=stages[0], overlap="overlap" in tokens,
                               pingpong="pingpong" in tokens, persistent="persistent" in tokens)


def should_autotune(c):
    """The seed's should_autotune_config (fa_kernel_config_autotune_filter() in C)."""
    if not c.async_copy and c.eager_load_blocks:
        return False
    if c.Q_tiles != c.K_tiles and c.Q_tiles != 0:
        return False
    if c.B_r == 64:
        if c.n_warps == 8:
            return False
        if c.B_c == 32 and c.Q_tiles == 0:
            return False
        if c.B_c == 64 and c.Q_tiles != 0:
            return False
    if c.B_r == 128 and c.Q_tiles == 0:
        return False
    return True


def autotune_configs(dtype, d_head):
    space = itertools.product([d_head], [64, 128], [32, 64], [4], [True], [True],
                              [True], [0, 2], [0, 2], [0, 2], [False, True], [False, True])
    return [c for c in (KernelConfig(dtype, *p) for p in space) if should_autotune(c)]


def progression_configs(dtype, d_head, all_block_sizes=False):
    """The seed's seven blog steps at (B_r, B_c, n_warps) = (64, 64, 4); with all_block_sizes, each
    step at every (B_r, B_c, n_warps) in {128, 64} x {128, 64, 32} x {4, 8} without B_r = 64 at 8
    warps or B_r < B_c (the seed's get_kernel_progression_configs(all_block_sizes=True))."""
    steps = [  # async, eager, swizzled, Q, K, V, buffer, opt_softmax
        (True, False, False, 0, 0, 0, False, False),
        (True, False, True, 0, 0, 0, False, False),
        (True, True, True, 0, 0, 0, False, False),
        (True, True, True, 2, 2, 2, False, False),
        (True, True, True, 2, 2, 2, True, False),
        (True, True, True, 2, 2, 2, True, True),
        (True, True, True, 0, 2, 2, False, True),
    ]
    shapes = [(64, 64, 4)]
    if all_block_sizes:
        shapes = [(r, c, w) for r, c, w in itertools.product([128, 64], [128, 64, 32], [4, 8])
                  if not (r < 128 and w == 8) and r >= c]
    return [KernelConfig(dtype, d_head, r, c, w, *s) for r, c, w in shapes for s in steps]


def parse_short_name(text):
    """The inverse of KernelConfig.short_name (fa_kernel_config_parse() in C): the family whose
    tag the name carries, else the untagged one, reads the knob tokens."""
    head, feats = text.strip().split("): ")
    dtype, d, b_r, b_c, warps = [x.strip() for x in head.lstrip("(").split(",")]
    tokens = feats.split("+")
    family = next((f for f in FAMILIES if f.tag in tokens), None) or \
        next(f for f in FAMILIES if f.tag is None)
    return family.parse(tokens, KernelConfig({"FP16": 1, "BF16": 2, "E4M3": 4}[dtype.upper()], int(d),
                                             int(b_r), int(b_c), int(warps), False, False, False,
                                             0, 0, 0, False, False, family.id))


def read_choice_table(path):
    """Rows of a heuristic_sm*.txt: ('pick', 'fallback' or 'pad', d, dv, causal, max_seqlen,
    config) and ('candidate', d, dv, causal, None, config), the head dims written `d` (dv = d) or
    `d:dv` (pad rows: `d` only); configs carry BF16 as a placeholder dtype."""
    rows = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields, name = line.split(" | ")
        fields = fields.split()
        config = parse_short_name("(BF16, " + name)
        d, _, dv = fields[1].partition(":")
        d, dv = int(d), int(dv or d)
        if fields[0] == "pad" and dv != d:
            raise ValueError(f"{path}: a pad row names one head dim, not '{fields[1]}'")
        if fields[0] in ("pick", "fallback", "pad"):
            rows.append((fields[0], d, dv, int(fields[2]), int(fields[3]), config))
        elif fields[0] == "candidate":
            rows.append(("candidate", d, dv, int(fields[2]), None, config))
        else:
            raise ValueError(f"{path}: unknown row kind '{fields[0]}'")
    return rows


def with_dtype(config, dtype):
    return dataclasses.replace(config, dtype=dtype)


def decode_configs(dtype, d_head):
    """Kernels for few query rows against many keys (decode, split-KV): the smallest query tile
    (B_r = 64, the least MMA work on padding rows) with 64- or 128-key blocks. The 128-key block
    needs (64 + 2 * 128) * d * 2 bytes of shared memory: 80 KiB at d = 128, two blocks per SM;
    at d = 192 and 256 it would leave one, so those head dims take 64-key blocks only."""
    fixed = (4, True, True, True)
    configs = [KernelConfig(dtype, d_head, 64, 64, *fixed, 0, 0, 0, False, False)]
    if d_head <= 128:
        configs.append(KernelConfig(dtype, d_head, 64, 128, *fixed, 2, 2, 2, False, False))
    return configs


def decode_tile(c):
    """A kernel the mma.sync family ranks for decode (src/cuda/sm80/family.cpp's decode_rank:
    64 query rows on 4 warps), which the choice runs on every arch, Hopper included."""
    return c.family == 0 and c.B_r == 64 and c.n_warps == 4


def off_sm90(c, sm90, mma_sync_sm90):
    """Whether `c` gets no sm_90 code: with the Hopper family built (--sm90) and
    --mma-sync-sm90 decode, the mma.sync family's prefill tiles. On sm_90 the choice runs them
    only through the table's fallback rows, for problems the Hopper family refuses (a stride of
    2^39 elements or more, 2^31 - 1 pages; family.cpp), where the largest decode tile runs instead;
    their sm_90 code was 30-37% of the family's sm_90 compile (one file per tile, a 2-core
    machine: 13.6-16.7 s of 45.2-51.4 per bf16 head dim)."""
    return sm90 and mma_sync_sm90 == "decode" and c.family == 0 and not decode_tile(c)


def sm90_configs(dtype, d_head):
    """The Hopper family's base tiles, which the tuning set varies (the default build has the
    sm90 kernels the choice table names): two consumer warpgroups (B_r = 128; registers split
    40 / 232 up to d 192 and 24 / 240, FA3's, at d 256: src/cuda/sm90/tile.cuh) with the most
    keys per stage that keep the S, P and O
    accumulators in registers and two K/V stages in shared memory (d 64 and 128: 128 keys; d 192:
    112 keys, 217 KiB, FA3's tile; d 256: 64 keys, 193 KiB), and a three-stage pipeline where it
    fits (d 64 and 128)."""
    b_c = {192: 112, 256: 64}.get(d_head, 128)
    configs = [KernelConfig(dtype, d_head, 128, b_c, 12, False, False, False, 0, 0, 0, False,
                            False, 1, 2)]
    if d_head <= 128:
        configs.append(dataclasses.replace(configs[0], stages=3))
    return configs


def fp8_kv_configs(dtype, d_head):
    """The sm90 tile that reads e4m3 K/V caches (rules::fp8_kv_tile, src/cuda/sm90/config.hpp:
    two stages, overlap; 128 x 128 persistent at d 64 and 128, 128 x 64 one tile per block at
    d 256), built whatever the choice table names: against an e4m3 cache the choice skips the
    table's fallback rows and runs the largest runnable tile, which on Hopper must be this one
    (0.63-0.94x the 16-bit cache's speed, where the mma.sync e4m3 decode tile ran chunked
    prefill at 0.34-0.37x; at d 256 that tile took 5.0-5.2x the 16-bit cache's time). A table
    re-derived from a 16-bit sweep need not name it (at d 64 the one of 2026-11-25 does not; at
    d 256 the table's causal pick up to 4k is this tile)."""
    if d_head == 256:
        return [dataclasses.replace(sm90_configs(dtype, d_head)[0], overlap=True)]
    if d_head > 128:
        return []
    return [dataclasses.replace(sm90_configs(dtype, d_head)[0], overlap=True, persistent=True)]


def fp8_prefill_configs(d_head):
    """The sm90 family's FP8 kernels per head dim (e4m3 Q, K and V; rules::e4m3_ok in
    src/cuda/sm90/config.hpp: two consumer warpgroups at d 128 and 256), built whenever the build's
    dtypes name e4m3 in the default, all and sm90 sets (the others are the seed's 16-bit lists):
    the persistent two-stage overlapped tile with 128 keys per block at d 128 and 64 at d 256,
    whose producer transposes V where it is not transposed ahead of the run, and the same tile
    with 192 and 128 keys, whose producer only copies V's images (e4m3_images_only): the choice
    takes the larger where the images pay and the run brings their workspace (choice.cpp), else
    the smaller. On the FA-paper grid (H200, docs/performance.md) the copying tiles ran 1.03-1.14x
    at d 128 (2k-16k non-causal, 8k-16k causal) and 1.02-1.17x at d 256; of the 24 tuning
    candidates of the transposing tiles (fp8_tuning_configs) swept earlier none ran more than 1%
    above them on the geometric mean."""
    if d_head not in (128, 256):
        return []
    base = KernelConfig(E4M3, d_head, 128, 128 if d_head == 128 else 64, 12, False, False, False,
                        0, 0, 0, False, False, 1, 2, True, False, True)
    return [base, dataclasses.replace(base, B_c=192 if d_head == 128 else 128)]


def fp8_tuning_configs(d_head):
    """Candidates for a tuning sweep of the FP8 kernels (FA_KERNEL_SET=sm90 with e4m3): the
    default tiles, overlapped (as every 16-bit pick is), with every combination of ping-pong and
    persistent at two and three stages (d 256's 128-key tile at two: three take 233584 bytes),
    and blocks of 64 keys too."""
    configs = []
    for base in fp8_prefill_configs(d_head):
        for b_c in {base.B_c, 64}:
            for stages, pp, pe in itertools.product([2, 3], [False, True], [False, True]):
                if stages == 3 and d_head == 256 and b_c == 128:
                    continue
                configs.append(dataclasses.replace(base, B_c=b_c, stages=stages, pingpong=pp,
                                                   persistent=pe))
    return sorted(set(configs))


def sm90_tuning_configs(dtype, d_head):
    """Candidates for a tuning sweep (FA_KERNEL_SET=sm90): sm90_configs' tiles with every
    combination of overlap, ping-pong and persistent scheduling at two stages, the knobs all on
    and all off at three stages, and wider tiles (FA3's among them: d 64 with three consumer
    warpgroups, 192 query rows; d 128 with 176 keys (192 take more registers than a tile may:
    src/cuda/sm90/config.hpp's accumulator_limit); d 192 with 96, freeing registers, and with
    128, V then held in 128 columns for value head dims up to 128; d 256 with 80) with overlap: alone, persistent, ping-pong, and persistent with ping-pong (ping-pong only
    with two consumer warpgroups, so not for the 192-row d 64 tile)."""
    base = sm90_configs(dtype, d_head)[0]
    configs = [dataclasses.replace(base, overlap=o, pingpong=pp, persistent=pe)
               for o, pp, pe in itertools.product([False, True], repeat=3)]
    if d_head <= 128:
        configs += [dataclasses.replace(base, stages=3),
                    dataclasses.replace(base, stages=3, overlap=True, pingpong=True,
                                        persistent=True)]
    wide = {64: [dict(B_r=192, n_warps=16), dict(B_c=176)],
            128: [dict(B_c=176)],  # 192 keys: over config.hpp's accumulator_limit
            192: [dict(B_c=96), dict(B_c=128)],  # 128 keys: V in 128 columns (192 / 128)
            256: [dict(B_c=80)]}[d_head]
    for tile in wide:
        for knobs in (dict(), dict(persistent=True), dict(pingpong=True),
                      dict(pingpong=True, persistent=True)):
            c = dataclasses.replace(base, overlap=True, **tile, **knobs)
            if not (c.pingpong and c.n_warps != 12):
                configs.append(c)
    return configs


def parse_narrow(text):
    """FA_NARROW_HEAD_DIMS ("80;192:128;...") -> sorted set of (qk_cols, v_cols): an entry D runs
    S = Q K^T over D rounded up to 16 columns and O += P V over D; D:DV over D and DV."""
    pairs = set()
    for entry in filter(None, text.split(";")):
        parts = entry.split(":")
        ok = 1 <= len(parts) <= 2 and all(p.isdigit() for p in parts)
        d = int(parts[0]) if ok else 0
        dv = int(parts[-1]) if ok else 0
        if not ok or not (8 <= dv <= d <= 256) or d % 8 or dv % 8:
            raise ValueError(f"bad narrow head dim '{entry}' (expected D or D:DV, multiples of 8, "
                             "DV <= D <= 256)")
        pairs.add(((d + 15) // 16 * 16, dv))
    return sorted(pairs)


def narrow_pairs(pairs, head_dims):
    """{built head dim: [(qk_cols, v_cols), ...]}: each pair on the smallest built head dim that
    holds it (none above it: dropped; the head dim's own dims: the pair at the kernel's width), in
    ascending order of work (narrow.hpp's Narrow picks the first that fits)."""
    by_dim = {}
    for qk, dv in pairs:
        above = [d for d in sorted(head_dims) if d >= qk]
        if above:
            by_dim.setdefault(above[0], []).append((qk, dv))
    for d, members in by_dim.items():
        members.sort(key=lambda p: (p[0] + p[1], p[0]))
        if len(members) > MAX_NARROW_PAIRS:
            raise ValueError(f"{len(members)} narrow head dims on head dim {d}: at most "
                             f"{MAX_NARROW_PAIRS} ({members})")
    return by_dim


def kernel_pairs(c, by_dim, tables):
    """The narrow pairs of kernel c (of by_dim's for its head dim d): every one where the tables
    lack pad rows for d at a mask their d rows have (the choice then takes d's picks for such a
    padded problem: heuristic.cpp, per head dims and mask); else on the pad rows' kernels all,
    elsewhere those whose problems the tables send to no rows of d (a build without a smaller
    table dim: its dims' pairs land on d, and the choice runs them on d's largest tile, any
    kernel), and those of the value head dims the kernel's own rows of d serve (192:128 on the
    d 192 kernels named in "192:128" rows). A pair is one more instantiation of a kernel."""
    pairs = by_dim.get(c.d_head, [])
    rows = [row for table in tables.values() for row in table]
    key = with_dtype(c, DTYPE_CODES["bf16"])
    pad = {row[5] for row in rows if row[0] == "pad" and row[1] == c.d_head}
    masks = {(arch, row[3]) for arch, table in tables.items() for row in table
             if row[0] == "pick" and row[1] == row[2] == c.d_head}
    pad_masks = {(arch, row[3]) for arch, table in tables.items() for row in table
                 if row[0] == "pad" and row[1] == c.d_head}
    if not pad or key in pad or not masks <= pad_masks:
        return pairs
    pick_dims = sorted({row[1] for row in rows if row[0] == "pick"})
    value_dims = {row[2] for row in rows if row[0] in ("pick", "candidate") and
                  row[1] == c.d_head and row[2] != row[1] and row[5] == key}
    return [(qk, dv) for qk, dv in pairs
            if next((t for t in pick_dims if t >= qk), None) != c.d_head or dv in value_dims]


def sm90_code(c):
    """The config whose tile c's narrow pairs compile as (src/cuda/sm90/config.hpp's
    pairs_persistent): a 16-bit sm90 config below d 192, its persistent twin's."""
    if c.family == 1 and not c.persistent and c.dtype != E4M3 and c.d_head < 192:
        return dataclasses.replace(c, persistent=True)
    return c


def file_parts(members, per_file):
    """members in the fewest files of at most per_file kernels, their sizes as even as can be,
    the configs of one code (sm90_code) together (a file may then hold one more)."""
    units = {}
    for c in members:
        units.setdefault(sm90_code(c), []).append(c)
    files = -(-len(members) // per_file)
    parts, part, placed = [], [], 0
    for unit in units.values():
        # Part k ends at k / files of the kernels: a unit whose middle lies past that boundary
        # starts the next part.
        if part and (2 * placed + len(unit)) * files > 2 * (len(parts) + 1) * len(members):
            parts.append(part)
            part = []
        part += unit
        placed += len(unit)
    return parts + ([part] if part else [])


def sm90_registration(c, pairs_of):
    """register_kernel's template arguments after the config: the 16-bit kernels' narrow pairs."""
    pairs = pairs_of(c) if c.dtype != E4M3 else []
    if not pairs:
        return ""
    dims = ", ".join(f"{{{qk}, {dv}}}" for qk, dv in pairs)
    return f", sm90::NarrowList{{{len(pairs)}, {{{dims}}}}}"


def select(kernel_set, dtypes, head_dims, tables, sm90, built):
    configs = set()
    if E4M3 in dtypes:
        if sm90 and kernel_set in ("default", "all", "sm90"):
            for d in head_dims:
                configs.update(fp8_prefill_configs(d))
                if kernel_set in ("all", "sm90"):
                    configs.update(fp8_tuning_configs(d))
        dtypes = [t for t in dtypes if t != E4M3]
    if kernel_set in ("default", "all", "sm90"):
        for rows in tables.values():
            for _, d, _, _, _, config in rows:
                if d in head_dims:
                    configs.update(with_dtype(config, dtype) for dtype in dtypes)
        for dtype, d in itertools.product(dtypes, head_dims):
            configs.update(decode_configs(dtype, d))
            configs.update(fp8_kv_configs(dtype, d))
    # A choice table may name kernels of a family the build leaves out (sm90 without sm_90a).
    configs = {c for c in configs if c.family in {f.id for f in built}}
    for dtype, d in itertools.product(dtypes, head_dims):
        if kernel_set in ("all", "sm90") and sm90:
            configs.update(sm90_tuning_configs(dtype, d))
        if kernel_set in ("seed", "autotune", "all"):
            configs.update(autotune_configs(dtype, d))
        if kernel_set in ("seed", "progression", "all"):
            configs.update(progression_configs(dtype, d))
        if kernel_set == "sweep":  # everything the seed ever named, for tuning runs
            configs.update(autotune_configs(dtype, d))
            configs.update(progression_configs(dtype, d, all_block_sizes=True))
    # Configs that would compile to another's code are registered once, as the canonical one.
    return sorted({canonical(c) for c in configs})


BANNER = "// Generated by tools/generate_kernels.py; do not edit.\n"


def write_if_changed(path, text):
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    with open(path, "w") as f:
        f.write(text)


@dataclasses.dataclass(frozen=True)
class KernelFamily:
    """A kernel family: the folder src/cuda/<folder>/ and the namespace fa::cuda::<folder>, which
    hold its kernels (launch.cuh defines register_kernel<C>), its config rules and names (kId and
    kConfig in config.hpp, the answers to src/core/family_config.hpp, host only), its rules for
    problems (kFamily, the answers to src/cuda/family.hpp) and its host sources (*.cpp)."""
    id: int         # KernelConfig::family (fa_kernel_config.family)
    folder: str
    arch: str       # the generated files' stem: fa_fwd_<arch>_...
    own_arch: str   # the one arch its code compiles for, apart from the build's list ("" if none)
    tag: object     # the token naming it in a kernel name, or None (mma.sync: the seed's names);
                    # its config.cpp's FamilyConfig::tag
    tokens: object  # config -> its knobs' tokens in the name (the family's config.cpp)
    parse: object   # (tokens, config of the name's head) -> the config with the family's knobs
    canonical: object  # config -> the config registered in its place (the family's config.hpp)
    registration: object = lambda c, pairs_of: ""  # (config, config -> its narrow pairs) ->
                                                    # register_kernel's arguments after the config


# The families, in KernelConfig::family order: the one place a family is registered.
FAMILIES = (KernelFamily(0, "sm80", "sm80", "", None, sm80_tokens, sm80_parse, sm80_canonical),
            KernelFamily(1, "sm90", "sm90a", "90a", "sm90", sm90_tokens, sm90_parse,
                         lambda c: c, sm90_registration))
SRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def main():
    if sum(f.tag is None for f in FAMILIES) != 1:  # kernel_config.cpp's untagged_family()
        sys.exit("generate_kernels.py: FAMILIES needs exactly one family without a tag, whose "
                 "name form also names configs of unknown families")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtypes", default="fp16;bf16;e4m3",
                    help="';'-separated: fp16, bf16, e4m3 (the sm90 family's FP8 kernels)")
    ap.add_argument("--head-dims", default="128", help="';'-separated: 64, 128, 192, 256")
    ap.add_argument("--narrow-head-dims", default=DEFAULT_NARROW_HEAD_DIMS,
                    help="';'-separated D or D:DV: the sm90 family's narrow pairs (FA_NARROW_HEAD_DIMS)")
    ap.add_argument("--kernel-set", default="default", choices=KERNEL_SETS)
    ap.add_argument("--choice-tables", default="",
                    help="';'-separated heuristic_sm<arch>.txt files (the measured choice tables)")
    ap.add_argument("--per-file", type=int, default=8, help="kernels per generated .cu file")
    ap.add_argument("--sm90", action="store_true",
                    help="include the Hopper family (the build compiles sm_90a)")
    ap.add_argument("--archs", default="",
                    help="';'-separated compute capabilities the build compiles (90a as 90)")
    ap.add_argument("--mma-sync-sm90", default="decode", choices=("decode", "all"),
                    help="with --sm90, the mma.sync kernels compiled for sm_90: its decode tiles "
                         "(the others for the build's other archs only, in sources_sm80_no90.txt) "
                         "or all")
    args = ap.parse_args()

    dtypes = []
    for name in filter(None, args.dtypes.split(";")):
        if name not in DTYPE_CODES:
            sys.exit(f"generate_kernels.py: unknown dtype '{name}' (expected fp16, bf16 or e4m3)")
        dtypes.append(DTYPE_CODES[name])
    head_dims = []
    for text in filter(None, args.head_dims.split(";")):
        if not text.isdigit() or int(text) not in SUPPORTED_HEAD_DIMS:
            sys.exit(f"generate_kernels.py: unsupported head dim '{text}' "
                     f"(expected one of {SUPPORTED_HEAD_DIMS})")
        head_dims.append(int(text))
    # The pairs are the sm90 family's (builds without it check the list, place nothing).
    try:
        pairs = parse_narrow(args.narrow_head_dims)
        by_dim = narrow_pairs(pairs, head_dims) if args.sm90 else {}
    except ValueError as e:
        sys.exit(f"generate_kernels.py: {e}")
    if args.per_file < 1:
        sys.exit("generate_kernels.py: --per-file must be >= 1")

    tables = {}
    for path in filter(None, args.choice_tables.split(";")):
        arch = os.path.basename(path).removeprefix("heuristic_sm").removesuffix(".txt")
        if not arch.isdigit():
            sys.exit(f"generate_kernels.py: cannot read the arch from '{path}'")
        tables[int(arch)] = read_choice_table(path)
    # A family with an arch of its own is built where the build compiles that arch (--sm90: 90a).
    built = [f for f in FAMILIES if not f.own_arch or (f.own_arch == "90a" and args.sm90)]
    configs = select(args.kernel_set, dtypes, head_dims, tables, args.sm90, built)
    archs = [int(a) for a in filter(None, args.archs.split(";"))]
    # Without --archs (a tool that lists or compiles kernels), every tile is every arch's.
    no90 = lambda c: bool(archs) and off_sm90(c, args.sm90, args.mma_sync_sm90)  # noqa: E731
    # A build of sm_90 alone leaves such tiles out: no arch would compile them.
    left_out = bool(archs) and not any(a != 90 for a in archs) and any(no90(c) for c in configs)
    if left_out:
        configs = [c for c in configs if not no90(c)]
    pairs_of = lambda c: kernel_pairs(c, by_dim, tables)  # noqa: E731
    os.makedirs(args.out, exist_ok=True)

    # A head dim's dtypes share files: each file costs 2.6-3.7 s of headers and host code on one
    # core of CI's machine whatever it holds (an empty one: nvcc, bare, 2.0 s), so fewer, fuller
    # files build faster where cores are few (CMake's FA_KERNELS_PER_FILE default).
    groups = {}
    for c in configs:
        groups.setdefault((c.family, no90(c), c.d_head), []).append(c)
    sources, functions, no90_sources = {f.id: [] for f in built}, [], []
    for (family_id, skips_90, d), members in sorted(groups.items()):
        family = FAMILIES[family_id]
        # The fewest files of at most --per-file kernels, their sizes as even as can be; configs
        # of one code (sm90_code) in one file, where their shared pairs compile once.
        for part, chunk in enumerate(file_parts(members, args.per_file)):
            stem = f"fa_fwd_{family.arch}{'no90' if skips_90 else ''}_hd{d}_{part}"
            fn = f"register_{stem}"
            body = "".join(f"  // {c.short_name()}\n  {family.folder}::register_kernel<{c.cpp()}"
                           f"{family.registration(c, pairs_of)}>(registry);\n"
                           for c in chunk)
            text = (BANNER + f'#include "cuda/{family.folder}/launch.cuh"\n\nnamespace fa::cuda {{\n\n'
                    f"void {fn}(Registry& registry) {{\n{body}}}\n\n}}  // namespace fa::cuda\n")
            path = os.path.join(args.out, stem + ".cu")
            write_if_changed(path, text)
            (no90_sources if skips_90 else sources[family_id]).append(path)
            functions.append(fn)

    decls = "".join(f"void {fn}(Registry& registry);\n" for fn in functions)
    calls = "".join(f"  {fn}(registry);\n" for fn in functions)
    write_if_changed(os.path.join(args.out, "registry_generated.cpp"),
                     BANNER + '#include "cuda/kernel_entry.hpp"\n\nnamespace fa::cuda {\n\n' + decls +
                     "\nvoid register_generated_kernels(Registry& registry) {\n" +
                     ("  (void)registry;\n" if not calls else calls) +
                     "}\n\n}  // namespace fa::cuda\n")
    picks, candidates = [], []
    for arch, rows in sorted(tables.items()):
        for kind, d, dv, causal, max_seqlen, config in rows:
            if kind in ("pick", "fallback", "pad"):
                picks.append(f"    {{{arch}, {d}, {dv}, {'true' if causal else 'false'}, "
                             f"{max_seqlen}, {config.cpp()}, "
                             f"{'true' if kind == 'fallback' else 'false'}, "
                             f"{'true' if kind == 'pad' else 'false'}}},\n")
            else:
                candidates.append(f"    {{{arch}, {d}, {dv}, {'true' if causal else 'false'}, "
                                  f"{config.cpp()}}},\n")
    write_if_changed(os.path.join(args.out, "heuristic_generated.cpp"),
                     BANNER + '#include "cuda/heuristic.hpp"\n\nnamespace fa::cuda {\n\n'
                     "// From the measured choice tables (src/cuda/heuristic_sm*.txt); the dtype of\n"
                     "// each config is a placeholder, replaced by the problem's.\n"
                     "std::span<ChoicePick const> choice_picks() {\n"
                     "  static constexpr ChoicePick kPicks[] = {\n" + "".join(picks) +
                     "      {0, 0, 0, false, 0, KernelConfig{}, false, false}};\n"
                     "  return {kPicks, std::size(kPicks) - 1};\n}\n\n"
                     "std::span<ChoiceCandidate const> choice_candidates() {\n"
                     "  static constexpr ChoiceCandidate kCandidates[] = {\n" + "".join(candidates) +
                     "      {0, 0, 0, false, KernelConfig{}}};\n"
                     "  return {kCandidates, std::size(kCandidates) - 1};\n}\n\n"
                     "}  // namespace fa::cuda\n")
    write_if_changed(os.path.join(args.out, "kernels.txt"),
                     "".join(c.short_name() + "\n" for c in configs))
    write_if_changed(os.path.join(args.out, "families_generated.cpp"),
                     BANNER + '#include "cuda/family.hpp"\n' +
                     "".join(f'#include "cuda/{f.folder}/family.hpp"\n' for f in built) +
                     "\nnamespace fa::cuda {\n\nKernelFamily const* find_family(int32_t family) {\n"
                     "  switch (family) {\n" +
                     "".join(f"    case {f.id}: return &{f.folder}::kFamily;\n" for f in built) +
                     "  }\n  return nullptr;\n}\n\n}  // namespace fa::cuda\n")
    write_if_changed(os.path.join(args.out, "family_configs_generated.cpp"),
                     BANNER + '#include "core/family_config.hpp"\n' +
                     "".join(f'#include "cuda/{f.folder}/config.hpp"\n' for f in FAMILIES) +
                     "\nnamespace fa {\n\n" +
                     "".join(f'static_assert(cuda::{f.folder}::kId == {f.id}, '
                             f'"tools/generate_kernels.py FAMILIES and {f.folder}/config.hpp agree");\n'
                             for f in FAMILIES) +
                     "\nstd::span<FamilyConfig const* const> family_configs() {\n"
                     "  static constexpr FamilyConfig const* kFamilies[] = {" +
                     ", ".join(f"&cuda::{f.folder}::kConfig" for f in FAMILIES) + "};\n"
                     "  return kFamilies;\n}\n\n}  // namespace fa\n")
    write_if_changed(os.path.join(args.out, "config_sources.txt"),
                     "".join(os.path.normpath(os.path.join(SRC_DIR, "cuda", f.folder, "config.cpp")) +
                             "\n" for f in FAMILIES))
    write_if_changed(os.path.join(args.out, "families.txt"),
                     "".join(f"{f.folder} {f.own_arch or '-'}\n" for f in built))
    # Whether the mma.sync prefill tiles (off_sm90's) are in the build, for the tests' CMake:
    # the choice table's rows that name them expect them registered only then.
    write_if_changed(os.path.join(args.out, "mma_sync_prefill.txt"), "OFF\n" if left_out else "ON\n")
    # The mma.sync files without sm_90 code (off_sm90): CMake compiles them for the other archs.
    write_if_changed(os.path.join(args.out, "sources_sm80_no90.txt"),
                     "".join(path + "\n" for path in no90_sources))
    for f in built:
        folder = os.path.join(SRC_DIR, "cuda", f.folder)
        host = sorted(os.path.normpath(os.path.join(folder, name)) for name in os.listdir(folder)
                      if name.endswith(".cpp") and name != "config.cpp")
        write_if_changed(os.path.join(args.out, f"sources_{f.folder}.txt"),
                         "".join(path + "\n" for path in sources[f.id] + host))


if __name__ == "__main__":
    main()
