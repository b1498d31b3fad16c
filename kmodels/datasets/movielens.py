"""MovieLens-100k, read from the copy that ships in `recbole`'s wheel, in
time order.

100,000 ratings (1-5) of 1,682 movies by 943 users, from September 1997 to
April 1998 (GroupLens, University of Minnesota). Its terms allow use for
research but forbid redistribution, so kmodels ships none of it: install the
package that carries it, without its dependencies (it is only a data
carrier here):

```
pip install --no-deps recbole==1.2.1
```

```python
from kmodels.datasets import movielens

ratings = movielens.load_interactions()       # 100,000 rows, time order
train, test = movielens.leave_last_out(ratings)
len(test["user"])                             # 943: each user's last one
chunks = movielens.time_chunks(ratings, 10)   # train on 0..k, test on k+1
```

Every loader returns a dictionary of NumPy arrays of equal length, one
entry per column. Ids are MovieLens' own (users 1-943, items 1-1682), as a
stream of new keys would bring them; `kmodels.layers.GrowableEmbedding` or
a `KeyIndex` maps them to rows.
"""

import numpy as np

from kmodels.datasets.packaged import package_file

INSTALL = "pip install --no-deps recbole==1.2.1"
_FOLDER = "dataset_example/ml-100k"


def _read(name):
    path = package_file(
        "recbole", f"{_FOLDER}/ml-100k.{name}", INSTALL, "MovieLens-100k"
    )
    with open(path, encoding="latin-1") as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [line.rstrip("\n").split("\t") for line in f]
    # "user_id:token" -> "user_id"
    names = [column.split(":")[0] for column in header]
    return {name: [row[i] for row in rows] for i, name in enumerate(names)}


def load_interactions():
    """All 100,000 ratings, in time order.

    Rows are sorted by timestamp; ratings given in the same second are
    ordered by user id, then item id, so that the order is the same on
    every machine.

    Returns:
        A dictionary of NumPy arrays of 100,000 rows: `"user"` and
        `"item"` (int64 MovieLens ids), `"rating"` (float32, 1-5) and
        `"timestamp"` (int64, seconds since 1970).

    Raises:
        ModuleNotFoundError: `recbole` is not installed (the message gives
            the command above).
    """
    columns = _read("inter")
    data = {
        "user": np.array(columns["user_id"], dtype=np.int64),
        "item": np.array(columns["item_id"], dtype=np.int64),
        "rating": np.array(columns["rating"], dtype=np.float32),
        "timestamp": np.array(columns["timestamp"], dtype=np.float64).astype(
            np.int64
        ),
    }
    order = np.lexsort((data["item"], data["user"], data["timestamp"]))
    return {name: values[order] for name, values in data.items()}


def load_items():
    """The 1,682 movies, by id.

    Returns:
        A dictionary of NumPy arrays: `"item"` (int64 id), `"title"`
        (str), `"year"` (int64 release year; 0 where the file has none,
        as for item 267, whose title is unknown) and `"genres"` (str,
        space-separated, e.g. `"Animation Children's Comedy"`).
    """
    columns = _read("item")
    years = [int(y) if y.isdigit() else 0 for y in columns["release_year"]]
    data = {
        "item": np.array(columns["item_id"], dtype=np.int64),
        "title": np.array(columns["movie_title"], dtype=str),
        "year": np.array(years, dtype=np.int64),
        "genres": np.array(columns["class"], dtype=str),
    }
    order = np.argsort(data["item"], kind="stable")
    return {name: values[order] for name, values in data.items()}


def load_users():
    """The 943 users, by id.

    Returns:
        A dictionary of NumPy arrays: `"user"` (int64 id), `"age"`
        (int64), `"gender"` (`"M"` or `"F"`), `"occupation"` and
        `"zip_code"` (str).
    """
    columns = _read("user")
    data = {
        "user": np.array(columns["user_id"], dtype=np.int64),
        "age": np.array(columns["age"], dtype=np.int64),
        "gender": np.array(columns["gender"], dtype=str),
        "occupation": np.array(columns["occupation"], dtype=str),
        "zip_code": np.array(columns["zip_code"], dtype=str),
    }
    order = np.argsort(data["user"], kind="stable")
    return {name: values[order] for name, values in data.items()}


def _rows(data, mask):
    return {name: values[mask] for name, values in data.items()}


def leave_last_out(interactions):
    """Splits time-ordered interactions into each user's last one (test)
    and all the others (train), both still in time order.

    The usual evaluation of next-item recommenders: a model trained on
    `train` ranks the items for each user, and hit@k counts how often the
    held-out item is among the first k.

    Args:
        interactions: a dictionary of equal-length arrays with a `"user"`
            entry, in time order (as `load_interactions` returns).

    Returns:
        `(train, test)`: two dictionaries with the same keys; `test` has one
        row per user, `train` the rest.
    """
    users = np.asarray(interactions["user"])
    # The last row of each user: the first in the reversed order.
    _, first_reversed = np.unique(users[::-1], return_index=True)
    last = np.zeros(len(users), dtype=bool)
    last[len(users) - 1 - first_reversed] = True
    return _rows(interactions, ~last), _rows(interactions, last)


def time_chunks(interactions, chunks):
    """Cuts time-ordered interactions into `chunks` consecutive pieces whose
    sizes differ by at most one row.

    The "next chunk" evaluation replays the stream: train on chunks `0..k`
    (one `fit` per chunk, new ids arriving as they come), then test on
    chunk `k + 1`, which holds only later interactions.

    Args:
        interactions: a dictionary of equal-length arrays, in time order.
        chunks: the number of pieces, a positive int at most the number of
            rows.

    Returns:
        A list of `chunks` dictionaries with the same keys.
    """
    rows = len(next(iter(interactions.values())))
    if (
        isinstance(chunks, bool)
        or not isinstance(chunks, (int, np.integer))
        or not 1 <= chunks <= rows
    ):
        raise ValueError(
            f"`chunks` must be an int from 1 to the number of rows ({rows}); "
            f"received chunks={chunks!r}"
        )
    bounds = np.linspace(0, rows, int(chunks) + 1).round().astype(int)
    return [
        {name: values[start:stop] for name, values in interactions.items()}
        for start, stop in zip(bounds[:-1], bounds[1:])
    ]
