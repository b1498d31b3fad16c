"""Running a kmodels module in a TensorFlow subprocess.

Only TensorFlow writes SavedModels, so an export from a model trained on JAX
or torch runs `python -m <module> ...` with `KERAS_BACKEND=tensorflow`: the
model's `.keras` file (its weights are portable) is loaded there.
"""

import os
import subprocess
import sys


def run_in_tensorflow(module, arguments, what):
    """Runs `python -m module *arguments` under the TensorFlow backend.

    Args:
        module: str, the module to run (`kmodels.export.<name>`).
        arguments: list of str.
        what: str naming the work for the error (`"the translator"`).

    Raises:
        RuntimeError: the subprocess failed; the message ends with its
            error output.
    """
    # The folder holding the `kmodels` package (kmodels/export/<this file>).
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, env.get("PYTHONPATH")) if p
    )
    command = [sys.executable, "-m", module, *arguments]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"The TensorFlow subprocess exporting {what} failed "
            f"(exit status {done.returncode}):\n{done.stderr[-3000:]}"
        )
