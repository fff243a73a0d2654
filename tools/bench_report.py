"""What the benchmark reports share (bench_compare.py, bench_serving.py, compare_families.py,
bench_decode.py): back-to-back timing windows, the geometric mean of ratios and the figures,
drawn only where matplotlib is installed."""
import math


def geomean(xs):
    """Geometric mean of the positive values of xs (missing points, NaN or 0, are left out);
    NaN when none is left."""
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def window_ms(torch, step, ms):
    """Mean time of one call of step(), over calls back to back between two CUDA events (torch)
    for >= ms milliseconds: the GPU never waits for the host, as in a serving loop."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 1
    while True:
        start.record()
        for _ in range(calls):
            step()
        stop.record()
        stop.synchronize()
        elapsed = start.elapsed_time(stop)
        if elapsed >= ms:
            return elapsed / calls
        calls = max(calls * 2, int(calls * ms / max(elapsed, 1e-3) * 1.1))


def stepper(call):
    """(step, first output) for a backend: step() runs call() and keeps its result (the first
    element of a tuple), so the output of the first call, made here, can be compared."""
    box = {}

    def step():
        r = call()
        box["out"] = r[0] if isinstance(r, tuple) else r
    step()
    return step, box["out"]


def profile_steps(torch, steps):
    """Each step once between cudaProfilerStart and cudaProfilerStop, after the GPU has finished
    what came before (the warm-up calls), so `ncu --profile-from-start off` captures those."""
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for step in steps:
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def time_backends(torch, found, point, label, window, repeats):
    """{name: median ms of one call} at one point. found maps each backend's name to a maker,
    make(*point) -> (step, output of a first call) (stepper); the first backend's output is the
    reference, and a later one that raises (a baseline refusing the point; NotImplementedError
    quietly) or differs from it by 0.05 or more (bf16 outputs of |o| < 1 are a few ulps apart)
    is not timed. Then one untimed window of `window` ms per backend (window_ms), and `repeats`
    timed ones, the backends taking turns window by window, each round starting one backend later
    than the round before, so a GPU slowed by a previous job (or by the point before: the clock
    after a long run at the power cap) does not slow the same backend in every round. With ours
    first in every round and no untimed window, d 256 causal 512 right after d 256's 16k
    non-causal point (H200, FA-paper grid, bf16, session 69) ran ours at 0.94x and FA4 at 0.71x
    their previous run's TFLOP/s, cuDNN at 1.00x."""
    import statistics
    import sys
    steps, reference = {}, None
    for name, make in found.items():
        try:
            step, out = make(*point)
            torch.cuda.synchronize()
        except Exception as e:
            if reference is None:
                raise
            if not isinstance(e, NotImplementedError):
                print(f"{name} {label}: {e}", file=sys.stderr)
            continue
        if reference is None:
            reference = out.float()
        else:
            diff = (out.float() - reference).abs().max().item()
            if not diff < 0.05:
                print(f"{name} differs from {next(iter(found))} by {diff} at {label}: not timed",
                      file=sys.stderr)
                continue
        steps[name] = step
    names = list(steps)
    for name in names:
        window_ms(torch, steps[name], window)
    times = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            times[name].append(window_ms(torch, steps[name], window))
    return {name: statistics.median(ts) for name, ts in times.items()}


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None without matplotlib (the tables
    are written either way)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def grid_chart(path, head_dims, draw, dpi=100):
    """The FA-paper grid as one figure, a column per head dim and a row per mask (non-causal,
    causal): draw(ax, head_dim, causal) fills each panel, which gets the common labels; the
    first panel carries the legend. Writes path; does nothing without matplotlib."""
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(2, len(head_dims), figsize=(5 * len(head_dims), 8), squeeze=False)
    for col, d in enumerate(head_dims):
        for row, causal in enumerate((0, 1)):
            ax = axes[row][col]
            draw(ax, d, causal)
            ax.set_title(f"d={d}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
