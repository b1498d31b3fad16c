"""Shared fixtures for the backend matrix.

Every test runs once per tox environment (tensorflow, jax, torch); the backend
is fixed by `KERAS_BACKEND` before Keras is imported.
"""

import importlib.metadata
import os

# `tox -e distributed` sets KMODELS_VIRTUAL_DEVICES=4: the backend must split
# the CPU before it creates its devices, so this runs before anything else.
_VIRTUAL_DEVICES = int(os.environ.get("KMODELS_VIRTUAL_DEVICES") or 0)
if _VIRTUAL_DEVICES:
    from kmodels.distributed import virtual_cpu_devices

    virtual_cpu_devices(
        _VIRTUAL_DEVICES, backend=os.environ.get("KERAS_BACKEND")
    )

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from backends_tests import fast_exit  # noqa: E402
from backends_tests import stall_watch  # noqa: E402
from backends_tests import tf_data_guard  # noqa: E402
from kmodels.testing.parity import ParityStore  # noqa: E402

# The multi-device tests need the virtual devices above; the per-backend
# environments (one device) leave them to `tox -e distributed`.
collect_ignore = [] if _VIRTUAL_DEVICES else ["distributed"]

_STORE = None


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def pytest_configure(config):
    # Off unless KMODELS_TEST_STALL_SECONDS is set (stall_watch.py says why).
    stall_watch.register(config)
    # TensorFlow: iterators a test leaves alive go at its end (why there).
    tf_data_guard.register(config, keras.backend.backend())
    # The process ends without the interpreter's teardown (why there).
    fast_exit.register(config)


def pytest_report_header(config):
    backend = keras.backend.backend()
    lib = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend]
    return [
        f"keras backend: {backend} (KERAS_BACKEND="
        f"{os.environ.get('KERAS_BACKEND', '<unset>')})",
        f"virtual CPU devices: {_VIRTUAL_DEVICES or 'not requested'}",
        f"versions: keras {keras.__version__}, keras-hub "
        f"{_version('keras-hub')}, {lib} {_version(lib)}, numpy "
        f"{np.__version__}",
    ]


def pytest_sessionfinish(session, exitstatus):
    if _STORE is not None and os.environ.get("KMODELS_PARITY_DIR"):
        _STORE.save()


@pytest.fixture(scope="session")
def parity():
    """A `ParityStore` for this backend; saved to `$KMODELS_PARITY_DIR` at the
    end of the session (when set), for the `parity` tox environment."""
    global _STORE
    if _STORE is None:
        _STORE = ParityStore(
            os.environ.get("KMODELS_PARITY_DIR", ""), keras.backend.backend()
        )
    return _Recorder(_STORE)


class _Recorder:
    """Converts backend tensors to NumPy before they reach the store."""

    def __init__(self, store):
        self.store = store

    def record(self, name, array, atol, rtol):
        self.store.record(
            name, keras.ops.convert_to_numpy(array), atol=atol, rtol=rtol
        )


@pytest.fixture
def rng():
    """A NumPy generator with a fixed seed: the same draws on every backend."""
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _clear_keras_session():
    # free_memory=False: a gc.collect() per test costs ~1 s once TensorFlow
    # is imported; the session-wide state is what must be reset.
    keras.utils.clear_session(free_memory=False)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def no_first_reserve(monkeypatch):
    """JAX's first reserve of small tables off
    (`kmodels.backend.common.reserve.first_reserve`): the reserves are then
    set by growths only, as the tests of their escalation count them."""
    from kmodels.backend.common import reserve

    monkeypatch.setattr(reserve, "FIRST_RESERVE_BYTES", 0)


@pytest.fixture
def randomize(rng):
    """Returns `fill(layer, scale=0.5)`: sets every weight of a built layer to
    uniform draws in `[-scale, scale]` (float64 copies are returned, in
    `layer.weights` order, for the oracle)."""

    def fill(layer, scale=0.5):
        values = [
            rng.uniform(-scale, scale, tuple(w.shape)) for w in layer.weights
        ]
        layer.set_weights([v.astype("float32") for v in values])
        # The oracle gets exactly the float32 values Keras holds.
        return [v.astype("float32").astype("float64") for v in values]

    return fill


# Tests of code that does not depend on the Keras backend (NumPy-only
# bookkeeping, source scans, fresh processes without Keras) carry
# `@pytest.mark.backend_independent(reason="...")`: they run once, in this
# environment, the fastest per test, and the others skip them, saying so.
# Cross-backend round trips (a file saved on one backend, loaded on the
# others in subprocesses) carry `@pytest.mark.cross_backend(reason="...")`:
# the same, since one environment's run already crosses every backend.
ONCE_BACKEND = "torch"
_RUN_ONCE = {
    "backend_independent": ("why no backend changes it", "backend-independent"),
    "cross_backend": ("which backends it crosses", "cross-backend round trip"),
}


def pytest_collection_modifyitems(config, items):
    # A test above 20 s on the 2-core machine carries
    # `@pytest.mark.slow(reason="...")`: the reason is not optional.
    backend = keras.backend.backend()
    for item in items:
        for marker in item.iter_markers("slow"):
            if not marker.kwargs.get("reason"):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.slow needs a one-line "
                    'reason="..." (what makes it take over 20 s)'
                )
        for name, (why, what) in _RUN_ONCE.items():
            for marker in item.iter_markers(name):
                reason = marker.kwargs.get("reason")
                if not reason:
                    raise pytest.UsageError(
                        f"{item.nodeid}: @pytest.mark.{name} needs a "
                        f'one-line reason="..." ({why})'
                    )
                if backend != ONCE_BACKEND:
                    item.add_marker(
                        pytest.mark.skip(
                            reason=f"{what}, run once in the "
                            f"{ONCE_BACKEND} environment: {reason}"
                        )
                    )
