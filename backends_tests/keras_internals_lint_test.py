"""Keras internals only behind one door: no module under `kmodels/` but
`kmodels/backend/keras_internals.py` and its per-backend halves
(`kmodels/backend/<backend>/keras_internals.py`) names `keras.src`,
`keras_hub.src` or a private Keras or keras-hub attribute. Comments and
docstrings count too: describe what Keras does, not where it keeps it."""

import pathlib
import re

import pytest

pytestmark = pytest.mark.backend_independent(
    reason="a scan of the source files"
)

_KMODELS = pathlib.Path(__file__).resolve().parents[1] / "kmodels"
# The modules allowed to use internals, relative to `kmodels/`.
_DOOR = re.compile(r"backend/(?:[a-z]+/)?keras_internals\.py")
# The private Keras and keras-hub attributes kmodels reads or overrides
# through `keras_internals`, matched as whole words (`getattr` strings
# too): a model's functional graph, layer walk, trainer state and choice
# of XLA, a tensor's mask and history, an optimizer's schedule, a
# keras-hub sampler's loop.
PRIVATE_NAMES = (
    "_jax_state",
    "_jax_state_synced",
    "_get_jax_state",
    "_inputs_struct",
    "_inbound_nodes",
    "_nodes_by_depth",
    "_flatten_layers",
    "_resolve_auto_jit_compile",
    "_distribute_strategy",
    "_keras_mask",
    "_keras_history",
    "_learning_rate",
    "_dtype_policy",
    "_convert_input_args",
    "_allow_non_tensor_positional_args",
    "_query_dense",
    "_key_dense",
    "_value_dense",
    "_output_dense",
    "loop_vars",
    "run_loop",
)
_INTERNAL = re.compile(
    r"\bkeras(?:_hub)?\.src\b|(?<!\w)(?:"
    + "|".join(map(re.escape, PRIVATE_NAMES))
    + r")(?!\w)"
)


def _matches(pattern, text):
    """`(line number, match)` for each match of `pattern` in `text`."""
    return [
        (number, match.group())
        for number, line in enumerate(text.splitlines(), 1)
        for match in pattern.finditer(line)
    ]


def _internals(text):
    """`(line number, match)` for each internal named in `text`."""
    return _matches(_INTERNAL, text)


def _modules():
    """`(path, path relative to kmodels/, is a door)` for every `.py`
    file under `kmodels/`."""
    for path in sorted(_KMODELS.rglob("*.py")):
        relative = path.relative_to(_KMODELS).as_posix()
        yield path, relative, bool(_DOOR.fullmatch(relative))


def test_the_rule_catches_each_form():
    text = "\n".join(
        [
            "from keras.src.backend import get_keras_mask",
            "import keras_hub.src.samplers",
            "for layer in model._flatten_layers(include_self=False):",
            'struct = getattr(model, "_inputs_struct", None)',
            "model._jax_state_synced = False",
            "sampler.run_loop = loop",
            "x = keras.ops.where(mask, a, b)  # keras.srcs, my_run_loop_x",
        ]
    )
    assert _internals(text) == [
        (1, "keras.src"),
        (2, "keras_hub.src"),
        (3, "_flatten_layers"),
        (4, "_inputs_struct"),
        (5, "_jax_state_synced"),
        (6, "run_loop"),
    ]


def test_the_doors_are_the_keras_internals_modules():
    doors = [relative for _, relative, door in _modules() if door]
    assert "backend/keras_internals.py" in doors
    assert set(doors) <= {
        "backend/keras_internals.py",
        "backend/jax/keras_internals.py",
        "backend/tensorflow/keras_internals.py",
        "backend/torch/keras_internals.py",
    }
    # The door itself names internals: the rule reads what it must.
    source = (_KMODELS / "backend/keras_internals.py").read_text("utf-8")
    assert _internals(source)


def test_keras_internals_only_in_keras_internals():
    found = [
        f"kmodels/{relative}:{number}: {name}"
        for path, relative, door in _modules()
        if not door
        for number, name in _internals(path.read_text("utf-8"))
    ]
    assert not found, (
        "Keras or keras-hub internals outside "
        "kmodels/backend/keras_internals.py (route each through a function "
        "there, with a line on why no public API serves; rephrase comments "
        "that name them):\n" + "\n".join(found)
    )


# Writes of a method, a step function or Keras' trainer state on a model
# instance (`kmodels.backend.keras_internals.set_step_function`,
# `drop_step_functions`, `override_methods`, the JAX half's
# `override_state_sync`): only the doors do them.
_INSTANCE_WRITE = re.compile(
    r"\.(?:train|test|predict)_function\s*=(?!=)"
    r"|(?<![\w.])setattr\(\s*model\b"
    r"|\bmodel\.__dict__\["
    r"|\bmodel\.(?:fit|evaluate|predict|train_on_batch|test_on_batch"
    r"|predict_on_batch|make_\w+_function|jax_state_sync)\s*=(?!=)"
)


def _instance_writes(text):
    return _matches(_INSTANCE_WRITE, text)


def test_the_instance_write_rule_catches_each_form():
    text = "\n".join(
        [
            "model.train_function = None",
            'setattr(model, f"{kind}_function", wrapped)',
            'model.__dict__["jax_state_sync"] = sync',
            "model.fit = entry('fit', True)",
            "model.make_test_function = make",
            "if model.predict_function == f:",
            "object.__setattr__(model, name, by_kind)",
            "keras_internals.set_step_function(model, kind, function)",
        ]
    )
    assert [n for n, _ in _instance_writes(text)] == [1, 2, 3, 4, 5]


def test_methods_and_step_functions_written_only_in_the_doors():
    found = [
        f"kmodels/{relative}:{number}: {what}"
        for path, relative, door in _modules()
        if not door
        for number, what in _instance_writes(path.read_text("utf-8"))
    ]
    assert not found, (
        "a method, step function or trainer state written on a model "
        "instance outside kmodels/backend/keras_internals.py (use its "
        "set_step_function, drop_step_functions or override_methods):\n"
        + "\n".join(found)
    )


def test_no_thread_local_state_in_seq2seq():
    # What `Translator.call` returns is decided by its inputs (the fused
    # train step's request), never by state another call could see.
    found = [
        f"kmodels/{relative}:{number}"
        for path, relative, _ in _modules()
        if relative.startswith("seq2seq/")
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if "threading.local" in line or "contextvars" in line
    ]
    assert not found, "thread-local state in kmodels/seq2seq:\n" + "\n".join(
        found
    )
