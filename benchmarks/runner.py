"""Parent process: `python -m benchmarks [--quick] [--out DIR] ...`.

Runs every selected case on every installed backend, each group in a fresh
subprocess with the backend fixed in its environment, shows a progress bar,
prints the tables, writes `<out>/<date>.json` and `<out>/<date>.png`, and
(on full runs) updates the results section of `docs/benchmarks.md` and
moves the run's chart beside it (`docs/benchmarks.png`).
"""

import argparse
import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks import alternation
from benchmarks import cases as cases_mod
from benchmarks import report
from benchmarks.child import PREFIX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results")
DOCS_PATH = os.path.join(ROOT, "docs", "benchmarks.md")
# Set by this machine's image for other programs; with them NumPy's OpenBLAS
# runs far below the CPU's speed, so the benchmark's children drop them.
SLOW_BLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_MODULES = {
    cases_mod.NUMPY: "numpy",
    cases_mod.TF_KERAS: "tf_keras",
    "tensorflow": "tensorflow",
    "jax": "jax",
    "torch": "torch",
}

# Set by the test environments of tox.ini for speed; not for measuring.
SLOW_XLA_FLAGS = (
    "--xla_backend_optimization_level",
    "--xla_cpu_use_fusion_emitters",
)


def xla_flags_warning(quick, environ):
    """The warning a full run prints when `environ`'s XLA_FLAGS change how
    XLA compiles (None otherwise, and for `--quick` runs, whose figures
    are not kept)."""
    flags = environ.get("XLA_FLAGS", "")
    named = [f for f in SLOW_XLA_FLAGS if f in flags]
    if quick or not named:
        return None
    return (
        f"XLA_FLAGS sets {', '.join(named)} ({flags!r}): XLA compiles "
        "otherwise than users get, so the figures are not comparable with "
        "docs/benchmarks.md; unset it"
    )


def installed_backends():
    """The backends (and pseudo-backends) whose package can be imported."""
    return [
        b
        for b in cases_mod.ALL_BACKENDS
        if importlib.util.find_spec(_MODULES[b]) is not None
    ]


# Thread-pool sizes of the libraries, set by `--threads N` only.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
)


def child_env(backend, base=None, threads=None):
    """The environment of a child for `backend`: KERAS_BACKEND set before
    any import, Keras 2 selected for `tf_keras`, the slow-BLAS variables
    dropped, the repository on PYTHONPATH; with `threads`, the OpenMP, MKL,
    OpenBLAS and TensorFlow intra-op pools limited to that many threads and
    XLA's CPU Eigen pool turned off when `threads == 1`."""
    env = dict(os.environ if base is None else base)
    if threads:
        for name in THREAD_VARIABLES:
            env[name] = str(threads)
        if threads == 1:
            flags = env.get("XLA_FLAGS", "")
            env["XLA_FLAGS"] = (
                flags + " --xla_cpu_multi_thread_eigen=false"
            ).strip()
    for name in SLOW_BLAS_VARIABLES:
        env.pop(name, None)
    env.pop("TF_USE_LEGACY_KERAS", None)
    if backend == cases_mod.TF_KERAS:
        env["KERAS_BACKEND"] = "tensorflow"
        env["TF_USE_LEGACY_KERAS"] = "1"
    elif backend in cases_mod.KERAS_BACKENDS:
        env["KERAS_BACKEND"] = backend
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Compilation is part of what the cases measure: no programs read back
    # from an earlier run (`kmodels.backend.compile_cache`, on by default).
    env.setdefault("KMODELS_COMPILATION_CACHE", "0")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, env.get("PYTHONPATH", "")) if p
    )
    return env


def plan(selected_cases, backends, isolation):
    """The subprocesses to run: a list of `(backend, [case names])`.

    `isolation="workload"`: one process per workload group and backend;
    `"case"`: one per case and backend; `"backend"`: one per backend."""
    groups = []
    for backend in backends:
        names = [c for c in selected_cases if backend in c.backends]
        if isolation == "backend":
            buckets = [names]
        elif isolation == "case":
            buckets = [[c] for c in names]
        else:
            buckets = {}
            for c in names:
                buckets.setdefault(c.workload, []).append(c)
            buckets = list(buckets.values())
        groups += [(backend, [c.name for c in b]) for b in buckets if b]
    return groups


def _globs(patterns):
    return [p.strip() for p in patterns.split(",") if p.strip()]


def select_cases(patterns, exclude=""):
    """Cases whose name matches one of the comma-separated `patterns`
    (fnmatch globs); when `patterns` is empty, every case but the opt-in
    ones (those run only when a pattern names them). Cases matching one of
    the comma-separated `exclude` globs are left out; each of those globs
    must match a case."""
    import fnmatch

    known = ", ".join(c.name for c in cases_mod.CASES)
    if not patterns:
        chosen = [c for c in cases_mod.CASES if not c.opt_in]
    else:
        globs = _globs(patterns)
        chosen = [
            c
            for c in cases_mod.CASES
            if any(fnmatch.fnmatch(c.name, g) for g in globs)
        ]
        if not chosen:
            raise SystemExit(
                f"--cases {patterns!r} matches no case; known: {known}"
            )
    for glob in _globs(exclude):
        if not any(fnmatch.fnmatch(c.name, glob) for c in cases_mod.CASES):
            raise SystemExit(
                f"--exclude {glob!r} matches no case; known: {known}"
            )
        chosen = [c for c in chosen if not fnmatch.fnmatch(c.name, glob)]
    return chosen


