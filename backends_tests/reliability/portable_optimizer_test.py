"""A `.keras` saved on one backend resumes training on every backend (#16).

On torch, Keras swaps `keras.optimizers.Adam` for its own
`keras.src.backend.torch.optimizers.torch_adam.Adam` and a saved compile
config records that class: loaded on TensorFlow or JAX, the model predicted
the same but the next `fit` raised a `TypeError`. kmodels' models now record
the portable `keras.optimizers` class (`get_compile_config`) and rebuild it
from files that name torch's (`compile_from_config`);
`kmodels.saving.load_model` does the same for any model.

Here a model is trained one epoch (two steps) and saved on the current
backend; every backend (this one in-process, the two others in a subprocess
each) loads it and trains three more epochs (six steps). The oracle is the
saving process itself, going on with the same six steps without saving:
the loaded optimizer state must be the saved one exactly, and the losses
must follow the same trajectory. Three files: one a `Translator` saves now
(loaded by the other backends), one written as Keras on torch used to write
it (naming torch's Adam; loaded by this backend, which needs no torch for
it), and a plain functional model written that way, through
`kmodels.saving.load_model` (loaded everywhere).

The pairs across backends (a subprocess each) run once, in the torch
environment (`cross_backend`, backends_tests/conftest.py): torch saves, and
TensorFlow and JAX resume; each backend's own environment resumes the files
written as Keras on torch used to write them. Where a target backend is not
installed, its pair is skipped (the reason names it).
"""

import importlib.util
import json
import os
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest

import kmodels
from kmodels.saving import portable_compile_config
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_loss

np_ = keras.ops.convert_to_numpy
BACKENDS = kmodels.BACKENDS
HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
MARKER = "PORTABLE-OPTIMIZER-RESULTS "
# What Keras 3.15 writes on torch for `optimizer="adam"` (checked below on
# torch itself): the class of the torch backend.
TORCH_ADAM = {
    "module": "keras.src.backend.torch.optimizers.torch_adam",
    "class_name": "Adam",
    "registered_name": "Adam",
}
# The same float32 model and data on every backend. Measured (Keras 3.15):
# the losses of another backend agree to <= 5e-5 relative after the six
# resumed steps (TensorFlow's float32 sums differ from JAX's and torch's,
# and Adam carries the differences on); resuming with a fresh Adam instead
# (the state lost) moves them by >= 2e-2 (the control test).
RTOL, ATOL = 3e-4, 1e-6
# A large step and an epsilon that damps Adam on near-zero gradients, whose
# sign the backends' float32 noise could flip.
LEARNING_RATE, EPSILON = 0.05, 1e-3
RESUMED_EPOCHS = 3
# Another backend loads the file a Translator saves now (the pair's real
# test: the optimizer variables cross backends); each process loads the
# files written the old way (the config fix, backend-independent); the
# plain model is cheap, so both do. A Translator costs one compiled train
# step per process (~10 s on JAX).
OTHER_BACKEND_CASES = ("translator", "plain_legacy")
SAME_BACKEND_CASES = ("translator_legacy", "plain_legacy")


def _data():
    rng = np.random.default_rng(0)
    context = rng.integers(4, 20, (8, 5))
    context[:, -1] = 0
    target_in = rng.integers(4, 20, (8, 4))
    target_out = rng.integers(4, 20, (8, 4))
    target_out[:, -1] = 0
    features = rng.normal(size=(8, 3)).astype("float32")
    labels = rng.normal(size=(8, 1)).astype("float32")
    return {
        "translator": ((context, target_in), target_out),
        "plain": (features, labels),
    }


def _adam():
    return keras.optimizers.Adam(LEARNING_RATE, epsilon=EPSILON)


def _fit(model, data, epochs):
    # Two batches of 4 per epoch: their gradients differ, so that Adam's
    # moments (the state under test) weigh on every update.
    x, y = data
    history = model.fit(
        x, y, batch_size=4, epochs=epochs, shuffle=False, verbose=0
    )
    return history.history["loss"]


def _continue(model, data):
    """Three more epochs (six steps, one `fit`): their mean losses."""
    return [float(v) for v in _fit(model, data, epochs=RESUMED_EPOCHS)]


def _optimizer_state(model):
    return [np_(v).tolist() for v in model.optimizer.variables]


