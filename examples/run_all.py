"""The main job: every demo of kmodels on every installed backend.

    python -m examples.run_all            # full run (minutes per backend)
    python -m examples.run_all --quick    # smoke run, about a minute a backend

For each backend, a fresh Python process (the backend is fixed when Keras is
imported) prints the backend and versions, checks Keras layers against the
NumPy oracle, then runs the seq2seq, position-embedding, recommender,
digits (a tiny ViT on real images), MovieLens (next-movie recommendation
on real ratings, replayed in time) and Django (English to Spanish on
Django's own UI strings) demos.
The parent process then compares the oracle-check outputs across backends.
"""

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

from kmodels import BACKENDS

DEMOS = {
    "seq2seq": "examples.seq2seq_dates",
    "position": "examples.position_embedding",
    "recommender": "examples.growing_recommender",
    "digits": "examples.digits_vit",
    "movielens": "examples.movielens_recommender",
    "django": "examples.django_translator",
}
# Demos that take `--out DIR` (the seq2seq demo saves its attention heat map).
WRITES_FILES = ("seq2seq",)


def installed_backends():
    return [b for b in BACKENDS if importlib.util.find_spec(b) is not None]


def oracle_check(store=None, seed=0):
    """Compares a GRU, a masked bidirectional GRU and a Transformer encoder
    with the NumPy oracle on the current backend; returns
    `{name: max relative difference}`."""
    import keras
    import keras_hub
    import numpy as np

    from kmodels.testing import oracle

    rng = np.random.default_rng(seed)
    to_np = keras.ops.convert_to_numpy

    def fill(layer):
        values = [
            rng.uniform(-0.5, 0.5, tuple(w.shape)).astype("float32")
            for w in layer.weights
        ]
        layer.set_weights(values)
        return values

    def rel(a, b):
        return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))

    results = {}
    x = rng.normal(size=(4, 12, 8)).astype("float32")
    mask = np.arange(12)[None] < np.array([[12], [9], [5], [1]])

    gru = keras.layers.GRU(16, return_sequences=True)
    gru.build(x.shape)
    w = fill(gru)
    out = to_np(gru(x))
    results["gru"] = (out, oracle.gru(x, *w)[0])

    bigru = keras.layers.Bidirectional(
        keras.layers.GRU(16, return_sequences=True), merge_mode="sum"
    )
    bigru.build(x.shape)
    w = fill(bigru)
    out = np.where(mask[..., None], to_np(bigru(x, mask=mask)), 0.0)
    ref = oracle.bidirectional_gru(x, w[:3], w[3:], mask=mask)[0]
    results["bigru_masked"] = (out, np.where(mask[..., None], ref, 0.0))

    enc = keras_hub.layers.TransformerEncoder(32, num_heads=2)
    enc.build(x.shape)
    parts = [
        fill(enc._self_attention_layer),
        fill(enc._self_attention_layer_norm),
        fill(enc._feedforward_intermediate_dense),
        fill(enc._feedforward_output_dense),
        fill(enc._feedforward_layer_norm),
    ]
    out = to_np(enc(x, padding_mask=mask))
    ref = oracle.transformer_encoder(x, *parts, padding_mask=mask)
    m = mask[..., None]
    results["transformer_encoder"] = (
        np.where(m, out, 0.0),
        np.where(m, ref, 0.0),
    )

    summary = {}
    for name, (out, ref) in results.items():
        summary[name] = rel(out, ref)
        if store is not None:
            store.record(f"demo/{name}", out, atol=1e-5, rtol=1e-5)
    return summary


def _run_backend(args):
    import keras

    from kmodels.testing.parity import ParityStore

    backend = keras.backend.backend()
    print(f"== backend: {backend} (keras {keras.__version__})", flush=True)
    store = ParityStore(args.parity_dir, backend) if args.parity_dir else None
    start = time.perf_counter()
    summary = oracle_check(store)
    if store is not None:
        store.save()
    for name, value in summary.items():
        verdict = "ok" if value < 1e-5 else "MISMATCH"
        print(f"   oracle check {name:22s} max rel diff {value:.1e} {verdict}")
    print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
    failed = any(v >= 1e-5 for v in summary.values())
    for demo in args.demos:
        module = DEMOS[demo]
        if importlib.util.find_spec(module) is None:
            print(f"-- {demo}: not available in this version")
            continue
        print(f"-- {demo} demo ({module})", flush=True)
        demo_args = ["--quick"] if args.quick else []
        if args.out and demo in WRITES_FILES:
            demo_args += ["--out", os.path.join(args.out, backend)]
        start = time.perf_counter()
        importlib.import_module(module).main(demo_args)
        print(f"   ({demo}: {time.perf_counter() - start:.0f} s)", flush=True)
    return 1 if failed else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--backends",
        default=",".join(installed_backends()),
        help="comma-separated; default: every installed backend",
    )
    parser.add_argument(
        "--demos",
        default=",".join(DEMOS),
        help=f"comma-separated subset of {','.join(DEMOS)}",
    )
    parser.add_argument("--out", default="examples-output")
    parser.add_argument("--parity-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.demos = [d for d in args.demos.split(",") if d]
    unknown = set(args.demos) - set(DEMOS)
    if unknown:
        parser.error(f"unknown demos {sorted(unknown)}; choose from {DEMOS}")
    if args.child:
        return _run_backend(args)

    from kmodels.testing.parity import compare
    from kmodels.testing.parity import format_table

    backends = [b for b in args.backends.split(",") if b]
    status = 0
    with tempfile.TemporaryDirectory() as parity_dir:
        for backend in backends:
            cmd = [sys.executable, "-m", "examples.run_all", "--child"]
            cmd += ["--demos", ",".join(args.demos), "--out", args.out]
            cmd += ["--parity-dir", parity_dir] + (
                ["--quick"] if args.quick else []
            )
            env = dict(os.environ, KERAS_BACKEND=backend)
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            status |= subprocess.call(cmd, env=env)
        if len(backends) > 1:
            rows, ok, _ = compare(parity_dir, backends)
            print("\n== the oracle check across backends")
            print(format_table(rows))
            status |= 0 if ok else 1
    print("\nall backends passed" if status == 0 else "\nFAILED")
    return status


if __name__ == "__main__":
    sys.exit(main())
