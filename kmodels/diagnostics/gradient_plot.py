"""A PNG of gradient norms per layer over train steps."""

import numpy as np


def plot_gradient_history(monitors, path, titles=None, size=(640, 400)):
    """Writes a PNG of each layer's gradient norm over the checked steps.

    One panel per monitor, side by side, sharing the y axis (log scale). A
    layer's norm is the L2 norm of all its variables' gradients at a check;
    a norm of exactly 0 (no gradient) is drawn on the dotted line at the
    bottom of the panel, labelled "0". matplotlib is imported here and
    draws with its Agg canvas (pyplot's state is untouched).

    Args:
        monitors: a `GradientMonitor` or a `GradientFlowCheck` (its
            `monitor` is drawn; it needs `every_n_steps` and a `fit`), or
            a list of them.
        path: the PNG file to write.
        titles: one title per panel (optional).
        size: `(width, height)` of the image in pixels.

    Returns:
        `path`.

    Raises:
        TypeError: an entry that is neither.
        ValueError: a `GradientFlowCheck` without periodic checks, or
            titles that are not one per monitor.
    """
    if not isinstance(monitors, (list, tuple)):
        monitors = [monitors]
    titles = list(titles or [None] * len(monitors))
    if len(titles) != len(monitors):
        raise ValueError(
            f"plot_gradient_history expects one title per monitor; got "
            f"{len(titles)} title(s) for {len(monitors)} monitor(s)."
        )
    panels = [_monitor(m).layer_norms() for m in monitors]
    # The Agg canvas of this figure only: pyplot's global backend and
    # state are left alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    positive = [
        v
        for norms in panels
        for steps in norms.values()
        for v in steps.values()
        if np.isfinite(v) and v > 0
    ]
    floor = min(positive) / 10 if positive else 1e-8
    width, height = size
    dpi = 100
    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, norms, title in zip(axes, panels, titles):
        for layer, steps in norms.items():
            xs = list(steps)
            ys = [v if v > 0 else floor for v in steps.values()]
            ax.plot(xs, ys, marker=".", label=layer)
        ax.set_yscale("log")
        ax.axhline(floor, color="gray", linestyle=":", linewidth=1)
        ax.annotate(
            "0",
            (0, floor),
            xycoords=("axes fraction", "data"),
            xytext=(2, 2),
            textcoords="offset points",
            color="gray",
            fontsize=7,
        )
        ax.set_xlabel("train step")
        if title:
            ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6, loc="best")
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("gradient norm per layer")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi, format="png")
    return path


def _monitor(entry):
    """The `GradientMonitor` of a monitor or a `GradientFlowCheck`."""
    import keras

    from kmodels.diagnostics.gradient_monitor import GradientMonitor

    if isinstance(entry, GradientMonitor):
        return entry
    # A `GradientFlowCheck` (kmodels.callbacks, a layer above this one,
    # which diagnostics does not import): a callback holding a monitor.
    if isinstance(entry, keras.callbacks.Callback) and hasattr(
        entry, "monitor"
    ):
        if entry.monitor is None:
            raise ValueError(
                "plot_gradient_history: the GradientFlowCheck has no "
                "periodic checks to draw: pass `every_n_steps` and call "
                "`fit` first."
            )
        return entry.monitor
    raise TypeError(
        "plot_gradient_history expects GradientMonitor or GradientFlowCheck "
        f"objects (or a list of them); got {type(entry).__name__}."
    )
