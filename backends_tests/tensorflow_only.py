"""One TensorFlow-only Python process that runs the serving scripts of the
export tests, for the whole test session.

Each serving script blocks Keras, kmodels and the other frameworks
(`sys.modules[name] = None`) before it imports TensorFlow, reads its input
from `sys.stdin` and prints its result (JSON) on its last line, as in a
fresh `python -c SCRIPT`; `run(script, payload)` runs it in this process
instead, which imports TensorFlow once (3-5 s per script before).
Everything the scripts check holds there too: the blocked modules stay
blocked (a later script cannot import them either), and `sys.modules`
shows what was imported.
"""

import atexit
import json
import os
import subprocess
import sys
import threading

_SERVER = r"""
import io
import json
import os
import sys
import traceback

replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
requests = sys.stdin
for line in requests:
    script, payload = json.loads(line)
    sys.stdin, sys.stdout = io.StringIO(payload), io.StringIO()
    try:
        code = compile(script, "<serving script>", "exec")
        exec(code, {"__name__": "__main__"})
        error = None
    except BaseException:
        error = traceback.format_exc()
    output = sys.stdout.getvalue()
    sys.stdin, sys.stdout = requests, sys.__stdout__
    replies.write(json.dumps([output, error]) + "\n")
    replies.flush()
"""

_LOCK = threading.Lock()
_PROCESS = []


def run(script, payload):
    """Runs `script` with `json.dumps(payload)` as its standard input in the
    session's TensorFlow-only process; returns its last printed line,
    parsed as JSON."""
    with _LOCK:
        if not _PROCESS or _PROCESS[0].poll() is not None:
            _PROCESS[:] = [
                subprocess.Popen(
                    [sys.executable, "-c", _SERVER],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                )
            ]
        process = _PROCESS[0]
        process.stdin.write(json.dumps([script, json.dumps(payload)]) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
    assert line, f"the serving process died (exit status {process.wait()})"
    output, error = json.loads(line)
    assert error is None, error[-3000:]
    return json.loads(output.strip().splitlines()[-1])


@atexit.register
def _close():
    if _PROCESS:
        _PROCESS[0].stdin.close()
        _PROCESS[0].wait(timeout=60)