def _as_torch_wrote_it(path, legacy_path):
    """Copies a `.keras` file, its optimizer recorded as torch's Adam."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(legacy_path, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "config.json":
                config = json.loads(data)
                config["compile_config"]["optimizer"].update(TORCH_ADAM)
                data = json.dumps(config)
            out.writestr(info, data)


def resume_all(folder, cases):
    """Loads the files `cases` (stems) in `folder` on this process' backend
    and trains each further (in-process and in the subprocesses)."""
    data = _data()
    loaders = {
        "translator": keras.saving.load_model,
        "translator_legacy": keras.saving.load_model,
        "plain_legacy": kmodels.saving.load_model,
    }
    results = {}
    for case in cases:
        model = loaders[case](os.path.join(folder, case + ".keras"))
        if case == "plain_legacy":
            # The file says what the saving backend resolved "auto" to
            # (True on JAX): Keras would train it under `torch.compile` on
            # torch (30-50 s) and XLA elsewhere. This test checks the
            # optimizer state, which no compiler changes (issue 28).
            model.jit_compile = False
        state = _optimizer_state(model)
        losses = _continue(model, data[case.split("_")[0]])
        results[case] = {
            "backend": keras.backend.backend(),
            "optimizer_class": type(model.optimizer).__module__,
            "state": state,
            "losses": losses,
            "iterations": int(np_(model.optimizer.iterations)),
            "jit_compile": model.jit_compile,
        }
    # What `compile`'s default resolves to for a fresh Translator on this
    # backend: the loaded ones must resolve "auto" the same way.
    fresh = Translator(20, 20, units=4)
    fresh.compile(optimizer=_adam(), loss=masked_loss)
    for case in cases:
        results[case]["fresh_jit_compile"] = fresh.jit_compile
    return results


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Trains one epoch on this backend, saves, then goes on three."""
    folder = str(tmp_path_factory.mktemp("portable"))
    data = _data()
    keras.utils.set_random_seed(11)
    translator = Translator(20, 20, units=4)
    translator.compile(optimizer=_adam(), loss=masked_loss)
    _fit(translator, data["translator"], epochs=1)
    path = os.path.join(folder, "translator.keras")
    translator.save(path)
    _as_torch_wrote_it(path, os.path.join(folder, "translator_legacy.keras"))

    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation="tanh")(inputs)
    plain = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    plain.compile(optimizer=_adam(), loss="mse")
    _fit(plain, data["plain"], epochs=1)
    plain_path = os.path.join(folder, "plain.keras")
    keras.saving.save_model(plain, plain_path)
    with zipfile.ZipFile(plain_path) as archive:
        recorded = json.loads(archive.read("config.json"))
    recorded = recorded["compile_config"]["optimizer"]
    _as_torch_wrote_it(plain_path, os.path.join(folder, "plain_legacy.keras"))

    expected = {}
    for case, model in (("translator", translator), ("plain", plain)):
        expected[case] = {
            "state": _optimizer_state(model),
            "losses": _continue(model, data[case]),
        }
    expected["translator_legacy"] = expected["translator"]
    expected["plain_legacy"] = expected["plain"]
    return {"folder": folder, "expected": expected, "recorded": recorded}


def test_keras_on_torch_records_its_own_class(saved):
    # The premise: plain Keras writes a backend class on torch only.
    recorded = {k: saved["recorded"][k] for k in TORCH_ADAM}
    if keras.backend.backend() == "torch":
        assert recorded == TORCH_ADAM
    else:
        assert recorded == {
            "module": "keras.optimizers",
            "class_name": "Adam",
            "registered_name": None,
        }


def test_translator_records_the_portable_class(saved):
    path = os.path.join(saved["folder"], "translator.keras")
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    optimizer = config["compile_config"]["optimizer"]
    assert optimizer["module"] == "keras.optimizers"
    assert optimizer["class_name"] == "Adam"
    assert optimizer["registered_name"] is None
    assert optimizer["config"]["learning_rate"] == pytest.approx(LEARNING_RATE)
    # Compiled with the default: the file keeps "auto", not what it
    # resolved to here (Keras would write True on JAX and, for kmodels'
    # models, on TensorFlow; torch would then train under torch.compile).
    assert config["compile_config"]["jit_compile"] == "auto"


@pytest.mark.parametrize("jit_compile", ["auto", False, True])
def test_saved_jit_compile_is_what_compile_was_given(jit_compile, tmp_path):
    data = _data()["translator"]
    model = Translator(20, 20, units=4)
    model((data[0][0][:1], data[0][1][:1]))
    # A first compile with another value, so the recorded one is the
    # last compile's.
    model.compile(optimizer=_adam(), loss=masked_loss, jit_compile=False)
    model.compile(_adam(), masked_loss, None, None, None, False, 1, jit_compile)
    path = str(tmp_path / "m.keras")
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    assert config["compile_config"]["jit_compile"] == jit_compile
    loaded = keras.saving.load_model(path)
    assert loaded.compiled
    assert type(loaded.optimizer).__name__ == "Adam"
    # Built on load (iterations, learning rate, two Adam moments per
    # variable), for the saved values to load into.
    n = len(loaded.trainable_variables)
    assert len(loaded.optimizer.variables) == 2 + 2 * n
    if jit_compile == "auto":
        assert loaded.jit_compile == model.jit_compile
    else:
        assert loaded.jit_compile is jit_compile


