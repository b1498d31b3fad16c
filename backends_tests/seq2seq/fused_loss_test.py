"""fused_masked_loss and Translator(fused_loss=True): the loss and every
gradient against a NumPy oracle and against the dense path."""

import keras
import numpy as np
import pytest

from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_loss
from kmodels.seq2seq.fused_loss import fused_masked_loss
from kmodels.seq2seq.losses import MaskedLoss
from kmodels.testing.gradients import loss_gradients

np_ = keras.ops.convert_to_numpy

# Sums of a few float32 softmax terms of O(1) (measured < 3e-7).
ATOL = 1e-6
B, T, U, V = 3, 4, 5, 7


def _oracle(h, kernel, bias, labels, sample_weight=None, smoothing=0.0):
    """Masked (smoothed) sparse cross-entropy of `h @ kernel + bias` and its
    gradients with respect to `h`, `kernel` and `bias`, in float64."""
    h, kernel, bias = (np.asarray(x, np.float64) for x in (h, kernel, bias))
    logits = h @ kernel + bias
    z = logits - logits.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    q = (1 - smoothing) * np.eye(V)[labels] + smoothing / V
    token = -(q * log_p).sum(-1)
    weight = (labels != 0).astype(np.float64)
    if sample_weight is not None:
        w = np.asarray(sample_weight, np.float64)
        weight = weight * (w[:, None] if w.ndim == 1 else w)
    count = weight.sum()
    scale = weight / count if count else np.zeros_like(weight)
    loss = float((token * scale).sum())
    d_logits = (np.exp(log_p) - q) * scale[..., None]
    return loss, (
        d_logits @ kernel.T,
        np.einsum("btu,btv->uv", h, d_logits),
        d_logits.sum((0, 1)),
    )


class _Holder(keras.layers.Layer):
    """`h`, the kernel and the bias as variables, to differentiate."""

    def __init__(self, h, kernel, bias):
        super().__init__()
        self.h, self.k, self.b = (
            self.add_weight(
                shape=x.shape, initializer=keras.initializers.Constant(x)
            )
            for x in (h, kernel, bias)
        )


@pytest.fixture
def inputs(rng):
    h = rng.normal(size=(B, T, U)).astype("float32")
    kernel = rng.normal(size=(U, V)).astype("float32")
    bias = rng.normal(size=V).astype("float32")
    labels = rng.integers(1, V, (B, T))
    labels[0, 2:] = 0
    labels[1] = 0  # a fully padded row
    return h, kernel, bias, labels


CASES = {
    # 5 real positions: chunks of 2 leave a partial last chunk; the default
    # (320) is one.
    "plain_chunks_of_2": dict(chunk_size=2),
    "plain_default_chunk": dict(),
    "token_weights_and_smoothing": dict(
        chunk_size=3,
        sample_weight=np.arange(B * T, dtype="float32").reshape(B, T) / 7,
        label_smoothing=0.1,
    ),
    "example_weights": dict(sample_weight=np.array([0.5, 3.0, 2.0])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_gradients_match_oracle_and_dense_path(inputs, case):
    h, kernel, bias, labels = inputs
    options = CASES[case]
    holder = _Holder(h, kernel, bias)
    weight = options.get("sample_weight")
    smoothing = options.get("label_smoothing", 0.0)

    def fused():
        return fused_masked_loss(
            holder.h, holder.k, holder.b, labels, **options
        )

    def dense():
        logits = keras.ops.matmul(holder.h, holder.k) + holder.b
        return MaskedLoss(label_smoothing=smoothing)(labels, logits, weight)

    loss, grads = loss_gradients(holder, fused)
    dense_loss, dense_grads = loss_gradients(holder, dense)
    want_loss, want_grads = _oracle(h, kernel, bias, labels, weight, smoothing)
    assert float(np_(loss)) == pytest.approx(want_loss, abs=ATOL)
    assert float(np_(loss)) == pytest.approx(float(np_(dense_loss)), abs=ATOL)
    for got, dense_got, want in zip(grads, dense_grads, want_grads):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
        np.testing.assert_allclose(got, dense_got, atol=ATOL, rtol=0)
    # Padded positions get exactly no gradient.
    assert not np.any(grads[0][labels == 0])


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="a graph kept for a second backward pass (retain_graph) is "
    "torch's autograd; TensorFlow and JAX differentiate functions",
)
def test_a_retained_graph_gives_the_same_gradients_twice(inputs):
    # torch's projected cross-entropy turns its saved exponentials into
    # the logits' gradient in place: a second backward pass recomputes
    # them.
    import torch

    h, kernel, bias, labels = inputs
    leaves = [torch.tensor(x, requires_grad=True) for x in (h, kernel, bias)]
    loss = fused_masked_loss(*leaves, labels, label_smoothing=0.1)
    loss.backward(retain_graph=True)
    first = [leaf.grad.clone() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    loss.backward()
    _, want = _oracle(h, kernel, bias, labels, smoothing=0.1)
    for leaf, got, expected in zip(leaves, first, want):
        torch.testing.assert_close(leaf.grad, got, rtol=0, atol=0)
        np.testing.assert_allclose(got.numpy(), expected, atol=ATOL, rtol=0)


def test_all_padding_is_zero_with_zero_gradients(inputs):
    h, kernel, bias, _ = inputs
    holder = _Holder(h, kernel, bias)
    labels = np.zeros((B, T), "int32")
    loss, grads = loss_gradients(
        holder,
        lambda: fused_masked_loss(holder.h, holder.k, holder.b, labels),
    )
    assert float(np_(loss)) == 0.0
    assert all(not np.any(g) for g in grads)


def test_label_out_of_range_gives_nan(inputs):
    h, kernel, bias, labels = inputs
    labels = labels.copy()
    labels[2, 0] = V
    assert np.isnan(float(np_(fused_masked_loss(h, kernel, bias, labels))))


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(chunk_size=0), ValueError, "chunk_size to be an int >= 1; got 0"),
        (
            dict(kernel=np.zeros((U + 1, V), "float32")),
            ValueError,
            "got features (3, 4, 5), kernel (6, 7), bias (7,) and y_true "
            "(3, 4)",
        ),
        (
            dict(h=np.zeros((B, T, U), "int32")),
            TypeError,
            "expects float32 features; got int32",
        ),
        (dict(label_smoothing=2.0), ValueError, "label_smoothing in [0, 1]"),
    ],
)
def test_bad_arguments_are_clear_errors(inputs, change, error, message):
    h, kernel, bias, labels = inputs
    args = dict(h=h, kernel=kernel, bias=bias)
    options = {k: v for k, v in change.items() if k not in args}
    args.update({k: v for k, v in change.items() if k in args})
    with pytest.raises(error) as info:
        fused_masked_loss(
            args["h"], args["kernel"], args["bias"], labels, **options
        )
    assert message in str(info.value)


