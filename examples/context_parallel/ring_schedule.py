"""Ring attention's schedule, mirroring ring_schedule.hpp (read its header comment for the scheme),
and the one-process simulation of the ring on numpy arrays (the CPU backend) or any arrays
flashattn takes. ring_attention.py runs the same schedule over torch.distributed with NCCL.

Layouts: "contiguous" (N chunks, rank r holds chunk r) or "zigzag" (2N chunks, rank r holds
chunks r and 2N-1-r, so every rank does the same causal work). Chunk lengths differ by at most
one row. At step t rank r holds the K/V shard of rank (r - t) mod N.
"""
from dataclasses import dataclass
from typing import Callable, List, Tuple


@dataclass
class Work:
    """One attention call: rows [q_offset, q_offset + q_length) of the rank's Q shard (its local
    chunk q_chunk) against rows [kv_offset, kv_offset + kv_length) of the held K/V shard.
    first: no earlier call wrote this Q chunk (the result is the accumulator, not merged)."""
    q_chunk: int
    q_offset: int
    q_length: int
    kv_offset: int
    kv_length: int
    causal: bool
    first: bool = False


class Schedule:
    def __init__(self, seqlen: int, world: int, layout: str, causal: bool) -> None:
        if layout not in ("contiguous", "zigzag"):
            raise ValueError(f"layout must be 'contiguous' or 'zigzag', got {layout!r}")
        self.count = 2 * world if layout == "zigzag" else world
        if world < 1 or seqlen < self.count:
            raise ValueError(f"need world >= 1 and seqlen ({seqlen}) >= the chunk count "
                             f"({self.count})")
        self.seqlen, self.world, self.layout, self.causal = seqlen, world, layout, causal

    def global_chunk(self, c: int) -> Tuple[int, int]:
        """(begin, length) of global chunk c: the first seqlen % count chunks get a row more."""
        base, extra = divmod(self.seqlen, self.count)
        return c * base + min(c, extra), base + (1 if c < extra else 0)

    def chunks(self, rank: int) -> List[Tuple[int, int]]:
        """The chunks rank holds, in the order its shard stores them."""
        if self.layout == "contiguous":
            return [self.global_chunk(rank)]
        return [self.global_chunk(rank), self.global_chunk(2 * self.world - 1 - rank)]

    def shard_length(self, rank: int) -> int:
        return sum(length for _, length in self.chunks(rank))

    def max_shard_length(self) -> int:
        return max(self.shard_length(r) for r in range(self.world))

    def kv_origin(self, rank: int, step: int) -> int:
        return (rank - step) % self.world

    def _raw_work(self, rank: int, step: int) -> List[Work]:
        out: List[Work] = []
        q_offset = 0
        for i, (q_begin, q_length) in enumerate(self.chunks(rank)):
            kv_offset = 0
            for k_begin, k_length in self.chunks(self.kv_origin(rank, step)):
                before = k_begin + k_length <= q_begin
                same = k_begin == q_begin
                if not self.causal or before or same:
                    causal = self.causal and same
                    last = out[-1] if out else None
                    # Adjacent K/V chunks seen in full: one call (key order does not matter).
                    if (last is not None and last.q_chunk == i and not last.causal
                            and not causal and last.kv_offset + last.kv_length == kv_offset):
                        last.kv_length += k_length
                    else:
                        out.append(Work(i, q_offset, q_length, kv_offset, k_length, causal))
                kv_offset += k_length
            q_offset += q_length
        return out

    def work(self, rank: int, step: int) -> List[Work]:
        """The attention calls of rank at step, in the order they run."""
        written = {w.q_chunk for t in range(step) for w in self._raw_work(rank, t)}
        out = self._raw_work(rank, step)
        for w in out:
            w.first = w.q_chunk not in written
            written.add(w.q_chunk)
        return out


def shard(s: Schedule, rank: int, x, concat: Callable):
    """Rank's rows of x (batch, seqlen, heads, head_dim), its chunks joined along dim 1."""
    return concat([x[:, b:b + n] for b, n in s.chunks(rank)])


def run_step(s: Schedule, rank: int, step: int, q, k, v, o, o_scratch, lse: list, forward, merge,
             softmax_scale=None) -> None:
    """Rank's step: q its shard; o and o_scratch shard-shaped outputs (the accumulator and the
    unmerged result: a Q chunk's rows at the same offset in both, so that merge sees one set of
    strides, as fa_merge_states asks); k, v the held K/V shard; lse the list of its chunks'
    accumulated LSEs (an entry None until its chunk is first written)."""
    for w in s.work(rank, step):
        rows = slice(w.q_offset, w.q_offset + w.q_length)
        keys = slice(w.kv_offset, w.kv_offset + w.kv_length)
        target = o if w.first else o_scratch
        _, part_lse = forward(q[:, rows], k[:, keys], v[:, keys], causal=w.causal,
                              softmax_scale=softmax_scale, out=target[:, rows], return_lse=True)
        if w.first:
            lse[w.q_chunk] = part_lse
        else:
            merge(o[:, rows], lse[w.q_chunk], o_scratch[:, rows], part_lse,
                  out=(o[:, rows], lse[w.q_chunk]))


def simulate_ring(s: Schedule, q, k, v, forward, merge, concat, empty_like,
                  softmax_scale=None):
    """Every rank's steps in turn, each reading the K/V shard it would hold at that step.
    Returns (o, lse) of the whole sequence: o like q, lse (batch, heads_q, seqlen) as rows of the
    ranks' chunks put back in order."""
    n = s.world
    qs = [shard(s, r, q, concat) for r in range(n)]
    ks = [shard(s, r, k, concat) for r in range(n)]
    vs = [shard(s, r, v, concat) for r in range(n)]
    os_ = [empty_like(x) for x in qs]
    scratch = [empty_like(x) for x in qs]
    lses: List[list] = [[None] * len(s.chunks(r)) for r in range(n)]
    for t in range(n):
        for r in range(n):
            origin = s.kv_origin(r, t)
            run_step(s, r, t, qs[r], ks[origin], vs[origin], os_[r], scratch[r], lses[r],
                     forward, merge, softmax_scale)
    o = empty_like(q)
    pieces = []
    for r in range(n):
        local = 0
        for c, (begin, length) in enumerate(s.chunks(r)):
            o[:, begin:begin + length] = os_[r][:, local:local + length]
            pieces.append((begin, lses[r][c]))
            local += length
    pieces.sort(key=lambda p: p[0])
    lse = concat([piece.swapaxes(1, 2) for _, piece in pieces]).swapaxes(1, 2)
    return o, lse
