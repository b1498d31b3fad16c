"""GrowableEmbedding: checked arguments, reproducible seeds, verified state.

Issue #16: `GrowableEmbedding(2.5)` was truncated, `seed=-1` or
`growth_factor=inf` failed late, a negative table learning rate trained
backwards, `seed=None` ignored `keras.utils.set_random_seed`, and a
`.keras` file with zeroed bytes in the table loaded silently. Each case
runs on every backend.
"""

import io
import math
import os
import re
import subprocess
import sys
import warnings
import zipfile
import zlib

import h5py
import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.growable import SparseAdam
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex

_G = "GrowableEmbedding"


# -------------------------------------------------------------- constructor
@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (
            (2.5,),
            {},
            f"{_G}: `output_dim` must be an integer >= 1; got 2.5 (float).",
        ),
        (
            (True,),
            {},
            f"{_G}: `output_dim` must be an integer >= 1; got True (bool).",
        ),
        ((0,), {}, f"{_G}: `output_dim` must be an integer >= 1; got 0 (int)."),
        (
            (4,),
            {"initial_capacity": "8"},
            f"{_G}: `initial_capacity` must be an integer >= 1; got '8' (str).",
        ),
        (
            (4,),
            {"max_capacity": 16.0},
            f"{_G}: `max_capacity` must be an integer >= 1; got 16.0 (float).",
        ),
        (
            (4,),
            {"initial_capacity": 8, "max_capacity": 4},
            f"{_G}: `max_capacity` must be >= initial_capacity=8; got 4.",
        ),
        (
            (4,),
            {"growth_factor": math.inf},
            f"{_G}: `growth_factor` must be "
            "a finite number > 1; got inf (float).",
        ),
        (
            (4,),
            {"growth_factor": 1},
            f"{_G}: `growth_factor` must be a finite number > 1; got 1 (int).",
        ),
        (
            (4,),
            {"growth_factor": "2"},
            f"{_G}: `growth_factor` must be a "
            "finite number > 1; got '2' (str).",
        ),
        (
            (4,),
            {"seed": -1},
            f"{_G}: `seed` must be an integer in [0, "
            "9223372036854775807]; got -1 (int).",
        ),
        (
            (4,),
            {"seed": 2**63},
            f"{_G}: `seed` must be an integer in [0, "
            "9223372036854775807]; got 9223372036854775808 (int).",
        ),
        (
            (4,),
            {"seed": 1.0},
            f"{_G}: `seed` must be an integer in [0, "
            "9223372036854775807]; got 1.0 (float).",
        ),
        (
            (4,),
            {"optimizer": ("sgd", {"learning_rate": -1})},
            f"{_G}: "
            "`optimizer.learning_rate` must be a finite number > 0; got -1 "
            "(int).",
        ),
        (
            (4,),
            {"optimizer": {"kind": "adam", "learning_rate": math.nan}},
            f"{_G}: `optimizer.learning_rate` must be a finite number > 0; got"
            " nan (float).",
        ),
        (
            (4,),
            {"optimizer": ("adam", {"beta_1": 1.0})},
            f"{_G}: "
            "`optimizer.beta_1` must be a finite number in [0, 1); got 1.0 "
            "(float).",
        ),
        (
            (4,),
            {"optimizer": ("adam", {"beta_2": -0.1})},
            f"{_G}: "
            "`optimizer.beta_2` must be a finite number in [0, 1); got "
            "-0.1 (float).",
        ),
        (
            (4,),
            {"optimizer": ("adam", {"epsilon": 0})},
            f"{_G}: "
            "`optimizer.epsilon` must be a finite number > 0; got 0 (int).",
        ),
        (
            (4,),
            {"optimizer": ("sgd", {"beta_1": 0.9})},
            f"{_G}: "
            "`optimizer` 'sgd' takes hyperparameters ['learning_rate', "
            "'momentum', 'nesterov']; got unknown ['beta_1'].",
        ),
        (
            (4,),
            {"optimizer": ("rmsprop", {})},
            f"{_G}: `optimizer` must be "
            "one of ('sgd', 'adagrad', 'adam'); got 'rmsprop' (str).",
        ),
        (
            (4,),
            {"unseen": "skip"},
            f"{_G}: `unseen` must be one of ('zeros',"
            " 'oov', 'error'); got 'skip' (str).",
        ),
        (
            (4,),
            {"oov_id": 1.5},
            f"{_G}: `oov_id` must be an integer >= 0; got 1.5 (float).",
        ),
        (
            (4,),
            {"unseen": "oov", "initial_capacity": 4, "oov_id": 4},
            f'{_G}: unseen="oov" needs an `oov_id` in [0, initial_capacity=4)'
            "; got oov_id=4.",
        ),
        (
            (4,),
            {"mask_zero": "False"},
            f"{_G}: `mask_zero` must be True or False; got 'False' (str).",
        ),
        (
            (4,),
            {"key_index": "ids"},
            f"{_G}: `key_index` must be a "
            "kmodels.layers.KeyIndex or None; got str.",
        ),
    ],
)
def test_constructor_arguments_are_checked(args, kwargs, message):
    with pytest.raises(ValueError) as caught:
        GrowableEmbedding(*args, **kwargs)
    assert str(caught.value) == message


