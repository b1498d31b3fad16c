"""Multi-process data-parallel training, launched as on several hosts.

Each test starts its worker processes (`workers/`) on localhost the way a
user starts one process per host, plus one single-process reference run,
and compares the trained weights (one epoch, global batch 16, 4 SGD steps).

JAX (runs in the jax session of `tox -e distributed`): 2 processes x 2
virtual CPU devices, `keras.distribution.initialize` then `DataParallel`
over the 4 global devices; cross-process collectives are gloo over TCP.
torch (runs in the torch session): `keras.distribution` has no torch
backend; the user's tool is torch `DistributedDataParallel` (gloo) around
the Keras model, which is a `torch.nn.Module` there. In the other sessions
each test pins what its API does on that backend instead of relaunching
the workers (3x the time for the same result).

JAX also grows a row-sharded `GrowableEmbedding` inside `fit` across the
2 processes (`workers/jax_growth_worker.py`), on two meshes, against a
one-device reference trained in this session.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from backends_tests.distributed.conftest import max_abs_difference

BACKEND = keras.backend.backend()
WORKERS = Path(__file__).parent / "workers"

# The workers train 4 SGD steps (lr 0.1) in float32. The multi-process runs
# sum the per-device (JAX) or per-process (DDP) gradients in another order
# than one device does, so gradients differ in their last bits (~1e-7
# relative) and so do the weights. Measured: 6e-8 (JAX), 1.2e-7 (torch),
# one float32 step of a layer-norm gamma near 1. 1e-6 keeps an 8x margin and
# lies far below what training moves (0.07-0.11).
PARITY_ATOL = 1e-6

# A guard against a hung worker (e.g. waiting for a peer that died), not a
# speed bound: the 3 processes of a launch use 30-45 s of CPU in all (about
# 20-25 s on 2 idle cores); measured 64-125 s on a shared, loaded machine.
TIMEOUT_S = 300


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(script, runs, tmp_path):
    """Starts one process per `runs` entry (its arguments after the output
    file) at the same time, waits for all, and returns their `.npz`
    records in order."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    env["KERAS_BACKEND"] = "jax" if "jax" in script else "torch"
    outs = [tmp_path / f"run_{i}.npz" for i in range(len(runs))]
    logs = [tmp_path / f"run_{i}.log" for i in range(len(runs))]
    processes = []
    for out, log, args in zip(outs, logs, runs):
        with open(log, "w") as stream:
            command = [sys.executable, str(WORKERS / script), str(out)]
            processes.append(
                subprocess.Popen(
                    command + args,
                    env=env,
                    stdout=stream,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for p in processes:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, log, args in zip(processes, logs, runs):
        # -9: killed by the hang guard above.
        assert p.returncode == 0, (
            f"{script} {args} exited with {p.returncode} (-9: still running "
            f"after {TIMEOUT_S} s):\n{log.read_text()[-3000:]}"
        )
    return [dict(np.load(out)) for out in outs]


def _weights(record, prefix):
    return {
        key[len(prefix) + 1 :]: value
        for key, value in record.items()
        if key.startswith(prefix + "/")
    }


def test_two_jax_processes_train_like_one_device(tmp_path):
    if BACKEND != "jax":
        # keras.distribution.initialize forwards to the backend's
        # distribution_lib: TensorFlow's has no `initialize`, torch has no
        # distribution_lib at all. (The processes run in the jax session.)
        message = {
            "tensorflow": "has no attribute 'initialize'",
            "torch": "'NoneType' object has no attribute 'initialize'",
        }[BACKEND]
        with pytest.raises(AttributeError, match=message):
            keras.distribution.initialize("localhost:1234", 2, 0)
        return
    coordinator = f"localhost:{_free_port()}"
    multi = ["--num-processes", "2", "--coordinator", coordinator]
    multi += ["--local-devices", "2"]
    reference, first, second = _launch(
        "jax_worker.py",
        [[], multi + ["--process-id", "0"], multi + ["--process-id", "1"]],
        tmp_path,
    )
    for index, record in enumerate((first, second)):
        assert record["process_count"] == 2
        assert record["process_index"] == index
        assert record["local_devices"] == 2
        assert record["global_devices"] == 4
        # Every process lists all 4 devices; JAX numbers process p's CPU
        # devices from p * 2048.
        assert list(record["keras_devices"]) == [
            "cpu:0",
            "cpu:1",
            "cpu:2048",
            "cpu:2049",
        ]
        assert list(record["mesh_shape"]) == [4]
        # NumPy inputs are not sharded for the user: with auto-sharding on
        # (the default), fit refuses them before any step.
        assert "numpy_error" in record, "fit accepted NumPy inputs"
        assert str(record["numpy_error"]).startswith(
            "When using a multi-worker distribution with auto-sharding "
            "enabled, the data must be provided as a `tf.data.Dataset` "
            "instance. Received: type(x)=<class 'numpy.ndarray'>."
        )
    assert reference["global_devices"] == 1
    initial = _weights(reference, "initial")
    expected = _weights(reference, "reference")
    # Training moves the weights (the table on the rows it had at first).
    moved = max(
        np.max(np.abs(expected[path][: len(start)] - start))
        for path, start in initial.items()
        if start.ndim
    )
    assert moved > 1e-2
    tf_data = _weights(first, "tf_data")
    assert max_abs_difference(tf_data, expected) <= PARITY_ATOL
    # Both processes hold the same replicated weights, and the NumPy run
    # that each process sharded itself (auto_shard_dataset=False) gives the
    # same global batches as Keras' tf.data sharding: same bits (a process
    # feeding the whole batch would make a global batch of 32, another
    # summation, other bits).
    assert max_abs_difference(tf_data, _weights(second, "tf_data")) == 0.0
    for record in (first, second):
        sharded = _weights(record, "numpy_sharded")
        assert max_abs_difference(sharded, tf_data) == 0.0


def test_torch_ddp_processes_train_like_one_process(tmp_path):
    if BACKEND != "torch":
        import torch

        # DistributedDataParallel wraps a torch.nn.Module: on JAX and
        # TensorFlow a Keras model is not one, so DDP is the torch route
        # only. (The processes run in the torch session.)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        assert not isinstance(model, torch.nn.Module)
        return
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    ddp = ["--world-size", "2", "--init-method", init_method]
    reference, first, second = _launch(
        "torch_ddp_worker.py",
        [[], ddp + ["--rank", "0"], ddp + ["--rank", "1"]],
        tmp_path,
    )
    assert all(r["is_module"] for r in (reference, first, second))
    assert [int(r["steps"]) for r in (reference, first, second)] == [4] * 3
    assert [int(r["local_batch"]) for r in (reference, first)] == [16, 8]
    expected = _weights(reference, "weights")
    assert max_abs_difference(expected, _weights(reference, "initial")) > 1e-2
    weights = _weights(first, "weights")
    assert max_abs_difference(weights, expected) <= PARITY_ATOL
    # DDP keeps the ranks identical: same averaged gradients, same steps.
    assert max_abs_difference(weights, _weights(second, "weights")) == 0.0


def test_two_jax_processes_grow_a_row_sharded_table_inside_fit(tmp_path):
    if BACKEND != "jax":
        # Multi-process Keras is JAX's (keras.distribution.initialize,
        # refused elsewhere: test_two_jax_processes_train_like_one_device).
        # What kmodels does differently there, reading a batch that spans
        # other processes' devices, is plain `convert_to_numpy` here.
        from kmodels.backend import growth

        ids = keras.ops.convert_to_tensor([[1, 2], [3, 4]], "int32")
        np.testing.assert_array_equal(
            growth.host_array(ids), keras.ops.convert_to_numpy(ids)
        )
        return
    from backends_tests.distributed.workers import sharded_growth_task as task

    coordinator = f"localhost:{_free_port()}"
    multi = ["--num-processes", "2", "--coordinator", coordinator]
    records = _launch(
        "jax_growth_worker.py",
        [multi + ["--process-id", "0"], multi + ["--process-id", "1"]],
        tmp_path,
    )
    # The reference: one device, this session, no distribution.
    model, table = task.build_model()
    initial = {
        v.path: keras.ops.convert_to_numpy(v.value) for v in model.variables
    }
    x, y = task.data()
    task.train(model, x, y, task.GLOBAL_BATCH)
    expected = {
        v.path: keras.ops.convert_to_numpy(v.value) for v in model.variables
    }
    assert [e["to"] for e in table.growth_log] == [16, 32, 64]
    # Training moves the weights (the table on the rows it had at first).
    moved = max(
        np.max(np.abs(expected[path][: len(start)] - start))
        for path, start in initial.items()
        if start.ndim
    )
    assert moved > 1e-2
    # Mesh (1, 4): each process holds 2 of the 4 row shards (16 rows of
    # 64 per device); mesh (2, 2): 32 rows per device, both processes hold
    # the whole table.
    for name, rows in (("whole", 16), ("split", 32)):
        for record in records:
            assert list(record[f"{name}/log"]) == [16, 32, 64]
            assert str(record[f"{name}/spec"]) == "('model', None)"
            assert list(record[f"{name}/local_rows"]) == [rows, rows]
            weights = _weights(record, f"{name}/weights")
            assert max_abs_difference(weights, expected) <= PARITY_ATOL
        first, second = (_weights(r, f"{name}/weights") for r in records)
        assert max_abs_difference(first, second) == 0.0


def test_a_refusal_in_one_process_stops_every_process(tmp_path):
    if BACKEND != "jax":
        # One process: the agreement is this process's own answer.
        from kmodels.backend.contracts import processes_refusing

        assert processes_refusing(True) == [0]
        assert processes_refusing(False) == []
        return
    # Mesh (2, 2), the batch split between the processes: process 1 alone
    # holds a bad id. Both refuse before any step (process 0 used to wait
    # in the step's collectives for process 1 forever).
    coordinator = f"localhost:{_free_port()}"
    multi = ["--num-processes", "2", "--coordinator", coordinator]
    bad = ["--bad-id-in", "1"]
    records = _launch(
        "jax_growth_worker.py",
        [
            multi + ["--process-id", "0"] + bad,
            multi + ["--process-id", "1"] + bad,
        ],
        tmp_path,
    )
    first, second = (str(r["error"]) for r in records)
    # Process 1: the layer's own refusal; process 0: the agreement's.
    assert second.endswith("expects ids >= 0; got -1."), second
    assert first.startswith("kmodels: process 1 refused its part"), first
    for record in records:
        assert int(record["capacity"]) == 4
        assert int(record["iterations"]) == 0
