"""The real-data loaders, checked against independent readers of the same
files: Python's `csv` for MovieLens, gettext's compiled `.mo` catalogues
for Django's strings, scikit-learn's own `load_digits` for the digits."""

import collections
import csv
import gettext
import importlib.util
import pathlib

import numpy as np
import pytest

from backends_tests.refusals import raises_exactly
from kmodels.datasets import digits
from kmodels.datasets import movielens
from kmodels.datasets import packaged
from kmodels.datasets import ui_strings

pytestmark = pytest.mark.backend_independent(
    reason="the loaders read files into NumPy arrays and Python strings; "
    "no Keras tensor is made"
)


def _package_folder(name):
    return pathlib.Path(
        next(iter(importlib.util.find_spec(name).submodule_search_locations))
    )


def _tsv(name):
    path = _package_folder("recbole") / "dataset_example/ml-100k" / name
    with open(path, encoding="latin-1", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    return rows[0], rows[1:]


@pytest.fixture(scope="module")
def ratings():
    return movielens.load_interactions()


@pytest.fixture(scope="module")
def ratings_by_csv():
    _, rows = _tsv("ml-100k.inter")
    return [(int(u), int(i), float(r), int(float(t))) for u, i, r, t in rows]


def _tuples(data):
    return list(
        zip(
            data["user"].tolist(),
            data["item"].tolist(),
            data["rating"].tolist(),
            data["timestamp"].tolist(),
        )
    )


# ---------------------------------------------------------------- MovieLens
def test_interactions_are_the_files_rows_in_time_order(ratings, ratings_by_csv):
    assert {k: v.dtype.name for k, v in ratings.items()} == {
        "user": "int64",
        "item": "int64",
        "rating": "float32",
        "timestamp": "int64",
    }
    loaded = _tuples(ratings)
    assert sorted(loaded) == sorted(ratings_by_csv)
    assert len(loaded) == 100_000
    assert len({row[0] for row in ratings_by_csv}) == 943
    assert len({row[1] for row in ratings_by_csv}) == 1682
    # Time order, ties by user then item.
    keys = [(t, u, i) for u, i, _, t in loaded]
    assert keys == sorted(keys)


def test_leave_last_out_holds_each_users_last_rating(ratings, ratings_by_csv):
    train, test = movielens.leave_last_out(ratings)
    last_time = collections.defaultdict(int)
    for user, _, _, time in ratings_by_csv:
        last_time[user] = max(last_time[user], time)
    held = _tuples(test)
    assert sorted(row[0] for row in held) == sorted(last_time)
    assert all(time == last_time[user] for user, _, _, time in held)
    assert sorted(_tuples(train) + held) == sorted(ratings_by_csv)
    # Both sides stay in time order.
    for side in (train, test):
        assert np.all(np.diff(side["timestamp"]) >= 0)


def test_time_chunks_cut_the_stream_in_order(ratings):
    chunks = movielens.time_chunks(ratings, 7)
    sizes = [len(chunk["user"]) for chunk in chunks]
    assert sum(sizes) == 100_000 and max(sizes) - min(sizes) <= 1
    for name, values in ratings.items():
        np.testing.assert_array_equal(
            np.concatenate([chunk[name] for chunk in chunks]), values
        )
    # Each chunk starts no earlier than the previous one ends.
    for first, second in zip(chunks, chunks[1:]):
        assert first["timestamp"][-1] <= second["timestamp"][0]


@pytest.mark.parametrize("chunks", [0, 100_001, 2.0, True])
def test_time_chunks_refuses_a_bad_count(ratings, chunks):
    with raises_exactly(
        ValueError,
        "`chunks` must be an int from 1 to the number of rows (100000); "
        f"received chunks={chunks!r}",
    ):
        movielens.time_chunks(ratings, chunks)


def test_items_and_users_are_the_files_rows():
    header, rows = _tsv("ml-100k.item")
    assert header[0] == "item_id:token"
    items = movielens.load_items()
    assert items["item"].tolist() == sorted(int(row[0]) for row in rows)
    by_id = {int(row[0]): row for row in rows}
    for i, item in enumerate(items["item"].tolist()):
        _, title, year, genres = by_id[item]
        assert items["title"][i] == title and items["genres"][i] == genres
        assert items["year"][i] == (int(year) if year.isdigit() else 0)
    assert items["title"][0] == "Toy Story" and items["year"][0] == 1995
    _, rows = _tsv("ml-100k.user")
    users = movielens.load_users()
    assert len(users["user"]) == len(rows) == 943
    by_id = {int(row[0]): row for row in rows}
    for i, user in enumerate(users["user"].tolist()):
        _, age, gender, occupation, zip_code = by_id[user]
        assert (users["age"][i], users["gender"][i]) == (int(age), gender)
        assert users["occupation"][i] == occupation
        assert users["zip_code"][i] == zip_code


# ------------------------------------------------------- Django UI strings
def _mo_catalogue(po_path):
    with open(po_path.with_suffix(".mo"), "rb") as f:
        catalogue = gettext.GNUTranslations(f)._catalog
    entries = {}
    for key, value in catalogue.items():
        if isinstance(key, tuple):  # (msgid, plural index)
            key, index = key
            if index != 0:
                continue
        if key and value:
            entries[key] = value
    return entries


def test_read_po_equals_the_compiled_catalogue_of_every_file():
    paths = ui_strings.catalogues("es")
    assert paths[0].parts[-5:] == (
        "conf",
        "locale",
        "es",
        "LC_MESSAGES",
        "django.po",
    )
    assert len(paths) == 12
    for path in paths:
        read = {
            (f"{context}\x04" if context else "") + source: target
            for context, source, target in ui_strings.read_po(path)
        }
        assert read == _mo_catalogue(path), path


def test_pairs_are_the_distinct_sources_with_their_first_translation():
    first = {}
    for path in ui_strings.catalogues("es"):
        for key, value in _mo_catalogue(path).items():
            first.setdefault(key.split("\x04")[-1], value)
    pairs = ui_strings.load_pairs("es")
    assert pairs == sorted(first.items())
    assert 700 < len(pairs) < 900
    # What UI text is made of: placeholders, accents, capitals.
    assert ("Delete multiple objects", "Eliminar múltiples objetos.") in pairs
    assert sum("%(" in source for source, _ in pairs) > 50


def test_split_is_a_hash_of_the_source():
    pairs = ui_strings.load_pairs("es")
    train, test = ui_strings.load_data("es", test_fraction=0.2)
    assert sorted(train + test) == pairs and not set(train) & set(test)
    assert 0.15 < len(test) / len(pairs) < 0.25
    # Each string's side depends on itself only: a string keeps its side
    # when others come or go.
    assert all(ui_strings.is_test(source, 0.2) for source, _ in test)
    assert not any(ui_strings.is_test(source, 0.2) for source, _ in train)
    assert ui_strings.load_data("es", test_fraction=0.2) == (train, test)


PO_TEXT = r"""# A translator's comment
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

#, python-format
msgid "Hello %(name)s"
msgstr "Hola %(name)s"

#, fuzzy
msgid "Maybe"
msgstr "Quizás"

msgid "Untranslated"
msgstr ""

msgctxt "abbrev. month"
msgid "May"
msgstr "may."

msgid "One line "
"and a \"quoted\" second"
msgstr "Una línea "
"y una segunda \"entre comillas\"\n"

msgid "%s item"
msgid_plural "%s items"
msgstr[0] "%s elemento"
msgstr[1] "%s elementos"
msgid "No blank line before"
msgstr "Sin línea en blanco"

#~ msgid "Obsolete"
#~ msgstr "Obsoleto"
"""


def test_read_po_on_a_file_written_by_hand(tmp_path):
    path = tmp_path / "django.po"
    path.write_text(PO_TEXT, encoding="utf-8")
    assert ui_strings.read_po(path) == [
        (None, "Hello %(name)s", "Hola %(name)s"),
        ("abbrev. month", "May", "may."),
        (
            None,
            'One line and a "quoted" second',
            'Una línea y una segunda "entre comillas"\n',
        ),
        (None, "%s item", "%s elemento"),
        (None, "No blank line before", "Sin línea en blanco"),
    ]


@pytest.mark.parametrize("test_fraction", [0, 1, "0.2", True])
def test_ui_strings_refuse_a_bad_fraction(test_fraction):
    with raises_exactly(
        ValueError,
        "`test_fraction` must be a float between 0 and 1 (exclusive); "
        f"received test_fraction={test_fraction!r}",
    ):
        ui_strings.load_data("es", test_fraction=test_fraction)


def test_unknown_language_names_the_known_ones():
    with pytest.raises(ValueError) as caught:
        ui_strings.catalogues("xx")
    message = str(caught.value)
    assert message.startswith("Django has no catalogue for language='xx'; ")
    assert ", es, " in message and ", fr, " in message


# ------------------------------------------------------------------ digits
def test_digits_split_is_scikit_learns_data_stratified():
    from sklearn.datasets import load_digits

    reference = load_digits()
    images = reference.images.astype(np.uint8)
    assert np.array_equal(reference.images, images)  # whole numbers 0-16
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    assert (x_train.dtype, y_train.dtype) == (np.uint8, np.uint8)
    assert x_train.shape[1:] == (8, 8) and len(x_train) == len(y_train)
    # Together the two sides are scikit-learn's images with their labels.
    rows = sorted(
        (label, image.tobytes())
        for label, image in zip(reference.target.tolist(), images)
    )
    loaded = sorted(
        (int(label), image.tobytes())
        for label, image in zip(
            np.concatenate([y_train, y_test]),
            np.concatenate([x_train, x_test]),
        )
    )
    assert loaded == rows and len(rows) == 1797
    # Each class holds out round(0.2 * its size).
    for label, count in collections.Counter(reference.target.tolist()).items():
        assert np.sum(y_test == label) == round(0.2 * count)


def test_digits_split_follows_the_seed():
    first = digits.load_data(seed=3)
    again = digits.load_data(seed=3)
    other = digits.load_data(seed=4)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(first[1][0], other[1][0])


def test_digits_refuse_bad_arguments():
    with raises_exactly(
        ValueError,
        "`test_fraction` must be a float between 0 and 1 (exclusive); "
        "received test_fraction=1.5",
    ):
        digits.load_data(test_fraction=1.5)
    with raises_exactly(TypeError, "`seed` must be an int; received seed=1.0"):
        digits.load_data(seed=1.0)


# --------------------------------------------------------- missing packages
def test_a_missing_package_names_its_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        packaged.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "recbole" else real(name, *a),
    )
    with raises_exactly(
        ModuleNotFoundError,
        "MovieLens-100k: read from the `recbole` package, which is not "
        "installed; install it with: pip install --no-deps recbole==1.2.1",
    ):
        movielens.load_interactions()


def test_a_missing_file_names_the_path():
    folder = _package_folder("sklearn")
    with raises_exactly(
        FileNotFoundError,
        f"The digits: {folder / 'nothing.csv'} is missing from the "
        "installed `sklearn`; install the version kmodels reads with: "
        "pip install scikit-learn",
    ):
        packaged.package_file(
            "sklearn", "nothing.csv", digits.INSTALL, "The digits"
        )