def test_keras_optimizer_with_negative_learning_rate_is_refused():
    with pytest.raises(ValueError) as caught:
        GrowableEmbedding(4, optimizer=keras.optimizers.SGD(-1.0))
    assert str(caught.value) == (
        f"{_G}: `optimizer.learning_rate` must be a finite number > 0; got "
        "-1.0 (float)."
    )


def test_numpy_arguments_and_older_configs_still_work():
    layer = GrowableEmbedding(
        np.int64(4), initial_capacity=np.int32(8), growth_factor=np.float32(2)
    )
    assert (layer.output_dim, layer.initial_capacity) == (4, 8)
    assert type(layer.output_dim) is int and layer.growth_factor == 2.0
    # A config as kmodels wrote it before these checks (JSON types).
    legacy = {
        "name": "items",
        "trainable": True,
        "dtype": "float32",
        "output_dim": 3,
        "initial_capacity": 2,
        "growth_factor": 1.5,
        "max_capacity": None,
        "embeddings_initializer": {
            "module": "keras.initializers",
            "class_name": "RandomUniform",
            "config": {"minval": -0.05, "maxval": 0.05, "seed": None},
            "registered_name": None,
        },
        "optimizer": {
            "kind": "adam",
            "learning_rate": 0.001,
            "beta_1": 0.9,
            "beta_2": 0.999,
            "epsilon": 1e-07,
        },
        "unseen": "zeros",
        "oov_id": None,
        "mask_zero": False,
        "seed": 1234567,
        "key_index": keras.saving.serialize_keras_object(
            KeyIndex("string", name="ids")
        ),
    }
    layer = GrowableEmbedding.from_config(legacy)
    assert layer.seed == 1234567 and layer.growth_factor == 1.5
    assert layer.optimizer == SparseAdam(
        **{
            k: legacy["optimizer"][k]
            for k in ("learning_rate", "beta_1", "beta_2", "epsilon")
        }
    )
    assert layer.key_index.key_dtype == "string"
    assert GrowableEmbedding.from_config(layer.get_config()).get_config() == (
        layer.get_config()
    )


# --------------------------------------------------------------------- seed
def _table(layer):
    if not layer.built:
        layer.build()
    return keras.ops.convert_to_numpy(layer.embeddings.value)


def test_unseeded_tables_follow_set_random_seed():
    keras.utils.set_random_seed(0)
    first = GrowableEmbedding(4, initial_capacity=8)
    second = GrowableEmbedding(4, initial_capacity=8)
    keras.utils.set_random_seed(0)
    again = GrowableEmbedding(4, initial_capacity=8)
    # Drawn as Keras' own initializers draw theirs.
    keras.utils.set_random_seed(0)
    assert first.seed == keras.initializers.RandomUniform().seed
    assert again.seed == first.seed != second.seed
    np.testing.assert_array_equal(_table(again), _table(first))
    assert not np.array_equal(_table(second), _table(first))
    # The drawn seed is in the config: a clone has the same table.
    clone = GrowableEmbedding.from_config(first.get_config())
    np.testing.assert_array_equal(_table(clone), _table(first))


