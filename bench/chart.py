"""A chart of the benchmark's ratios: per workload, accy's time over its baseline's on each
backend, on a log scale, with each target marked.  Needs matplotlib (the ``bench`` extra)."""

from __future__ import annotations


def draw(rows, path: str) -> str | None:
    """Draw ``rows`` (from :func:`bench.targets.run_workloads`) into ``path``; None, or why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install \".[bench]\")"
    bars = []  # (label, backend, baseline, ratio, target or None)
    for row in rows:
        targets = {(t["backend"], t["baseline"]): t["at_most"] for t in row["targets"]}
        baseline = row["targets"][0]["baseline"] if row["targets"] else "numpy"
        for backend in ("llvm", "interpreter"):
            if backend in row["seconds"] and baseline in row["seconds"]:
                bars.append((f"{row['kernel']}\n{row['size']}", backend, baseline,
                             row["seconds"][backend] / row["seconds"][baseline], targets.get((backend, baseline))))
    if not bars:
        return "nothing to draw"
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(bars)), 5))
    colours = {"llvm": "tab:blue", "interpreter": "tab:orange"}
    for x, (label, backend, baseline, ratio, target) in enumerate(bars):
        ax.bar(x, ratio, color=colours[backend])
        ax.text(x, ratio, f"{ratio:.2g}", ha="center", va="bottom", fontsize=7)
        if target is not None:
            ax.plot([x - 0.4, x + 0.4], [target, target], color="black", linewidth=2)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([f"{label}\n{backend} / {baseline}" for label, backend, baseline, _, _ in bars],
                       fontsize=6, rotation=60, ha="right")
    ax.set_ylabel("accy's time / baseline's time (lower is better)")
    ax.set_title("accy on this CPU: bars are measured ratios, black lines the targets")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    ax.legend(handles, [f"{b} backend" for b in colours], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
