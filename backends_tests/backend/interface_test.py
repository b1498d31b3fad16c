"""The per-backend packages of `kmodels.backend` and the facade modules
they implement.

A backend defines only what it does differently: the facade
`kmodels/backend/<module>.py` calls a function every backend defines as
`native.<module>.<function>`, and one that some backends leave to the
facade's default through `native_function("<module>", "<function>")`.

The three packages are read as source (`ast`), not imported: each test
environment can import only its own backend's package.
"""

import ast
import os
import pathlib
import subprocess
import sys

import keras
import pytest

import kmodels
import kmodels.backend

BACKEND_DIR = pathlib.Path(kmodels.backend.__file__).parent
BACKENDS = kmodels.BACKENDS
# The facade modules, the interface.
MODULES = {
    "compile_cache",
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
    "threads",
    "virtual_devices",
}
# Not part of the interface: the Keras internals kmodels reads, in one
# module, with per-backend halves where a backend's trainer is concerned
# (`kmodels/backend/jax/keras_internals.py`).
INTERNALS = "keras_internals"
# `backend/module.function`: the stubs (see `_is_stub`) a backend may
# define, each with its reason.
ALLOWED_STUBS = {
    # The one backend whose tables are trainable (overwritten with their
    # updated value): JAX has no side effects inside `jax.jit`.
    "jax/growth.table_is_trainable",
}
# `module.function`: backend functions whose arguments are not those of
# the facade function of the same name.
OTHER_ARGUMENTS = {
    # The facade reads the switch and passes its default folder.
    "compile_cache.enable",
    # The facade passes the model's trainable variables.
    "gradients.loss_gradients",
    # The facade checks `backend` itself.
    "virtual_devices.virtual_cpu_devices",
}


def _modules(directory):
    return {
        p.stem
        for p in directory.glob("*.py")
        if p.stem not in ("__init__", INTERNALS)
    }


def _functions(path):
    """The module's public top-level functions (`ast.FunctionDef`s) by
    name."""
    tree = ast.parse(path.read_text())
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def _arguments(function):
    return [a.arg for a in function.args.args]


def _backend_functions():
    """`{(backend, module): {name: FunctionDef}}` of every backend
    module."""
    return {
        (backend, path.stem): _functions(path)
        for backend in BACKENDS
        for path in sorted((BACKEND_DIR / backend).glob("*.py"))
        if path.stem not in ("__init__", INTERNALS)
    }


def _facade_calls(module):
    """`(required, optional)`: the names of the backend functions the facade
    `module` calls as `native.<module>.<name>` (every backend defines
    them) and those it asks for with `native_function("<module>",
    "<name>")` (a backend may leave them to the facade)."""
    tree = ast.parse((BACKEND_DIR / f"{module}.py").read_text())
    required, optional = set(), set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "native"
        ):
            assert node.value.attr == module, ast.unparse(node)
            required.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "native_function"
        ):
            found, name = (ast.literal_eval(a) for a in node.args)
            assert found == module, ast.unparse(node)
            optional.add(name)
    assert not required & optional, module
    return required, optional


def _is_stub(function):
    """A function whose body, docstring aside, is one `pass`, `return`,
    `return <constant>` (`lambda: None` included), `return <argument>` or
    `raise NotImplementedError(...)`: what the facade's default does."""
    body = function.body
    if (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if len(body) != 1:
        return False
    (statement,) = body
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Raise):
        error = statement.exc
        if isinstance(error, ast.Call):
            error = error.func
        return isinstance(error, ast.Name) and error.id == "NotImplementedError"
    if not isinstance(statement, ast.Return):
        return False
    value = statement.value
    if isinstance(value, ast.Lambda):
        value = value.body
    if value is None or isinstance(value, ast.Constant):
        return True
    if isinstance(value, ast.UnaryOp) and isinstance(
        value.operand, ast.Constant
    ):
        return True
    arguments = function.args
    names = {
        a.arg
        for a in [
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            arguments.vararg,
            arguments.kwarg,
        ]
        if a is not None
    }
    return isinstance(value, ast.Name) and value.id in names


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
def test_the_facade_modules_are_the_interface():
    assert _modules(BACKEND_DIR) == MODULES


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
def test_every_backend_module_is_a_facade_module():
    for backend in BACKENDS:
        assert _modules(BACKEND_DIR / backend) <= MODULES, backend


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
def test_every_backend_function_is_one_its_facade_calls():
    for (backend, module), functions in _backend_functions().items():
        required, optional = _facade_calls(module)
        assert set(functions) <= required | optional, (backend, module)


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
def test_every_backend_defines_the_functions_its_facade_requires():
    for module in sorted(MODULES):
        required, _ = _facade_calls(module)
        for backend in BACKENDS:
            path = BACKEND_DIR / backend / f"{module}.py"
            defined = set(_functions(path)) if path.exists() else set()
            assert required <= defined, (backend, module)


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
def test_every_optional_function_is_defined_by_some_backend():
    # A `native_function` name that no backend defines is a misspelling
    # (or a default nobody overrides any more).
    defined = {
        (module, name)
        for (_, module), functions in _backend_functions().items()
        for name in functions
    }
    for module in sorted(MODULES):
        _, optional = _facade_calls(module)
        for name in sorted(optional):
            assert (module, name) in defined, (module, name)


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
def test_backend_functions_take_the_arguments_of_the_facade():
    facades = {
        module: _functions(BACKEND_DIR / f"{module}.py") for module in MODULES
    }
    seen = {}
    for (backend, module), functions in _backend_functions().items():
        for name, function in functions.items():
            arguments = _arguments(function)
            # The backends that define a function agree on its arguments.
            assert seen.setdefault((module, name), arguments) == arguments, (
                backend,
                module,
                name,
            )
            facade = facades[module].get(name)
            if facade is not None and f"{module}.{name}" not in OTHER_ARGUMENTS:
                assert arguments == _arguments(facade), (backend, module, name)


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
def test_no_backend_module_defines_a_stub():
    stubs = {
        f"{backend}/{module}.{name}"
        for (backend, module), functions in _backend_functions().items()
        for name, function in functions.items()
        if _is_stub(function)
    }
    assert stubs == ALLOWED_STUBS


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
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
        assert imported == _modules(BACKEND_DIR / backend), backend


def test_the_facade_picked_the_running_backend():
    backend = keras.backend.backend()
    native = kmodels.backend.native
    assert native.__name__ == f"kmodels.backend.{backend}"
    for module in sorted(_modules(BACKEND_DIR / backend)):
        assert getattr(native, module).__name__ == (
            f"kmodels.backend.{backend}.{module}"
        )


def test_native_function_is_the_backends_own_or_none():
    native_function = kmodels.backend.native_function
    native = kmodels.backend.native
    assert native_function("growth", "sparse_lookup") is (
        native.growth.sparse_lookup
    )
    # A module the backend does not define, a function its module does not.
    assert native_function("no_such_module", "sparse_lookup") is None
    assert native_function("growth", "no_such_function") is None


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


@pytest.mark.backend_independent(reason="a scan of kmodels/backend's source")
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


@pytest.mark.backend_independent(
    reason="a fresh process with KERAS_BACKEND=numpy"
)
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
