"""Cross-backend parity: each backend's test run records named outputs for
fixed weights and inputs; `python -m kmodels.testing.parity DIR` compares them.

This module needs NumPy only, so the `parity` tox environment stays small.

Example:

    store = ParityStore("/tmp/parity", backend="jax")
    store.record("gru/masked", outputs, atol=1e-5, rtol=1e-5)
    store.save()
    # after the other backends have saved theirs:
    rows, ok = compare("/tmp/parity")
"""

import argparse
import itertools
import json
import os
import sys

import numpy as np

from kmodels import BACKENDS


class ParityStore:
    """Collects named arrays for one backend and writes them to `directory`.

    Args:
        directory: where `<backend>.npz` and `<backend>.json` are written.
        backend: the backend's name.
    """

    def __init__(self, directory, backend):
        self.directory = directory
        self.backend = backend
        self.arrays = {}
        self.tolerances = {}

    def record(self, name, array, atol, rtol):
        """Keeps `array` under `name`; backends must agree within
        `|a - b| <= atol + rtol * |b|` elementwise."""
        array = np.asarray(array)
        if name in self.arrays and not np.array_equal(self.arrays[name], array):
            raise ValueError(f"parity name {name!r} recorded twice")
        self.arrays[name] = array
        self.tolerances[name] = {"atol": float(atol), "rtol": float(rtol)}

    def save(self):
        if not self.arrays:
            return
        os.makedirs(self.directory, exist_ok=True)
        base = os.path.join(self.directory, self.backend)
        np.savez(base + ".npz", **self.arrays)
        with open(base + ".json", "w") as f:
            json.dump(self.tolerances, f, indent=1, sort_keys=True)


def _load(directory, backend):
    base = os.path.join(directory, backend)
    if not os.path.exists(base + ".npz"):
        return None, None
    with np.load(base + ".npz") as data:
        arrays = {k: data[k] for k in data.files}
    with open(base + ".json") as f:
        tolerances = json.load(f)
    return arrays, tolerances


def compare(directory, backends=BACKENDS):
    """Compares every recorded name across every pair of backends.

    Returns:
        `(rows, ok)`: one dict per (name, pair) with the largest absolute and
        relative differences and the tolerance, and whether all pass. A name
        missing from a backend, or a backend with no results, fails.
    """
    loaded = {b: _load(directory, b) for b in backends}
    missing = [b for b, (a, _) in loaded.items() if a is None]
    rows, ok = [], not missing
    present = [b for b in backends if b not in missing]
    names = sorted(set().union(*(loaded[b][0] for b in present)))
    for name in names:
        for b1, b2 in itertools.combinations(backends, 2):
            row = {"name": name, "pair": f"{b1} vs {b2}"}
            a1 = loaded[b1][0].get(name) if b1 in present else None
            a2 = loaded[b2][0].get(name) if b2 in present else None
            if a1 is None or a2 is None:
                row.update(status="MISSING")
                ok = False
                rows.append(row)
                continue
            tol = loaded[b1][1][name]
            if a1.shape != a2.shape:
                row.update(status=f"SHAPE {a1.shape} != {a2.shape}")
                ok = False
                rows.append(row)
                continue
            x = a1.astype(np.float64)
            y = a2.astype(np.float64)
            diff = np.abs(x - y)
            scale = np.maximum(np.abs(x), np.abs(y))
            rel = np.where(scale > 0, diff / np.where(scale > 0, scale, 1), 0)
            passed = bool(np.all(diff <= tol["atol"] + tol["rtol"] * np.abs(y)))
            ok &= passed
            row.update(
                max_abs=float(diff.max()) if diff.size else 0.0,
                max_rel=float(rel.max()) if rel.size else 0.0,
                atol=tol["atol"],
                rtol=tol["rtol"],
                status="ok" if passed else "FAIL",
            )
            rows.append(row)
    return rows, ok, missing


def format_table(rows):
    header = ("name", "backends", "max abs", "max rel", "atol", "rtol", "")
    lines = [header]
    for r in rows:
        if "max_abs" in r:
            lines.append(
                (
                    r["name"],
                    r["pair"],
                    f"{r['max_abs']:.2e}",
                    f"{r['max_rel']:.2e}",
                    f"{r['atol']:.0e}",
                    f"{r['rtol']:.0e}",
                    r["status"],
                )
            )
        else:
            lines.append((r["name"], r["pair"], "", "", "", "", r["status"]))
    widths = [max(len(str(line[i])) for line in lines) for i in range(7)]
    out = []
    for i, line in enumerate(lines):
        out.append(
            "  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip()
        )
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare the outputs that each backend's tests recorded."
    )
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    rows, ok, missing = compare(args.directory)
    print(format_table(rows))
    if missing:
        print(f"\nno results from: {', '.join(missing)}")
    n_names = len({r["name"] for r in rows})
    failed = sum(r["status"] != "ok" for r in rows)
    print(
        f"\n{n_names} outputs, {len(rows)} comparisons, {failed} outside "
        "tolerance"
    )
    return 0 if ok and rows else 1


if __name__ == "__main__":
    sys.exit(main())