def stream_records(command, env, timeout, on_record):
    """Runs the child `command` from the repository root with `env` and
    calls `on_record(record)` for each `BENCH_RESULT` line as it arrives;
    kills the child after `timeout` seconds.

    Returns `(why, stderr_tail, timed_out)`: how the child ended ("child
    exited with N", or "ran past the N s timeout"), the last 1500
    characters of its stderr, for the records of the results it did not
    report, and whether the timeout killed it."""
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            process.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            for line in process.stdout:
                if line.startswith(PREFIX):
                    on_record(json.loads(line[len(PREFIX) :]))
            process.wait()
        finally:
            timer.cancel()
        stderr.seek(0)
        tail = stderr.read()[-1500:]
    why = f"child exited with {process.returncode}"
    if timed_out.is_set():
        why = (
            f"ran past the {timeout:.0f} s timeout (the machine may be busy: "
            "--timeout sets it)"
        )
    return why, tail, timed_out.is_set()


def run_group(
    backend,
    names,
    quick,
    timeout,
    on_result,
    on_start=None,
    profile=None,
    threads=None,
):
    """Runs one child; calls `on_result(record)` for every case as it ends.
    Cases the child did not report get an "error" record (a crash), or a
    "timeout" record (the child ran past `timeout` seconds)."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.child",
        "--backend",
        backend,
        "--cases",
        ",".join(names),
    ]
    if quick:
        command.append("--quick")
    if profile:
        command += ["--profile", profile]
    seen = set()

    def on_record(record):
        seen.add(record["case"])
        on_result(record)
        remaining = [n for n in names if n not in seen]
        if on_start and remaining:
            on_start(backend, remaining[0])

    if on_start:
        on_start(backend, names[0])
    why, tail, timed_out = stream_records(
        command, child_env(backend, threads=threads), timeout, on_record
    )
    for name in names:
        if name not in seen:
            on_result(
                {
                    "case": name,
                    "backend": backend,
                    "status": "timeout" if timed_out else "error",
                    "error": f"{why}: {tail}",
                }
            )


def _alternate(results, selected, backends, args, timeout, console):
    """`--pairs N`: the alternated pairs of `benchmarks.alternation`, for
    the paired cases this run selected, added to the case's records."""
    names = {c.name for c in selected}
    keras_backends = [b for b in backends if b in cases_mod.KERAS_BACKENDS]
    paired = [
        p
        for p in alternation.PAIRED
        if p[0] in names and p[1] in names and p[2] in backends
    ]

    def run_case(backend, case):
        got = []
        console.print(f"pair: {backend} {case}")
        run_group(
            backend,
            [case],
            args.quick,
            timeout,
            got.append,
            None,
            None,
            args.threads,
        )
        return got[0] if got else None

    for case, reference, reference_backend in paired:
        figures = alternation.run(
            keras_backends,
            args.pairs,
            run_case,
            [(case, reference, reference_backend)],
        )
        for record in results:
            extra = figures.get((record["case"], record["backend"]))
            if extra:
                record.update(extra)


