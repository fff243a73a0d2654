"""Ring attention over N GPUs with PyTorch's torch.distributed (NCCL backend) and flashattn:
the same schedule as ring_attention.cpp (ring_schedule.py), one process per GPU.

    torchrun --nproc-per-node 2 examples/context_parallel/ring_attention.py --seqlen-per-rank 65536

Each rank holds its shard of Q, K and V (zigzag by default: two mirrored chunks, so causal work
is balanced); the held K/V shard goes to rank + 1 by batch_isend_irecv issued on a communication
stream while the attention of the held shard runs on the compute stream (two buffers, events
between the streams); flashattn.forward(..., return_lse=True) computes each partial result
(tensors pass by DLPack / __cuda_array_interface__, on the current stream) and
flashattn.merge_states combines them. Each rank then checks its rows against single-GPU
attention of the whole sequence and prints the times.

torch is imported in main() only, so the schedule and this file import without it.
"""
import argparse
import functools
import os

import ring_schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seqlen-per-rank", type=int, default=65536)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads-q", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", type=int, choices=(0, 1), default=1)
    p.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--check", type=int, choices=(0, 1), default=1)
    return p.parse_args()


def _report_worst(torch, s, rank, args, q_full, k_full, v_full, result, want, ratio, top,
                          cat):
    """Prints the three elements furthest outside the bound beside their float64 value, so a
    failure says which side (the ring or the single call) is off."""
    d = args.head_dim
    pos = ring_schedule.shard(s, rank, torch.arange(s.seqlen, device=o.device).view(1, -1),
                              cat)[0]
    _, n, hq, _ = o.shape
    for flat in ratio.flatten().topk(3).indices.tolist():
        bi, rest = divmod(flat, n * hq * d)
        r, rest = divmod(rest, hq * d)
        h, c = divmod(rest, d)
        g, kh = int(pos[r]), h // (hq // args.heads_kv)
        keys = g + 1 if args.causal else s.seqlen
        scores = k_full[bi, :keys, kh].double() @ q_full[bi, g, h].double() / d**0.5
        exact = torch.softmax(scores, 0) @ v_full[bi, :keys, kh, c].double()
        print(f"  batch {bi} row {g} head {h} column {c}: ring {o[bi, r, h, c].item():.6g}, "
              f"single {want[bi, r, h, c].item():.6g}, float64 {exact.item():.6g}, row's "
              f"largest |O| {top[bi, r, 0, 0].item():.3g} ({ratio[bi, r, h, c].item():.2f} x "
              f"the bound)", flush=True)