def test_portable_compile_config_rewrites_backend_classes_only():
    torch_sgd = {
        "module": "keras.src.backend.torch.optimizers.torch_sgd",
        "class_name": "SGD",
        "config": {"learning_rate": 0.1},
        "registered_name": "SGD",
    }
    mine = {
        "module": "my_package.optimizers",
        "class_name": "Adam",
        "config": {},
        "registered_name": "my_package>Adam",
    }
    config = {
        "optimizer": {
            "module": "keras.optimizers",
            "class_name": "LossScaleOptimizer",
            "config": {"inner_optimizer": torch_sgd},
            "registered_name": None,
        },
        "loss": mine,
    }
    before = json.dumps(config)
    out = portable_compile_config(config)
    assert json.dumps(config) == before  # input left as it was
    assert out["optimizer"]["config"]["inner_optimizer"] == {
        "module": "keras.optimizers",
        "class_name": "SGD",
        "config": {"learning_rate": 0.1},
        "registered_name": None,
    }
    assert out["loss"] == mine
    assert portable_compile_config({}) == {}
    assert portable_compile_config(None) is None


_LIBRARIES = {"jax": "jax", "tensorflow": "tensorflow", "torch": "torch"}
_SCRIPT = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('portable', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "results = module.resume_all(sys.argv[2], sys.argv[3:])\n"
    f"print({MARKER!r} + json.dumps(results))\n"
)


def _results_on(target, folder):
    if target == keras.backend.backend():
        return resume_all(folder, SAME_BACKEND_CASES)
    if importlib.util.find_spec(_LIBRARIES[target]) is None:
        pytest.skip(
            f"{target} is not installed in this environment; the tox "
            "environment `backends` has all three backends"
        )
    env = dict(os.environ, KERAS_BACKEND=target)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, env.get("PYTHONPATH")) if p
    )
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, HERE, folder, *OTHER_BACKEND_CASES],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [
        line[len(MARKER) :]
        for line in done.stdout.splitlines()
        if line.startswith(MARKER)
    ]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1])


# A file saved here and loaded on another backend (a subprocess) runs in one
# environment only (conftest's ONCE_BACKEND, torch: the backend whose Adam
# class the files used to name); loading on this backend runs everywhere.
_TARGETS = [
    pytest.param(
        target,
        marks=()
        if target == keras.backend.backend()
        else pytest.mark.cross_backend(
            reason=f"a file saved on this backend resumes on {target} in "
            "a subprocess; run where torch saves it, while every backend "
            "resumes the torch-written legacy files in its own environment"
        ),
    )
    for target in BACKENDS
]


@pytest.mark.slow(
    reason="a training subprocess per other backend (7-13 s each)"
)
@pytest.mark.parametrize("target", _TARGETS)
def test_training_resumes_on_every_backend(target, saved):
    results = _results_on(target, saved["folder"])
    own_adam = (
        "keras.src.backend.torch.optimizers.torch_adam"
        if target == "torch"
        else "keras.src.optimizers.adam"
    )
    assert sorted(results) == sorted(
        SAME_BACKEND_CASES
        if target == keras.backend.backend()
        else OTHER_BACKEND_CASES
    )
    for case, got in results.items():
        expected = saved["expected"][case]
        assert got["backend"] == target
        assert got["optimizer_class"] == own_adam, case
        # The optimizer state (iterations, learning rate, Adam moments)
        # arrives bit for bit.
        assert len(got["state"]) == len(expected["state"]), case
        for loaded, kept in zip(got["state"], expected["state"]):
            np.testing.assert_array_equal(
                np.asarray(loaded, "float32"), np.asarray(kept, "float32")
            )
        np.testing.assert_allclose(
            got["losses"], expected["losses"], rtol=RTOL, atol=ATOL
        )
        assert got["iterations"] == 2 + 2 * RESUMED_EPOCHS
        if case.startswith("translator"):
            # The file says "auto" (below), resolved on the loading
            # backend: never `torch.compile` on torch, whatever the saving
            # backend resolved it to.
            assert got["jit_compile"] == got["fresh_jit_compile"], case
            if target == "torch":
                assert got["jit_compile"] is False


def test_a_lost_optimizer_state_would_be_caught(saved):
    # Control: resuming with a fresh Adam (iterations and moments at zero)
    # moves the losses far outside the tolerance above.
    model = keras.saving.load_model(
        os.path.join(saved["folder"], "plain_legacy.keras"), compile=False
    )
    model.compile(optimizer=_adam(), loss="mse")
    losses = _continue(model, _data()["plain"])
    expected = saved["expected"]["plain"]["losses"]
    for got, kept in zip(losses, expected):
        assert abs(got - kept) > 10 * (RTOL * abs(kept) + ATOL)
