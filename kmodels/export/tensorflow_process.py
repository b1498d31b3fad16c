"""Running a kmodels export module under TensorFlow.

Only TensorFlow writes SavedModels. On the TensorFlow backend the module's
`_main` runs in this process; from a model trained on JAX or torch it runs
in a TensorFlow worker process (`python -m kmodels.export.tensorflow_process`
with `KERAS_BACKEND=tensorflow`), where the model's `.keras` file (its
weights are portable) is loaded. The worker is started by the first export
and kept for the next ones: TensorFlow's import is most of a one-off
process's time. It exits when this process exits, closes its pipe, or
leaves it idle for `WORKER_IDLE_SECONDS`.
"""

import atexit
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import keras

# A worker left idle this long exits (its TensorFlow holds about 1 GB); the
# next export starts another.
WORKER_IDLE_SECONDS = 300.0

_LOCK = threading.Lock()
_WORKER = None  # (pid of the process that started it, Popen, log file)


def _after_fork():
    # A process forked while another thread exported would wait forever
    # on the parent's lock; the parent's worker is left to the parent.
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def run_in_tensorflow(module, arguments, what):
    """Runs `module._main(arguments)` under TensorFlow.

    On the TensorFlow backend it runs here: starting a second TensorFlow
    process took most of an export's time (docs/export.md). On JAX and
    torch it runs in the TensorFlow worker (started here on first use,
    one export at a time; a process forked from this one starts its own).
    Either way the module loads its own copy of the model from the files
    the caller wrote, so the caller's model is not touched.

    Args:
        module: str, the module to run (`kmodels.export.<name>`).
        arguments: list of str.
        what: str naming the work for the error (`"the translator"`).

    Raises:
        RuntimeError: the export failed; the message ends with the error
            (the exception's traceback, or the worker's error output when
            the worker itself died).
    """
    if keras.backend.backend() == "tensorflow":
        try:
            importlib.import_module(module)._main(list(arguments))
        except Exception as error:
            raise RuntimeError(
                f"The TensorFlow export of {what} failed:\n"
                f"{type(error).__name__}: {error}"
            ) from error
        return
    with _LOCK:
        _run_in_worker(module, list(arguments), what)


def _run_in_worker(module, arguments, what):
    # A worker exits 0 only when idle: one that did so as this request
    # reached it never ran the request, and another one runs it.
    for attempt in range(2):
        process, log = _worker()
        start = os.fstat(log.fileno()).st_size
        try:
            process.stdin.write(json.dumps([module, arguments]) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except OSError:  # the worker closed its pipe (it died)
            line = ""
        if line:
            break
        status = process.wait()
        error = _output(log, start)
        _stop()
        if status != 0 or attempt == 1:  # it died running the request
            raise RuntimeError(
                f"The TensorFlow subprocess exporting {what} failed "
                f"(exit status {status}):\n{error[-3000:]}"
            )
    reply = json.loads(line)
    if reply is not None:  # the export raised: its output and traceback
        error = _output(log, start) + reply
        raise RuntimeError(
            f"The TensorFlow subprocess exporting {what} failed:\n"
            f"{error[-3000:]}"
        )


def _output(log, start):
    """What the worker wrote to its error output from offset `start`."""
    # `pread`: this process never moves the file's offset, which the
    # worker's writes share.
    end = os.fstat(log.fileno()).st_size
    return os.pread(log.fileno(), end - start, start).decode(errors="replace")


def _worker():
    """The live worker of this process, started when there is none."""
    global _WORKER
    if _WORKER is not None:
        pid, process, log = _WORKER
        if pid == os.getpid() and process.poll() is None:
            return process, log
        if pid == os.getpid():
            _stop()
        _WORKER = None  # a parent's worker (fork): left to the parent
    # The folder holding the `kmodels` package (kmodels/export/<this file>).
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, env.get("PYTHONPATH")) if p
    )
    # Nameless: nothing a forked copy of this process drops deletes it.
    log = tempfile.TemporaryFile(prefix="kmodels-export-")
    process = subprocess.Popen(
        [sys.executable, "-m", __name__, str(WORKER_IDLE_SECONDS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
        text=True,
    )
    _WORKER = (os.getpid(), process, log)
    return process, log


def _stop():
    """Ends this process's worker (closing its pipe ends it)."""
    global _WORKER
    if _WORKER is None or _WORKER[0] != os.getpid():
        return
    _, process, log = _WORKER
    _WORKER = None
    try:
        process.stdin.close()
        process.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
    process.stdout.close()
    log.close()


atexit.register(_stop)


def _serve(idle_seconds):
    """The worker's loop: one JSON request per line in, one reply per line
    out (`null`, or the failed export's traceback)."""
    # Replies go to the original stdout; anything the exports print goes
    # to the error output instead.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    last = [time.monotonic()]

    def watch():
        while time.monotonic() - last[0] < idle_seconds:
            time.sleep(min(idle_seconds, 5.0))
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    for line in sys.stdin:
        module, arguments = json.loads(line)
        last[0] = float("inf")  # busy: never idle
        try:
            importlib.import_module(module)._main(arguments)
            reply = None
        except BaseException:  # noqa: BLE001 - argparse exits, too
            reply = traceback.format_exc()
        finally:
            keras.backend.clear_session()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        last[0] = time.monotonic()


if __name__ == "__main__":
    _serve(float(sys.argv[1]))
