"""`python -m examples.digits_vit` at tiny sizes: the same figures in two
runs on one backend, and a baseline that reads the digits."""

from examples import digits_vit
from examples import run_all


def test_two_runs_print_the_same_figures():
    settings = dict(epochs=1, fine_tune_epochs=1, train_limit=128)
    first = digits_vit.run(**settings)
    assert digits_vit.run(**settings) == first
    assert (first["trained_on"], first["test_digits"]) == (128, 359)
    assert first["gradient_flow_ok"] is True
    # Logistic regression on 128 digits already reads most of them (0.87
    # measured); one epoch leaves the ViT near chance, anywhere in [0, 1].
    assert first["logistic_regression"] > 0.8
    for name in ("vit_8x8", "vit_16x16", "vit_16x16_fine_tuned"):
        assert 0.0 <= first[name] <= 1.0


def test_images_are_scaled_and_upsampled():
    import numpy as np

    x = np.arange(2 * 8 * 8).reshape(2, 8, 8).astype("uint8") % 17
    scaled = digits_vit.images(x, 2)
    assert scaled.shape == (2, 16, 16, 1) and scaled.dtype == np.float32
    assert scaled[0, 1, 1, 0] == x[0, 0, 0] / 16.0
    assert scaled[1, 15, 14, 0] == x[1, 7, 7] / 16.0


def test_the_main_job_runs_the_demo():
    assert run_all.DEMOS["digits"] == "examples.digits_vit"
