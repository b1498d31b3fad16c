"""The results chart (`<date>.png`): one panel per workload, one bar per
variant and backend."""

from benchmarks import cases as cases_mod
from benchmarks.report.metrics import index


def chart(doc, path):
    """A PNG bar chart: one panel per workload, one bar per variant and
    backend (median, whiskers at the quartiles)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = index(doc["results"])
    workloads = []
    for case in cases_mod.CASES:
        measured = case.unit != "exact match" and any(
            (table.get((case.name, b)) or {}).get("status") == "ok"
            for b in case.backends
        )
        if measured and case.workload not in workloads:
            workloads.append(case.workload)
    if not workloads:
        workloads = [cases_mod.CASES[0].workload]  # an empty chart
    colors = {
        cases_mod.NUMPY: "#7f7f7f",
        cases_mod.TF_KERAS: "#8c564b",
        "tensorflow": "#ff7f0e",
        "jax": "#1f77b4",
        "torch": "#d62728",
    }
    fig, axes = plt.subplots(
        len(workloads), 1, figsize=(10, 2.2 * len(workloads) + 1),
        squeeze=False,
    )  # fmt: skip
    axes = axes[:, 0]
    for ax, workload in zip(axes, workloads):
        labels, values, lows, highs, bar_colors = [], [], [], [], []
        for case in cases_mod.CASES:
            if case.workload != workload or case.unit == "exact match":
                continue
            for backend in case.backends:
                r = table.get((case.name, backend))
                if not r or r.get("status") != "ok":
                    continue
                if case.unit == "tokens/s":
                    value = r["tokens_per_s"]
                    low = r["tokens"] / (r["q3_ms"] / 1e3)
                    high = r["tokens"] / (r["q1_ms"] / 1e3)
                elif case.unit == "keys/s":
                    value = r["keys_per_s"]
                    low = r["keys"] / (r["q3_ms"] / 1e3)
                    high = r["keys"] / (r["q1_ms"] / 1e3)
                elif case.name.startswith("matmul"):
                    value = r["gflops"]
                    low = r["flops"] / (r["q3_ms"] / 1e3) / 1e9
                    high = r["flops"] / (r["q1_ms"] / 1e3) / 1e9
                else:
                    value, low, high = r["median_ms"], r["q1_ms"], r["q3_ms"]
                labels.append(f"{case.variant} [{backend}]")
                values.append(value)
                lows.append(max(value - low, 0))
                highs.append(max(high - value, 0))
                bar_colors.append(colors[backend])
        unit = "ms / step (lower is better)"
        if workload == "Embedding growth event":
            unit = "ms for a one-batch fit that grows the table once"
        if workload == "Seq2Seq generation":
            unit = "tokens / s (higher is better)"
        elif workload == cases_mod.KEYS_WORKLOAD:
            unit = "keys / s (higher is better)"
        elif workload == "Matmul float32":
            unit = "GFLOP/s (higher is better)"
        ax.barh(
            range(len(values)),
            values,
            xerr=[lows, highs],
            color=bar_colors,
            capsize=2,
        )
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 100 * min(positive):
            ax.set_xscale("log")  # e.g. 1 ms and 1 s steps in one panel
            unit = unit.replace(" (", ", log scale (")
        ax.set_yticks(range(len(values)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{workload}: {unit}", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    title = f"kmodels benchmarks {doc['created']}"
    if doc["quick"]:
        title += " (quick sizes: smoke test, not a measurement)"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)