def docs_path_for(quick, docs, no_docs, full_set):
    """The markdown file to update, or None: `--no-docs` wins, then an
    explicit `--docs`; by default only a full-size run of every case on
    every installed backend updates `docs/benchmarks.md` (a `--quick` run
    never does unless `--docs` is given)."""
    if no_docs:
        return None
    if docs:
        return docs
    return DOCS_PATH if (not quick and full_set) else None


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure kmodels' workloads on every installed Keras "
        "backend, next to the original tf.keras code and the machine's "
        "matmul throughput.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, 2 timed steps: a smoke test, not a measurement. "
        "Writes to a temporary folder unless --out is given and never "
        "updates the docs.",
    )
    parser.add_argument(
        "--out", help="folder for <date>.json and <date>.png "
        "(default: benchmarks/results; a temporary folder with --quick)"
    )  # fmt: skip
    parser.add_argument(
        "--backends",
        help="comma-separated subset of "
        + ",".join(cases_mod.ALL_BACKENDS)
        + " (default: all installed)",
    )
    parser.add_argument(
        "--cases", default="", help="comma-separated case names or globs"
    )
    parser.add_argument(
        "--exclude",
        default="",
        help="comma-separated case names or globs to leave out (tox's "
        "`bench` smoke run leaves out the cases backends_tests/benchmarks "
        "runs on every backend)",
    )
    parser.add_argument(
        "--isolation",
        choices=("workload", "case", "backend"),
        help="one subprocess per workload group and backend (default), per "
        "case and backend, or per backend (default with --quick)",
    )
    parser.add_argument(
        "--docs",
        default=None,
        help=f"markdown file whose results section is updated (default "
        f"{os.path.relpath(DOCS_PATH, ROOT)} on full runs of every case)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="subprocesses run at once (default 1; 2 with --quick, whose "
        "timings are not measurements). Keep 1 for real figures.",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after timing, profile 3 more steps of each case (cProfile; "
        "plus the torch profiler on torch) into <out>/profiles-<date>/",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="limit the OpenMP, MKL, OpenBLAS and TensorFlow thread pools "
        "to N (and XLA's Eigen pool off for N=1; XLA's matmuls may still "
        "use more threads). Default: each library's own choice. On a busy "
        "machine torch's OpenMP threads spin and its times balloon.",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="after the run, N alternated pairs of children per backend for "
        "the ratios whose cases cannot share a process (the Seq2Seq step "
        "against the original tf.keras code): the median of the per-pair "
        "ratios and their range are reported (benchmarks/alternation.py)",
    )
    parser.add_argument(
        "--no-docs", action="store_true", help="do not update the docs"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per subprocess (default 900, 300 with --quick)",
    )
    return parser.parse_args(argv)


def main(argv=None):
    from rich.console import Console
    from rich.progress import BarColumn
    from rich.progress import MofNCompleteColumn
    from rich.progress import Progress
    from rich.progress import TextColumn
    from rich.progress import TimeElapsedColumn

    args = parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 160))
    available = installed_backends()
    if args.backends:
        wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
        unknown = [b for b in wanted if b not in cases_mod.ALL_BACKENDS]
        if unknown:
            raise SystemExit(
                f"--backends: unknown {unknown}; expected a subset of "
                f"{list(cases_mod.ALL_BACKENDS)}"
            )
        missing = [b for b in wanted if b not in available]
        if missing:
            console.print(f"[yellow]not installed, skipped: {missing}[/]")
        backends = [b for b in wanted if b in available]
    else:
        backends = available
    selected = select_cases(args.cases, args.exclude)
    warning = xla_flags_warning(args.quick, os.environ)
    if warning:
        console.print(f"[yellow]{warning}[/]")
    isolation = args.isolation or ("backend" if args.quick else "workload")
    # Per child. Generous: an idle machine runs a quick child in about a
    # minute; a busy one (two test lanes, other jobs) several times that.
    timeout = args.timeout or 900.0
    groups = plan(selected, backends, isolation)
    out_dir = args.out or (
        tempfile.mkdtemp(prefix="kmodels-bench-") if args.quick else RESULTS_DIR
    )
    os.makedirs(out_dir, exist_ok=True)
    profile_dir = None
    if args.profile:
        profile_dir = os.path.join(out_dir, f"profiles-{report.today()}")
        os.makedirs(profile_dir, exist_ok=True)

    results = []
    started = time.perf_counter()
    total = sum(len(names) for _, names in groups)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("starting", total=total)

        def on_start(backend, name):
            progress.update(task, description=f"{backend}: {name}")

        def on_result(record):
            results.append(record)
            progress.advance(task)
            if record["status"] in ("error", "timeout"):
                progress.console.print(
                    f"[red]{record['backend']} {record['case']} "
                    f"({record['status']}): {record['error'][:300]}[/]"
                )

        jobs = args.jobs or (2 if args.quick else 1)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = [
                pool.submit(
                    run_group,
                    backend,
                    names,
                    args.quick,
                    timeout,
                    on_result,
                    on_start,
                    profile_dir,
                    args.threads,
                )
                for backend, names in groups
            ]
            for future in futures:
                future.result()

    if args.pairs:
        _alternate(results, selected, backends, args, timeout, console)

    meta = {
        "created": report.created(),
        "quick": args.quick,
        "command": "python -m benchmarks"
        + ("" if argv is None and len(sys.argv) <= 1 else " ")
        + " ".join(sys.argv[1:] if argv is None else argv),
        "wall_s": round(time.perf_counter() - started, 1),
        "isolation": isolation,
        "jobs": args.jobs or (2 if args.quick else 1),
        "threads": args.threads,
        # What the parent's environment gives every child's XLA (tox's
        # `bench` smoke run turns LLVM's optimisation off, see tox.ini).
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "machine": report.machine(),
        "versions": report.versions(),
    }
    doc = report.document(results, meta)
    stem = os.path.join(out_dir, report.today())
    report.write_json(doc, stem + ".json")
    report.chart(doc, stem + ".png")
    for table in report.rich_tables(doc):
        console.print(table)
    full_set = (
        not args.cases and not args.exclude and set(backends) == set(available)
    )
    docs_path = docs_path_for(args.quick, args.docs, args.no_docs, full_set)
    chart_path = stem + ".png"
    if docs_path:
        # MkDocs serves files from docs/ only: the chart moves beside the page.
        chart_path = report.publish_chart(chart_path, docs_path)
        report.update_docs(docs_path, report.markdown(doc["results"],
                           doc["targets"], meta))  # fmt: skip
        console.print(f"updated {docs_path}")
    console.print(
        f"wrote {stem}.json and {chart_path} in {meta['wall_s']:.0f} s"
    )
    # A case that did not run fails the run, whichever way it failed.
    failed = [r for r in results if r["status"] in ("error", "timeout")]
    return 1 if failed else 0
