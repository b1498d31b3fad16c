"""The `benchmarks` package's import graph has no cycle: every module,
including the imports inside its functions, depends only on modules that do
not depend on it back."""

import ast
import graphlib
import os

from benchmarks import runner

PACKAGE = os.path.join(runner.ROOT, "benchmarks")


def _module_name(path):
    parts = os.path.relpath(path[: -len(".py")], runner.ROOT).split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph():
    """`{module: {benchmarks modules it imports}}`, function-level imports
    included; `from benchmarks.x import y` counts as importing `x.y` when
    that is a module, else `x`."""
    paths = [
        os.path.join(folder, name)
        for folder, _, names in os.walk(PACKAGE)
        for name in names
        if name.endswith(".py")
    ]
    modules = {_module_name(p): p for p in paths}
    graph = {}
    for name, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    imported.add(child if child in modules else node.module)
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def test_benchmarks_import_graph_has_no_cycle():
    graph = _graph()
    # The graph covers the scaling benchmark's modules.
    assert graph["benchmarks.distributed.child"] >= {
        "benchmarks.distributed.engines",
        "benchmarks.distributed.scaling",
    }
    assert graph["benchmarks.distributed.scaling"] == {"benchmarks.cases"}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError


def test_benchmark_backends_are_the_supported_ones():
    # benchmarks/cases.py writes the list out (its numpy and tf_keras
    # children must not import kmodels); it must name the same backends,
    # in the same order, as kmodels.BACKENDS.
    import kmodels
    from benchmarks import cases

    assert cases.KERAS_BACKENDS == kmodels.BACKENDS
