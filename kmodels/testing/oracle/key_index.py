"""A pure-Python reference for `kmodels.layers.KeyIndex.lookup`."""


def key_index_lookup(known, keys, grow, first_row=1, oov_row=0):
    """Rows of `keys` by the rule `KeyIndex` documents, one key at a time.

    The `i`-th key ever added has row `first_row + i`; a batch adds its new
    keys in the order they first appear in it. Without `grow`, an unknown
    key reads `oov_row`, or the lookup fails (`KeyError(key)`, naming the
    first unknown key of the batch, nothing added) when `oov_row` is `None`.

    Args:
        known: list of the keys already held, in row order (not modified).
        keys: flat list of valid keys (Python ints or `str`).
        grow: bool. Add new keys.
        first_row: int. Row of the first key.
        oov_row: int or `None`. Row of unknown keys without `grow`.

    Returns:
        `(rows, known_after)`: a list of ints, one per key, and the keys
        held afterwards, in row order.
    """
    row_of = {key: first_row + i for i, key in enumerate(known)}
    after = list(known)
    rows = []
    for key in keys:
        if key not in row_of:
            if grow:
                row_of[key] = first_row + len(after)
                after.append(key)
            elif oov_row is None:
                raise KeyError(key)
            else:
                rows.append(oov_row)
                continue
        rows.append(row_of[key])
    return rows, after
