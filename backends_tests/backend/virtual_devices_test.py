"""`virtual_cpu_devices(backend=...)` names the running backend or fails."""

import keras
import pytest

from kmodels.distributed import virtual_cpu_devices


def test_another_backend_than_the_running_one_is_refused():
    running = keras.backend.backend()
    other = "torch" if running != "torch" else "jax"
    message = (
        f"virtual_cpu_devices(backend={other!r}): Keras runs the "
        f"{running!r} backend; set KERAS_BACKEND={other} before Keras is "
        "imported."
    )
    with pytest.raises(ValueError) as error:
        virtual_cpu_devices(2, backend=other)
    assert str(error.value) == message
