"""kmodels.models.transformer_encoder: the full forward pass against the
NumPy oracle with padding masks, masking invariance, gradients, saving."""

import keras
import numpy as np

from kmodels.diagnostics import gradient_report
from kmodels.models import transformer_encoder
from kmodels.testing import oracle

np_ = keras.ops.convert_to_numpy

# Embedding + attention + 2 LayerNorms + FFN + mean pool + Dense in float32
# against float64: LayerNorm divides by a std that can be ~0.1, so errors of
# ~1e-7 grow to ~1e-6; 1e-5 is the stated bound.
TOL = dict(rtol=1e-5, atol=1e-5)

# Right-padded ids (0 = padding), lengths 7, 4, 1.
IDS = np.array(
    [[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5, 0, 0, 0], [8, 0, 0, 0, 0, 0, 0]],
    "int32",
)


def _model(**kwargs):
    args = dict(num_classes=3, num_layers=2, num_heads=2, intermediate_dim=8)
    args.update(kwargs)
    return transformer_encoder(
        keras.layers.Embedding(10, 4, mask_zero=True), (7,), **args
    )


def _by_layer(model, values):
    """`{layer name: [arrays in that layer's weights order]}`."""
    out = {}
    for w, v in zip(model.weights, values):
        out.setdefault(w.path.split("/")[0], []).append((w.path, v))
    return out


def _oracle_logits(model, values, ids, position="learned"):
    w = _by_layer(model, values)
    named = dict(w["positional_embedding"])
    table = named["positional_embedding/embedding/embeddings"]
    x = oracle.embedding(ids, table)
    if position == "learned":
        pos_table = named["positional_embedding/position_embedding/embeddings"]
        x = x + oracle.learned_position_embedding(pos_table, ids.shape[1])
    else:
        x = x + oracle.sine_position_encoding(ids.shape[1], x.shape[-1])
    mask = ids != 0
    i = 0
    while f"encoder_{i}" in w:
        arrays = dict(w[f"encoder_{i}"])

        def get(part, _arrays=arrays, _i=i):
            return [v for p, v in _arrays.items() if f"/{part}/" in p]

        x = oracle.transformer_encoder(
            x,
            get("self_attention_layer"),
            get("self_attention_layer_norm"),
            get("feedforward_intermediate_dense"),
            get("feedforward_output_dense"),
            get("feedforward_layer_norm"),
            padding_mask=mask,
        )
        i += 1
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    kernel, bias = [v for _, v in w["logits"]]
    return oracle.dense(pooled, kernel, bias)


def test_forward_pass_matches_oracle_with_padding(randomize, parity):
    model = _model()
    values = randomize(model)
    logits = np_(model(IDS))
    np.testing.assert_allclose(
        logits, _oracle_logits(model, values, IDS), **TOL
    )
    parity.record("position/encoder_logits_padded", logits, **TOL)


def test_sine_forward_pass_matches_oracle(randomize, parity):
    model = _model(position="sine", num_layers=1)
    values = randomize(model)
    logits = np_(model(IDS))
    expected = _oracle_logits(model, values, IDS, position="sine")
    np.testing.assert_allclose(logits, expected, **TOL)
    parity.record("position/encoder_sine_logits_padded", logits, **TOL)


def test_padding_does_not_change_real_positions(randomize):
    """The same 4 tokens padded to 7, or to 5, or not padded at all give the
    same logits and the same hidden states at the real positions."""
    model = transformer_encoder(
        keras.layers.Embedding(10, 4, mask_zero=True),
        (None,),
        num_classes=3,
        num_layers=2,
        intermediate_dim=8,
        sequence_length=8,
    )
    randomize(model)
    hidden = keras.Model(model.input, model.get_layer("encoder_1").output)
    tokens = [6, 5, 3, 5]
    outputs = {}
    for length in (4, 5, 7):
        ids = np.zeros((1, length), "int32")
        ids[0, :4] = tokens
        outputs[length] = (np_(model(ids)), np_(hidden(ids))[:, :4])
    # Padded keys get exactly zero attention weight; what differs is the
    # float32 summation order: 1e-6.
    for length in (5, 7):
        np.testing.assert_allclose(
            outputs[length][0], outputs[4][0], rtol=1e-6, atol=1e-6
        )
        np.testing.assert_allclose(
            outputs[length][1], outputs[4][1], rtol=1e-6, atol=1e-6
        )


def test_every_weight_gets_a_gradient_and_inputs_matter():
    keras.utils.set_random_seed(0)
    model = _model()
    y = np.array([0, 1, 2], "int32")
    report = gradient_report(
        model,
        IDS,
        y,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        verbose=False,
    )
    # token + position tables, 16 per encoder block x 2, Dense kernel + bias.
    assert len(report.variables) == 2 + 16 * 2 + 2
    assert [v.status for v in report.variables] == ["ok"] * 36
    assert min(v.norm for v in report.variables) > 0.0
    assert report.output_depends_on_input is True
    assert report.ok
    logits = np_(model(IDS))
    assert np.abs(logits[0] - logits[1]).max() > 1e-3


def test_keras_file_round_trip(tmp_path, randomize):
    # A builder's functional model, not a layer class: the layer contract
    # (kmodels.testing.layer_contract) runs on its kmodels layer,
    # PositionalEmbedding, in layers/positional_embedding_test.py; this
    # pins the composition with keras-hub's encoder blocks.
    model = _model(merge="concat", num_layers=1)
    randomize(model)
    model.save(tmp_path / "encoder.keras")
    loaded = keras.models.load_model(tmp_path / "encoder.keras")
    # Same weights, same ops: identical outputs.
    np.testing.assert_array_equal(np_(loaded(IDS)), np_(model(IDS)))
