"""The data and models of `python -m examples.position_embedding` (the
demo's training runs are too long for a test; see the docs for results)."""

import keras
import numpy as np

from examples.position_embedding import first_equals_last_data
from examples.position_embedding import no_position_model


def test_labels_say_whether_first_equals_last():
    ids, labels = first_equals_last_data(400, 4, 6, seed=0)
    assert ids.shape == (400, 4) and ids.dtype == np.int32
    np.testing.assert_array_equal(labels, (ids[:, 0] == ids[:, -1]))
    assert labels.mean() == 0.5
    assert ids.min() >= 1 and ids.max() <= 5  # 0 is reserved for padding


def test_token_counts_carry_no_label_information():
    """Each negative is a permutation of a positive with a repeated token,
    so every example (positive or negative) repeats some token."""
    ids, labels = first_equals_last_data(400, 4, 6, seed=1)
    repeats = np.array([len(set(row)) < len(row) for row in ids])
    assert repeats.all()


def test_no_position_model_is_blind_to_order():
    keras.utils.set_random_seed(0)
    model = no_position_model(6, 4, embedding_dim=4, intermediate_dim=8)
    ids = np.array([[1, 2, 3, 1], [2, 3, 1, 4]], "int32")
    shuffled = ids[:, [3, 1, 0, 2]]
    out = keras.ops.convert_to_numpy(model(ids))
    out_shuffled = keras.ops.convert_to_numpy(model(shuffled))
    # Permutation-equivariant encoder + mean pooling: equal up to float32
    # summation order (1e-6).
    np.testing.assert_allclose(out, out_shuffled, rtol=1e-6, atol=1e-6)


def test_resampling_plot_shows_the_grid_and_its_resized_version(tmp_path):
    """The docs picture: the hand-set 4 x 4 table and its 7 x 7 bicubic
    resampling, checked against the pixel-by-pixel NumPy bicubic."""
    from matplotlib.image import imread

    from examples.position_embedding import resampling_plot
    from kmodels.testing.oracle.position import bicubic_resample

    path = str(tmp_path / "grid.png")
    table, new = resampling_plot(path)
    assert imread(path).shape[:2] == (300, 720)
    expected = bicubic_resample(table.reshape(4, 4, 2), 7, 7)
    np.testing.assert_allclose(new, expected.reshape(49, 2), atol=1e-6)