def _batch(rng):
    context = rng.integers(1, 20, (4, 5)).astype("int32")
    context[1, 3:] = 0
    target = rng.integers(4, 30, (4, 6)).astype("int32")
    target[0, 4:] = 0
    target[2, 1:] = 0
    return (context, target[:, :-1]), target[:, 1:]


def test_translator_trains_as_the_dense_path(rng):
    # One SGD step at learning rate 1: the weights move by the gradients,
    # so equal weights after it are equal gradients (the dense path is
    # checked against its own oracle in losses_test.py).
    x, y = _batch(rng)
    results = []
    for fused in (True, False):
        keras.utils.set_random_seed(0)
        model = Translator(20, 30, units=8, fused_loss=fused)
        model(x)
        before = [np_(w).copy() for w in model.trainable_weights]
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=masked_loss)
        assert model._uses_fused_loss() is fused
        loss = float(model.train_on_batch(x, y))
        moved = [b - np_(w) for b, w in zip(before, model.trainable_weights)]
        results.append((loss, moved))
        # Users still get the full logits.
        assert tuple(model(x).shape) == (4, 5, 30)
    assert tuple(model.predict(x, verbose=0).shape) == (4, 5, 30)
    (fused_loss, fused_moved), (dense_loss, dense_moved) = results
    assert fused_loss == pytest.approx(dense_loss, abs=ATOL)
    assert any(np.any(m) for m in fused_moved)
    for a, b in zip(fused_moved, dense_moved):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=0)


def test_fused_loss_applies_only_where_it_can():
    model = Translator(20, 30, units=8, fused_loss=True)
    model.compile(optimizer="adam", loss=masked_loss, metrics=["accuracy"])
    # Metrics read the logits: the dense path.
    assert model._uses_fused_loss() is False
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    assert model._uses_fused_loss() is False
    model.compile(optimizer="adam", loss=masked_loss, loss_weights=2.0)
    assert model._uses_fused_loss() is False
    model.compile(optimizer="adam", loss=MaskedLoss(label_smoothing=0.1))
    assert model._uses_fused_loss() is True
    config = Translator(20, 30, units=8, fused_loss=False).get_config()
    assert config["fused_loss"] is False
    assert Translator.from_config(config).fused_loss is False
    with pytest.raises(ValueError, match="fused_loss"):
        Translator(20, 30, units=8, fused_loss="yes")
    # The default follows the backend's measurement: faster on every
    # backend on the CPU (docs/seq2seq.md).
    model = Translator(20, 30, units=8)
    assert model.fused_loss is None
    model.compile(optimizer="adam", loss=masked_loss)
    assert model._uses_fused_loss() is True
