"""A module for `kmodels.export.run_in_tensorflow` that exports nothing:
the tests of the TensorFlow worker (`kmodels.export.tensorflow_process`)
run it instead of a real export, which takes seconds.

`_main([path, action])` writes `{"pid", "backend"}` of the process it runs
in to `path` (JSON), then: `"ok"` returns; `"raise"` prints a line to the
error output and raises `ValueError`; `"die"` ends the process (status 3).
"""

import json
import os
import sys

import keras


def _main(arguments):
    path, action = arguments
    found = {"pid": os.getpid(), "backend": keras.backend.backend()}
    with open(path, "w") as file:
        json.dump(found, file)
    if action == "raise":
        print("the probe's error output", file=sys.stderr, flush=True)
        raise ValueError("the probe raised")
    if action == "die":
        os._exit(3)
