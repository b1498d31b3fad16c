"""Running a kmodels export module under TensorFlow.

Only TensorFlow writes SavedModels. On the TensorFlow backend the module's
`_main` runs in this process; from a model trained on JAX or torch it runs
as `python -m <module> ...` with `KERAS_BACKEND=tensorflow`, where the
model's `.keras` file (its weights are portable) is loaded.
"""

import importlib
import os
import subprocess
import sys

import keras


def run_in_tensorflow(module, arguments, what):
    """Runs `module` (`python -m module *arguments`) under TensorFlow.

    On the TensorFlow backend it runs here, `module._main(arguments)`:
    starting a second TensorFlow process took most of an export's 18-29 s.
    The module loads its own copy of the model from the files the caller
    wrote, so the caller's model is not touched either way.

    Args:
        module: str, the module to run (`kmodels.export.<name>`).
        arguments: list of str.
        what: str naming the work for the error (`"the translator"`).

    Raises:
        RuntimeError: the export failed; the message ends with the error
            (the subprocess's error output, or the exception raised here).
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
