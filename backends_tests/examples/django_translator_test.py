"""`python -m examples.django_translator` at tiny sizes: the same figures
in two runs on one backend, no empty output, and the baselines."""

import pytest

from examples import django_translator as demo
from examples import run_all

SETTINGS = dict(units=8, epochs=1, limit=60)


@pytest.fixture(scope="module")
def figures():
    return demo.run(**SETTINGS)


def test_two_runs_print_the_same_figures(figures):
    assert demo.run(**SETTINGS) == figures
    assert (figures["train"], figures["test"]) == (60, 157)
    # min_length=2: at least one token before [END], whatever the model.
    assert figures["empty"] == 0
    # One epoch of 8 units copies few or none (0 on TensorFlow and torch,
    # measured); the held-out sources hold placeholders to copy.
    assert 0 <= figures["placeholders_copied"] <= figures["placeholders"]
    assert figures["placeholders"] > 0
    for name in ("bleu", "copy_bleu", "nn_bleu"):
        assert 0.0 <= figures[name] <= 1.0


def test_placeholders_copied_counts_distinct_matches():
    import re

    pattern = re.compile(r"%\(\w+\)s|\{\d\}")
    copied, total = demo.placeholders_copied(
        ["%(a)s and %(a)s {0}", "no placeholder", "{1}"],
        ["%(a)s y {1}", "ninguno", "{1}"],
        pattern,
    )
    assert (copied, total) == (2, 3)


def test_nearest_neighbour_takes_the_most_overlapping_training_string():
    train = [("Delete user", "Borrar usuario"), ("Add group", "Añadir grupo")]
    assert demo.nearest_neighbour(["add a group", "delete"], train) == [
        "Añadir grupo",
        "Borrar usuario",
    ]


def test_the_main_job_runs_the_demo():
    assert run_all.DEMOS["django"] == "examples.django_translator"
