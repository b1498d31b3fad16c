"""Child process: runs cases on the one backend fixed by the environment.

`python -m benchmarks.child --backend jax --cases seq2seq_train,generate
[--quick]` prints one line per case, `BENCH_RESULT {json}`, as soon as the
case is done (the parent reads them live for its progress bar). A case whose
kmodels code cannot be imported reports `status: "n/a"`; any other failure
reports `status: "error"` with the message; the child goes on either way.
Every record also has the case's peak resident memory (`peak_rss_mb`, see
`benchmarks.memory`).
"""

import argparse
import atexit
import gc
import importlib
import json
import os
import subprocess
import sys
import time
import traceback

from benchmarks import memory
from benchmarks import timing

PREFIX = "BENCH_RESULT "


class NotAvailable(Exception):
    """The code a case measures cannot be imported (not written yet, or an
    optional package is missing)."""


def require(module, *names):
    """Imports `names` from `module`, raising `NotAvailable` if any is
    missing; returns them (a single object when one name is given)."""
    try:
        mod = importlib.import_module(module)
        objects = [getattr(mod, name) for name in names]
    except (ImportError, AttributeError) as error:
        raise NotAvailable(
            f"{module}.{'/'.join(names)} not available: {error}"
        ) from error
    return objects[0] if len(objects) == 1 else objects


def run_module(module, *args, env=None):
    """Runs `python -m module *args` in a fresh interpreter and returns the
    JSON of its last line of output; a failure raises a `RuntimeError` with
    the end of its error output."""
    done = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join([module, *map(str, args)])} failed (exit status "
            f"{done.returncode}):\n{done.stderr[-2000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_case(case, backend, quick):
    from benchmarks import cases

    module_name, function_name = case.function.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    record = {"case": case.name, "backend": backend}
    # A full collection before and after each case, so that one case's
    # garbage does not count in the next one's memory and time. Not in
    # `--quick` runs (a smoke test; none of their figures is kept): with
    # JAX or TensorFlow loaded each collection takes about 0.5 s, 51 s of a
    # 93 s JAX child on 2026-12-05.
    if not quick:
        gc.collect()
    scope, rss_start_mb = memory.start()
    t0 = time.perf_counter()
    try:
        out = function(cases.sizes_for(case, quick), cases.timing_for(quick))
        record.update(status="ok", **out)
    except NotAvailable as error:
        record.update(status="n/a", error=str(error))
    except Exception as error:  # reported, never fatal for the whole run
        record.update(
            status="error",
            error=f"{type(error).__name__}: {error}"[:500],
            traceback=traceback.format_exc()[-2000:],
        )
    record["wall_s"] = time.perf_counter() - t0
    record.update(
        # The kernel updates the high-water mark lazily: memory freed before
        # it was read can leave it below the RSS read at the start (seen:
        # 1353.36 against 1353.59 MB). The peak is at least that.
        peak_rss_mb=max(memory.peak_mb(scope), rss_start_mb or 0.0),
        peak_rss_scope=scope,
        rss_start_mb=rss_start_mb,
    )
    if backend not in (cases.NUMPY, cases.TF_KERAS):
        import keras

        keras.utils.clear_session(free_memory=not quick)
    if not quick:
        gc.collect()
    return record


def main(argv=None):
    from benchmarks import cases

    parser = argparse.ArgumentParser(prog="python -m benchmarks.child")
    parser.add_argument("--backend", required=True, choices=cases.ALL_BACKENDS)
    parser.add_argument("--cases", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", help="folder for per-case profiles")
    args = parser.parse_args(argv)
    if args.backend in cases.KERAS_BACKENDS:
        expected = os.environ.get("KERAS_BACKEND")
        if expected != args.backend:
            raise SystemExit(
                f"KERAS_BACKEND must be {args.backend!r} before Keras is "
                f"imported; got {expected!r}."
            )
    for name in args.cases.split(","):
        if args.profile:
            timing.PROFILE.update(
                dir=args.profile, stem=f"{name}-{args.backend}"
            )
        record = _run_case(cases.CASES_BY_NAME[name], args.backend, args.quick)
        sys.stdout.write(PREFIX + json.dumps(record) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    # Run as `benchmarks.child`, not `__main__`: the workload modules raise
    # `benchmarks.child.NotAvailable`, which `_run_case` must catch as the
    # same class (under `__main__` it would be a second copy of the module
    # and every "n/a" case would report "error").
    from benchmarks.child import main as _main

    code = _main()
    # The parent waits for this process to end, and the interpreter's
    # teardown after the last record took about 2 s on TensorFlow and JAX
    # (2026-12-07, five quick cases): the records are out, the `atexit`
    # handlers run, the teardown is skipped.
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(code)
