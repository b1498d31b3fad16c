"""masked_loss / masked_acc against the oracle, and their shape errors."""

import re

import keras
import numpy as np
import pytest

from kmodels.seq2seq import Encoder
from kmodels.seq2seq import MaskedLoss
from kmodels.seq2seq import masked_acc
from kmodels.seq2seq import masked_loss
from kmodels.testing import oracle
from kmodels.testing.gradients import loss_gradients
from kmodels.testing.oracle.gradients import numerical_gradient

np_ = keras.ops.convert_to_numpy

# A log-softmax and a mean over 7 float32 terms of O(1): ~1e-7 measured.
RTOL, ATOL = 1e-6, 1e-6


def _data(rng):
    labels = rng.integers(1, 6, (3, 4))
    labels[0, 2:] = 0
    labels[2, 1:] = 0
    logits = rng.normal(size=(3, 4, 6)).astype("float32")
    # Some real positions predicted right, so accuracy is not trivial.
    logits[1, :2] = 0.0
    logits[1, 0, labels[1, 0]] = 5.0
    logits[1, 1, labels[1, 1]] = 5.0
    return labels, logits


def test_loss_and_accuracy_match_oracle(rng, parity):
    labels, logits = _data(rng)
    loss = float(np_(masked_loss(labels, logits)))
    acc = float(np_(masked_acc(labels, logits)))
    assert loss == pytest.approx(
        oracle.masked_cross_entropy(labels, logits), rel=RTOL, abs=ATOL
    )
    assert acc == pytest.approx(oracle.masked_accuracy(labels, logits))
    parity.record("seq2seq/masked_loss", np.array(loss), ATOL, RTOL)


class _Logits(keras.layers.Layer):
    """Holds logits as a variable, so `loss_gradients` differentiates the
    loss with respect to them."""

    def __init__(self, logits):
        super().__init__()
        self.logits = self.add_weight(
            shape=logits.shape,
            initializer=keras.initializers.Constant(logits),
        )


@pytest.mark.parametrize("with_bias_add", [False, True])
def test_loss_gradient_matches_finite_differences_of_the_oracle(
    rng, with_bias_add
):
    # Each backend's loss has its own gradient (TensorFlow's fused kernel,
    # hand-written ones on JAX and torch): against central
    # differences of the float64 oracle; padded positions get exactly 0.
    # float32 softmax terms of O(1): measured differences < 1e-7.
    labels, logits = _data(rng)
    holder = _Logits(logits)
    bias = rng.normal(size=logits.shape[-1]).astype("float32")

    def loss():
        y_pred = keras.ops.convert_to_tensor(holder.logits)
        if with_bias_add:
            # Logits made by an op, as a Dense layer's are.
            y_pred = y_pred + keras.ops.convert_to_tensor(bias)
        return masked_loss(labels, y_pred)

    _, (grad,) = loss_gradients(holder, loss)
    shift = bias if with_bias_add else 0.0
    (expected,) = numerical_gradient(
        lambda p: oracle.masked_cross_entropy(labels, p[0] + shift), [logits]
    )
    np.testing.assert_allclose(grad, expected, atol=1e-6)
    assert np.all(grad[labels == 0] == 0.0)


def test_far_apart_logits_give_the_oracles_finite_loss_and_gradient(rng):
    # Logits 80 apart: the label's softmax underflows in float32 (e^-80),
    # its loss must not (torch keeps exp(logits - max) for the gradient).
    labels, logits = _data(rng)
    logits = 40.0 * logits
    holder = _Logits(logits)
    value, (grad,) = loss_gradients(
        holder,
        lambda: masked_loss(labels, keras.ops.convert_to_tensor(holder.logits)),
    )
    assert float(np_(value)) == pytest.approx(
        oracle.masked_cross_entropy(labels, logits), rel=RTOL
    )
    (expected,) = numerical_gradient(
        lambda p: oracle.masked_cross_entropy(labels, p[0]), [logits]
    )
    np.testing.assert_allclose(grad, expected, atol=1e-6)


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="a graph kept for a second backward pass (retain_graph) is "
    "torch's autograd; TensorFlow and JAX differentiate functions",
)
def test_a_retained_graph_gives_the_same_gradient_twice(rng):
    # torch's loss turns its saved exponentials into the gradient in
    # place: a second backward pass must recompute them.
    import torch

    labels, logits = _data(rng)
    leaf = torch.tensor(logits, requires_grad=True)
    loss = masked_loss(labels, leaf)
    loss.backward(retain_graph=True)
    first = leaf.grad.clone()
    leaf.grad = None
    loss.backward()
    torch.testing.assert_close(leaf.grad, first, rtol=0, atol=0)
    (expected,) = numerical_gradient(
        lambda p: oracle.masked_cross_entropy(labels, p[0]), [logits]
    )
    np.testing.assert_allclose(first.numpy(), expected, atol=1e-6)