def main():
    import torch
    import torch.distributed as dist

    import flashattn

    args = parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    s = ring_schedule.Schedule(args.seqlen_per_rank * world, world, args.layout,
                               bool(args.causal))
    b, hq, hkv, d = args.batch, args.heads_q, args.heads_kv, args.head_dim

    # The whole inputs, the same on every rank (one seed), for the single-GPU check.
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(heads):
        return torch.empty(b, s.seqlen, heads, d, device="cuda", dtype=torch.bfloat16).uniform_(
            -1, 1, generator=gen)

    q_full, k_full, v_full = rand(hq), rand(hkv), rand(hkv)
    cat = functools.partial(torch.cat, dim=1)
    q = ring_schedule.shard(s, rank, q_full, cat).contiguous()
    own_k = ring_schedule.shard(s, rank, k_full, cat).contiguous()
    own_v = ring_schedule.shard(s, rank, v_full, cat).contiguous()
    o, o_scratch = torch.empty_like(q), torch.empty_like(q)

    # Flat K/V buffers of the longest shard: a shard of n rows is their first b * n * hkv * d
    # elements, one contiguous message for NCCL.
    cap = b * s.max_shard_length() * hkv * d
    kbuf = [torch.empty(cap, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    vbuf = [torch.empty(cap, device="cuda", dtype=torch.bfloat16) for _ in range(2)]

    def view(buf, origin):
        n = s.shard_length(origin)
        return buf[:b * n * hkv * d].view(b, n, hkv, d)

    compute, comm = torch.cuda.Stream(), torch.cuda.Stream()
    start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def ring_pass(transfer, compute_on):
        """One pass of the ring: with `transfer` the held shard goes on each step, with
        `compute_on` each step's attention runs. Both is the ring; either alone times that part
        by itself (compute alone reads stale buffers, transfers alone move shards nobody reads).
        Returns the pass's time in ms."""
        lse = [None] * len(s.chunks(rank))
        with torch.cuda.stream(compute):  # the own shard into the first buffer, not timed
            view(kbuf[0], rank).copy_(own_k)
            view(vbuf[0], rank).copy_(own_v)
            start.record()
        received = [compute.record_event(), compute.record_event()]
        computed = [None, compute.record_event()]  # buffer 1 is free before step 0
        cur = 0
        for t in range(world):
            if transfer and t + 1 < world:
                with torch.cuda.stream(comm):
                    comm.wait_event(received[cur])
                    comm.wait_event(computed[cur ^ 1])
                    held, incoming = s.kv_origin(rank, t), s.kv_origin(rank, t + 1)
                    ops = [dist.P2POp(dist.isend, view(kbuf[cur], held), nxt),
                           dist.P2POp(dist.isend, view(vbuf[cur], held), nxt),
                           dist.P2POp(dist.irecv, view(kbuf[cur ^ 1], incoming), prv),
                           dist.P2POp(dist.irecv, view(vbuf[cur ^ 1], incoming), prv)]
                    for req in dist.batch_isend_irecv(ops):
                        req.wait()  # makes the comm stream wait for NCCL's
                    received[cur ^ 1] = comm.record_event()
            with torch.cuda.stream(compute):
                compute.wait_event(received[cur])
                if compute_on:
                    origin = s.kv_origin(rank, t)
                    ring_schedule.run_step(s, rank, t, q, view(kbuf[cur], origin),
                                           view(vbuf[cur], origin), o, o_scratch, lse,
                                           flashattn.forward, flashattn.merge_states)
                computed[cur] = compute.record_event()
            cur ^= 1
        with torch.cuda.stream(compute):
            stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop)

    def mean_ms(transfer, compute_on):
        # One warm-up pass (plans, NCCL connections), then --iters; every rank runs the same
        # passes in the same order, so the transfers always find their peers.
        ring_pass(transfer, compute_on)
        return sum(ring_pass(transfer, compute_on) for _ in range(args.iters)) / args.iters

    ring_ms = mean_ms(True, True)
    result = o.clone()  # the ring's result, kept from the passes below
    compute_ms = mean_ms(False, True)
    transfer_ms = mean_ms(True, False) if world > 1 else 0.0
    moved = sum(2 * view(kbuf[0], s.kv_origin(rank, t)).nbytes for t in range(world - 1))
    # Where the transfers hide behind the compute the ring takes compute alone's time; the rest
    # of its excess is the wait for the slowest rank (each step needs the previous rank's shard).
    print(f"rank {rank}/{world}: {s.shard_length(rank)} rows ({args.layout}, "
          f"{'causal' if args.causal else 'full'}), ring {ring_ms:.3f} ms; alone: compute "
          f"{compute_ms:.3f} ms, transfers {transfer_ms:.3f} ms "
          f"({moved / transfer_ms * 1e-6 if transfer_ms else 0:.1f} GB/s sent); the ring takes "
          f"{ring_ms / compute_ms:.3f}x compute alone ({ring_ms - compute_ms:+.3f} ms)",
          flush=True)

    failed = False
    if args.check:
        # One warm-up call, then --iters calls back to back between two events.
        single = flashattn.forward(q_full, k_full, v_full, causal=bool(args.causal))
        start.record()
        for _ in range(args.iters):
            single = flashattn.forward(q_full, k_full, v_full, causal=bool(args.causal))
        stop.record()
        torch.cuda.synchronize()
        single_ms = start.elapsed_time(stop) / args.iters
        want = ring_schedule.shard(s, rank, single, cat).float()
        err = (result.float() - want).abs()
        # ring_attention.cpp's bound (its comment says why): (N + 2) 2^-8 (|O| + the largest
        # |O| of the row's heads and head_dim).
        top = want.abs().amax(dim=(2, 3), keepdim=True)
        ratio = err / ((world + 2) * 2.0**-8 * (want.abs() + top))
        bad = int((~(ratio <= 1)).sum())
        print(f"rank {rank}/{world}: single GPU {single_ms:.3f} ms over {s.seqlen} rows (ring "
              f"speed-up {single_ms / ring_ms:.2f}x); max |ring - single| "
              f"{err.max().item():.3g}, the worst element at {ratio.max().item():.2f} of the "
              f"bf16 bound, {bad} of {err.numel()} outside it", flush=True)
        failed = bad != 0
        if failed:
            _report_worst(torch, s, rank, args, q_full, k_full, v_full, result, want, ratio, top,
                          cat)
    dist.destroy_process_group()
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
