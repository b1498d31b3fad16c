"""Files that ship inside other installed packages: where they are, and an
error that says how to install them.

The real-data loaders (`movielens`, `ui_strings`, `digits`) read data that
other projects distribute in their wheels. kmodels commits none of it (the
MovieLens terms forbid redistribution) and imports none of those packages:
it only finds their installed folder.
"""

import importlib.util
import pathlib


def package_file(package, relative, install, what):
    """The path of `relative` inside the installed `package`, found without
    importing it (`recbole`'s `__init__` imports torch and more).

    Args:
        package: the top-level package name, e.g. `"recbole"`.
        relative: the file's path inside the package folder.
        install: the command that installs the package, named in the error.
        what: what the file holds, named in the error.

    Raises:
        ModuleNotFoundError: when `package` is not installed, naming
            `install`.
        FileNotFoundError: when it is installed without the file (another
            version), naming the path and `install`.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"{what}: read from the `{package}` package, which is not "
            f"installed; install it with: {install}",
            name=package,
        )
    path = pathlib.Path(next(iter(spec.submodule_search_locations)))
    path = path / relative
    if not path.exists():
        raise FileNotFoundError(
            f"{what}: {path} is missing from the installed `{package}`; "
            f"install the version kmodels reads with: {install}"
        )
    return path


def check_test_fraction(test_fraction):
    """Raises a `ValueError` unless `test_fraction` is a number in (0, 1)
    (a split's held-out share)."""
    if (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, (int, float))
        or not 0 < test_fraction < 1
    ):
        raise ValueError(
            "`test_fraction` must be a float between 0 and 1 (exclusive); "
            f"received test_fraction={test_fraction!r}"
        )
