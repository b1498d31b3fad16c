"""The per-backend packages of `kmodels.backend` share one interface.

The three packages are read as source (`ast`), not imported: each test
environment can import only its own backend's package.
"""

import ast
import os
import pathlib
import subprocess
import sys

import keras

import kmodels
import kmodels.backend

BACKEND_DIR = pathlib.Path(kmodels.backend.__file__).parent
BACKENDS = kmodels.BACKENDS
MODULES = {
    "compiled",
    "contracts",
    "decoding",
    "gradients",
    "growth",
    "losses",
    "optimizers",
    "replicas",
    "rnn",
    "steps",
    "table_replicas",
    "virtual_devices",
}
# Not part of the interface: the Keras internals kmodels reads, in one
# module, with per-backend halves where a backend's trainer is concerned
# (`kmodels/backend/jax/keras_internals.py`).
INTERNALS = "keras_internals"


def _modules(directory):
    return {
        p.stem
        for p in directory.glob("*.py")
        if p.stem not in ("__init__", INTERNALS)
    }


def _public_functions(path):
    """`{name: argument names}` of the module's public top-level
    functions."""
    tree = ast.parse(path.read_text())
    return {
        node.name: [a.arg for a in node.args.args]
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def test_every_backend_package_has_the_same_modules():
    for backend in BACKENDS:
        assert _modules(BACKEND_DIR / backend) == MODULES, backend
    # One interface module (the facade) per backend module.
    assert _modules(BACKEND_DIR) == MODULES


def test_every_backend_module_defines_the_same_functions():
    for module in sorted(MODULES):
        functions = {
            backend: _public_functions(BACKEND_DIR / backend / f"{module}.py")
            for backend in BACKENDS
        }
        assert functions["tensorflow"], module
        assert functions["jax"] == functions["tensorflow"], module
        assert functions["torch"] == functions["tensorflow"], module


def test_every_backend_package_imports_all_its_modules():
    for backend in BACKENDS:
        tree = ast.parse((BACKEND_DIR / backend / "__init__.py").read_text())
        imported = {
            alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom)
            and node.module == f"kmodels.backend.{backend}"
            for alias in node.names
        }
        assert imported == MODULES, backend


def test_the_facade_picked_the_running_backend():
    backend = keras.backend.backend()
    native = kmodels.backend.native
    assert native.__name__ == f"kmodels.backend.{backend}"
    for module in sorted(MODULES):
        assert getattr(native, module).__name__ == (
            f"kmodels.backend.{backend}.{module}"
        )


def _tests_backend_name(node):
    """Whether `node` compares `keras.backend.backend()` with something."""
    if not isinstance(node, ast.Compare):
        return False
    for side in [node.left, *node.comparators]:
        if (
            isinstance(side, ast.Call)
            and isinstance(side.func, ast.Attribute)
            and side.func.attr == "backend"
            and ast.unparse(side.func.value).endswith("backend")
        ):
            return True
    return False


def test_only_kmodels_backend_tests_the_backend_name():
    root = pathlib.Path(kmodels.__file__).parent
    # The SavedModel exporters run in a TensorFlow process of their own
    # and check that they do.
    export_dir = root / "export"
    found = []
    for path in sorted(root.rglob("*.py")):
        if BACKEND_DIR in path.parents or export_dir in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if _tests_backend_name(node):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []


def test_an_unsupported_backend_is_refused_at_import():
    result = subprocess.run(
        [sys.executable, "-c", "import kmodels.backend"],
        env={**os.environ, "KERAS_BACKEND": "numpy"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ValueError: kmodels supports the Keras backends 'tensorflow', "
        "'jax' and 'torch'; the running backend is 'numpy'. Set "
        "KERAS_BACKEND to one of them before importing Keras."
    )