def test_unseeded_table_is_the_same_in_a_fresh_process():
    keras.utils.set_random_seed(0)
    here = GrowableEmbedding(4, initial_capacity=8)
    script = (
        "import keras\n"
        "from kmodels.layers import GrowableEmbedding\n"
        "keras.utils.set_random_seed(0)\n"
        "layer = GrowableEmbedding(4, initial_capacity=8)\n"
        "layer.build()\n"
        "table = keras.ops.convert_to_numpy(layer.embeddings.value)\n"
        "print(layer.seed, table.tobytes().hex())\n"
    )
    env = dict(os.environ, KERAS_BACKEND=keras.backend.backend())
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    ).stdout.split()
    assert int(out[-2]) == here.seed
    assert out[-1] == _table(here).tobytes().hex()


def _splitmix64(z):
    """Pure-Python SplitMix64 (Steele et al., 2014): the oracle."""
    m = 2**64 - 1
    z = (z + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_explicit_seed_gives_the_documented_table_on_every_backend():
    """Row i, column j of a `"uniform"` table is -0.05 + 0.1 * u with u
    from SplitMix64 of (seed, i, j): computed here with Python integers."""
    seed, dim = 7, 3
    layer = GrowableEmbedding(dim, initial_capacity=5, seed=seed)
    key = _splitmix64(2 * seed)
    expected = np.array(
        [
            [
                -0.05
                + 0.1
                * (((_splitmix64(key ^ (i * dim + j)) >> 40) + 0.5) / 2.0**24)
                for j in range(dim)
            ]
            for i in range(5)
        ]
    ).astype("float32")
    np.testing.assert_array_equal(_table(layer), expected)


# ------------------------------------------------------------- saved state
def _crc32(value):
    """The documented checksum, computed independently: CRC32 of the
    entry's dtype name and shape (as text), then of its bytes."""
    value = np.ascontiguousarray(value)
    header = f"{value.dtype.name}{value.shape}".encode()
    return zlib.crc32(value.tobytes(), zlib.crc32(header))


def _model():
    index = KeyIndex("string")
    table = GrowableEmbedding(
        8, initial_capacity=64, seed=3, key_index=index, name="table"
    )
    ids = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(ids, keras.ops.sum(table(ids), axis=-1))
    model.compile(optimizer="sgd", loss="mse")
    x = index.lookup([["a", "bb"], ["ccc", "é"], ["a", "dd"]]).astype("int32")
    model.fit(x, np.ones((3, 2)), verbose=0, callbacks=[EmbeddingGrowth()])
    return model, table


def _state(table):
    variables = [table.embeddings, *table.slot_variables, table.step]
    variables.append(table.trained_at)  # saved since delta export kept it
    arrays = [keras.ops.convert_to_numpy(v.value).copy() for v in variables]
    return arrays, table.key_index.keys(), table.key_index.frozen


def _assert_same(a, b):
    for x, y in zip(a[0], b[0]):
        np.testing.assert_array_equal(x, y)
    assert a[1:] == b[1:]


def _dataset(h5, suffix):
    names = []
    h5.visit(names.append)  # `visit` stops at a callback's first non-None
    (name,) = [n for n in names if n.endswith(suffix)]
    return h5[name]


def _rewrite(src, dst, edit_h5=None, edit_bytes=None):
    """Copies the `.keras` zip `src` to `dst`, editing `model.weights.h5`
    with h5py and/or as raw bytes; `zipfile` writes fresh CRCs, so only
    kmodels' own checks can notice."""
    with zipfile.ZipFile(src) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    data = members["model.weights.h5"]
    if edit_h5 is not None:
        buffer = io.BytesIO(data)
        with h5py.File(buffer, "r+") as h5:
            edit_h5(h5)
        data = buffer.getvalue()
    if edit_bytes is not None:
        with h5py.File(io.BytesIO(data), "r") as h5:
            data = edit_bytes(h5, bytearray(data))
    members["model.weights.h5"] = bytes(data)
    with zipfile.ZipFile(dst, "w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)


@pytest.fixture
def saved(tmp_path):
    model, table = _model()
    path = str(tmp_path / "good.keras")
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        with h5py.File(io.BytesIO(archive.read("model.weights.h5"))) as h5:
            checksums = {
                "table": _dataset(h5, "growable_embedding/vars/checksum")[()],
                "index": _dataset(h5, "key_index/vars/checksum")[()],
            }
    return model, table, path, checksums


def _refused_everywhere(model, table, path, message):
    """`load_model` and `load_weights` (into the live model, after one more
    training step) both raise `message`; returns the live state before."""
    with pytest.raises(ValueError, match=re.escape(message)):
        keras.saving.load_model(path)
    model.fit(
        table.key_index.lookup([["a", "ee"]]).astype("int32"),
        np.ones((1, 2)),
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    before = _state(table)
    with pytest.raises(ValueError, match=re.escape(message)):
        model.load_weights(path)
    return before


def test_good_file_round_trips_with_checksums(saved):
    model, table, path, checksums = saved
    loaded = keras.saving.load_model(path)
    clone = loaded.get_layer("table")
    _assert_same(_state(clone), _state(table))
    arrays, keys, _ = _state(table)
    keys = [k.encode() for k in keys]
    expected = [_crc32(a) for a in arrays]
    np.testing.assert_array_equal(checksums["table"], expected)
    np.testing.assert_array_equal(
        checksums["index"],
        [
            _crc32(np.frombuffer(b"".join(keys), np.uint8)),
            _crc32(np.array([len(k) for k in keys], np.int64)),
            _crc32(np.array(0, np.int64)),
        ],
    )


def test_changed_table_value_is_refused(saved, tmp_path):
    model, table, path, checksums = saved
    bad = str(tmp_path / "bad.keras")
    changed = {}

    def edit(h5):
        data = _dataset(h5, "growable_embedding/vars/embeddings")
        values = data[()]
        values[5, 2] += 1.0
        data[...] = values
        changed["crc"] = _crc32(values)

    _rewrite(path, bad, edit_h5=edit)
    before = _refused_everywhere(
        model,
        table,
        bad,
        "GrowableEmbedding 'table': saved entry 'embeddings' does not match "
        f"its checksum (CRC32 stored {int(checksums['table'][0]):#010x}, "
        f"computed {changed['crc']:#010x} over dtype float32, shape (64, 8) "
        "and bytes). The weights file is corrupted.",
    )
    # The table, its slots and step are as they were. (Keras goes on to
    # the key index, a layer of its own, which loads the file's keys.)
    _assert_same(_state(table)[:1], before[:1])


def test_zeroed_bytes_in_the_table_are_refused(saved, tmp_path):
    """The probe: 256 zero bytes in the middle of the table's data."""
    model, table, path, checksums = saved
    bad = str(tmp_path / "zeroed.keras")
    zeroed = {}

    def edit(h5, data):
        dataset = _dataset(h5, "growable_embedding/vars/embeddings")
        start = dataset.id.get_offset() + dataset.nbytes // 2 - 128
        data[start : start + 256] = bytes(256)
        values = dataset[()].copy().reshape(-1).view(np.uint8)
        middle = dataset.nbytes // 2 - 128
        values[middle : middle + 256] = 0
        zeroed["crc"] = _crc32(values.view(np.float32).reshape(64, 8))
        return data

    _rewrite(path, bad, edit_bytes=edit)
    before = _refused_everywhere(
        model,
        table,
        bad,
        "GrowableEmbedding 'table': saved entry 'embeddings' does not match "
        f"its checksum (CRC32 stored {int(checksums['table'][0]):#010x}, "
        f"computed {zeroed['crc']:#010x} over dtype float32, shape (64, 8) "
        "and bytes). The weights file is corrupted.",
    )
    # The table, its slots and step are as they were. (Keras goes on to
    # the key index, a layer of its own, which loads the file's keys.)
    _assert_same(_state(table)[:1], before[:1])


def test_crafted_key_lengths_are_refused(saved, tmp_path):
    model, table, path, checksums = saved
    bad = str(tmp_path / "lengths.keras")
    lengths = np.array([2, 1, 3, 2, 2], np.int64)  # was [1, 2, 3, 2, 2]

    def edit(h5):
        _dataset(h5, "key_index/vars/key_lengths")[...] = lengths

    _rewrite(path, bad, edit_h5=edit)
    before = _refused_everywhere(
        model,
        table,
        bad,
        "KeyIndex 'key_index': saved entry 'key_lengths' does not match its "
        f"checksum (CRC32 stored {int(checksums['index'][1]):#010x}, "
        f"computed {_crc32(lengths):#010x} over dtype int64, shape (5,) and "
        "bytes). The weights file is corrupted.",
    )
    assert before[1] == ["a", "bb", "ccc", "é", "dd", "ee"]
    assert table.key_index.keys() == before[1]


def test_slot_of_another_shape_is_refused_before_any_change(saved, tmp_path):
    """Without checksums (an older file), shapes are still checked before
    the layer changes."""
    model, table, path, _ = saved
    bad = str(tmp_path / "slots.keras")

    def edit(h5):
        group = _dataset(h5, "growable_embedding/vars/momentum").parent
        del group["momentum"], group["checksum"]
        group["momentum"] = np.zeros((32, 8), np.float32)

    _rewrite(path, bad, edit_h5=edit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = _refused_everywhere(
            model,
            table,
            bad,
            "GrowableEmbedding 'table': saved entry 'momentum' (an optimizer "
            "slot) has shape (32, 8); the saved table has (64, 8).",
        )
    # The table, its slots and step are as they were. (Keras goes on to
    # the key index, a layer of its own, which loads the file's keys.)
    _assert_same(_state(table)[:1], before[:1])


def test_file_saved_without_checksums_still_loads(saved, tmp_path):
    model, table, path, _ = saved
    old = str(tmp_path / "old.keras")

    def edit(h5):
        del _dataset(h5, "growable_embedding/vars/checksum").parent["checksum"]
        del _dataset(h5, "key_index/vars/checksum").parent["checksum"]

    _rewrite(path, old, edit_h5=edit)
    with pytest.warns(UserWarning) as caught:
        loaded = keras.saving.load_model(old)
    messages = [str(w.message) for w in caught if "checksum" in str(w.message)]
    assert messages == [
        f"{owner}: the saved state has no checksum (saved before kmodels "
        "stored one); it is loaded without verification."
        for owner in ("GrowableEmbedding 'table'", "KeyIndex 'key_index'")
    ]
    _assert_same(_state(loaded.get_layer("table")), _state(table))


def test_state_saved_before_trained_at_loads_with_no_row_trained():
    # Files written before the table kept `trained_at` (each row's last
    # step, for delta export) hold the table, slots and step with four
    # checksums: they load, every row recorded as never trained.
    table = GrowableEmbedding(3, initial_capacity=4, optimizer="sgd", seed=2)
    ids = keras.Input((1,), dtype="int32")
    model = keras.Model(ids, table(ids))
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.array([[1], [2]]), np.ones((2, 1, 3)), verbose=0)
    store = {}
    table.save_own_variables(store)
    assert np.asarray(store["trained_at"])[[1, 2], 0].tolist() == [1.0, 1.0]
    old = {k: np.asarray(v) for k, v in store.items() if k != "trained_at"}
    names = ("embeddings", "step")  # SGD keeps no slot
    old["checksum"] = np.array([_crc32(old[n]) for n in names], np.int64)
    fresh = GrowableEmbedding(3, initial_capacity=4, optimizer="sgd", seed=2)
    fresh.load_own_variables(old)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(fresh.embeddings.value), old["embeddings"]
    )
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(fresh.trained_at.value), np.zeros((4, 1))
    )
    mark = fresh.mark()
    assert fresh.delta(since=mark).rows.size == 0