def test_padding_does_not_count(rng):
    labels, logits = _data(rng)
    changed = logits.copy()
    changed[labels == 0] = 100.0 * rng.normal(size=changed[labels == 0].shape)
    assert float(np_(masked_loss(labels, changed))) == pytest.approx(
        float(np_(masked_loss(labels, logits))), rel=1e-6
    )
    assert float(np_(masked_acc(labels, changed))) == float(
        np_(masked_acc(labels, logits))
    )


def test_labels_with_trailing_axis_and_float_dtype(rng):
    labels, logits = _data(rng)
    expected = float(np_(masked_loss(labels, logits)))
    got = float(np_(masked_loss(labels[..., None].astype("float32"), logits)))
    assert got == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("fn", [masked_loss, masked_acc])
def test_context_instead_of_logits_is_a_clear_error(fn):
    y_true = np.ones((2, 4), "int32")
    context = np.zeros((2, 6, 8), "float32")  # (batch, s, units)
    message = (
        f"{fn.__name__} expects logits y_pred of shape (batch, t, vocab) "
        "matching labels y_true of shape (batch, t); got y_true (2, 4) and "
        "y_pred (2, 6, 8). Did call() return the encoder context instead of "
        "the decoder logits?"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        fn(y_true, context)
    with pytest.raises(ValueError, match=re.escape("y_pred (2, 4)")):
        fn(y_true, np.zeros((2, 4), "float32"))


def test_the_seeds_bug_fails_the_same_way_inside_fit():
    # Seed 000: the model returned the encoder context (batch, s, units).
    tokens = keras.Input((6,), dtype="int32")
    model = keras.Model(tokens, Encoder(10, 8)(tokens))
    model.compile("adam", loss=masked_loss)
    x = np.ones((4, 6), "int32")
    y = np.ones((4, 5), "int32")
    message = "got y_true (None, 5) and y_pred (None, 6, 8)"
    if keras.backend.backend() != "tensorflow":
        # JAX and torch trace with the concrete batch size.
        message = "got y_true (4, 5) and y_pred (4, 6, 8)"
    with pytest.raises(ValueError, match=re.escape(message)):
        model.fit(x, y, epochs=1, verbose=0)


def test_label_out_of_range_gives_nan_on_every_backend(rng):
    labels, logits = _data(rng)
    labels[1, 0] = 8  # logits have 6 classes (e.g. units instead of vocab)
    assert np.isnan(float(np_(masked_loss(labels, logits))))


# Label smoothing (issue 30): Keras' target distribution, real tokens only.
SMOOTHING = 0.2


@pytest.mark.parametrize("smoothing", [0.1, 1.0])
def test_label_smoothing_matches_the_oracle(rng, smoothing):
    # The oracle writes the smoothed target distribution out over the whole
    # vocabulary; padding (and its huge logits) still counts for nothing,
    # and per-example weights weight tokens as without smoothing.
    labels, logits = _data(rng)
    logits[labels == 0] = 50.0
    weights = np.array([1.0, 2.0, 0.5], "float32")
    loss = MaskedLoss(label_smoothing=smoothing)
    for sample_weight in (None, weights):
        got = float(np_(loss(labels, logits, sample_weight=sample_weight)))
        expected = oracle.masked_cross_entropy(
            labels,
            logits,
            sample_weight=sample_weight,
            label_smoothing=smoothing,
        )
        assert got == pytest.approx(expected, rel=RTOL, abs=ATOL)
    # Smoothing changes the loss (the oracle without it differs by far
    # more than the tolerance) ...
    plain = oracle.masked_cross_entropy(labels, logits)
    assert abs(float(np_(loss(labels, logits))) - plain) > 1e-2
    # ... and 0 is today's loss exactly.
    np.testing.assert_array_equal(
        np_(MaskedLoss(label_smoothing=0.0)(labels, logits)),
        np_(masked_loss(labels, logits)),
    )


def test_label_smoothing_gradient_matches_the_oracle(rng):
    # Central differences of the float64 oracle; padded positions get
    # exactly 0. float32 softmax terms of O(1): as above.
    labels, logits = _data(rng)
    holder = _Logits(logits)
    loss = MaskedLoss(label_smoothing=SMOOTHING)

    _, (grad,) = loss_gradients(
        holder,
        lambda: loss(labels, keras.ops.convert_to_tensor(holder.logits)),
    )
    (expected,) = numerical_gradient(
        lambda p: oracle.masked_cross_entropy(
            labels, p[0], label_smoothing=SMOOTHING
        ),
        [logits],
    )
    np.testing.assert_allclose(grad, expected, atol=1e-6)
    assert np.all(grad[labels == 0] == 0.0)


def test_label_smoothing_trains_in_fit_and_survives_a_keras_file(rng, tmp_path):
    # The logits are rows of an embedding table looked up by the inputs:
    # one SGD step (lr 1) inside the compiled `fit` moves the table by
    # minus the oracle's gradient with respect to it.
    vocab_in, vocab = 5, 6
    inputs = rng.integers(0, vocab_in, (3, 4))
    labels, _ = _data(rng)
    table = rng.normal(size=(vocab_in, vocab)).astype("float32")
    ids = keras.Input((4,), dtype="int32")
    embedding = keras.layers.Embedding(
        vocab_in,
        vocab,
        embeddings_initializer=keras.initializers.Constant(table),
    )
    model = keras.Model(ids, embedding(ids))
    model.compile(
        keras.optimizers.SGD(1.0), loss=MaskedLoss(label_smoothing=SMOOTHING)
    )
    model.fit(inputs, labels, batch_size=3, epochs=1, shuffle=False, verbose=0)
    (expected_grad,) = numerical_gradient(
        lambda p: oracle.masked_cross_entropy(
            labels, p[0][inputs], label_smoothing=SMOOTHING
        ),
        [table],
    )
    trained = np_(embedding.embeddings)
    np.testing.assert_allclose(trained, table - expected_grad, atol=1e-6)
    # The loss and its smoothing are saved with the model.
    path = str(tmp_path / "smoothed.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.loss, MaskedLoss)
    assert loaded.loss.label_smoothing == SMOOTHING
    config = MaskedLoss(label_smoothing=SMOOTHING).get_config()
    assert config["label_smoothing"] == SMOOTHING
    # A config saved before label smoothing existed loads as 0.
    old = MaskedLoss.from_config({"name": "masked_loss", "dtype": "float32"})
    assert old.label_smoothing == 0.0


@pytest.mark.parametrize(
    "value, message",
    [
        (-0.1, r"label_smoothing in \[0, 1\]; got -0.1"),
        (1.5, r"label_smoothing in \[0, 1\]; got 1.5"),
        (float("nan"), r"label_smoothing in \[0, 1\]; got nan"),
        ("0.1", r"a number in \[0, 1\]; got '0.1' \(str\)"),
        (True, r"a number in \[0, 1\]; got True \(bool\)"),
        (None, r"a number in \[0, 1\]; got None \(NoneType\)"),
    ],
    ids=["negative", "above_one", "nan", "string", "bool", "none"],
)
def test_bad_label_smoothing_is_refused(value, message):
    with pytest.raises(ValueError, match=message):
        MaskedLoss(label_smoothing=value)
