"""What the benchmark reports share (bench_compare.py, compare_families.py, bench_decode.py):
the geometric mean of ratios and the figures, drawn only where matplotlib is installed."""
import math


def geomean(xs):
    """Geometric mean of the positive values of xs (missing points, NaN or 0, are left out);
    NaN when none is left."""
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


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
