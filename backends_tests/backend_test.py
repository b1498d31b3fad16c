import os

import keras
import pytest


def test_backend_matches_environment():
    # A misconfigured environment must never pass by silently testing the
    # default backend (TensorFlow) three times.
    wanted = os.environ.get("KERAS_BACKEND")
    if wanted is None:
        pytest.fail("KERAS_BACKEND is not set: run the tests through tox")
    assert keras.backend.backend() == wanted


def test_float32_is_the_default():
    assert keras.config.floatx() == "float32"
    assert keras.config.dtype_policy().name == "float32"
