"""Translator: gradients against finite differences of the oracle, gradient
flow, freezing, generation, bad input and `.keras` round trip."""

import re

import keras
import numpy as np
import pytest

import kmodels.seq2seq.gru as gru_module
import kmodels.seq2seq.translator as translator_module
from kmodels.seq2seq import Autoencoder
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_acc
from kmodels.seq2seq import masked_loss
from kmodels.seq2seq.gru import check_fast_gru
from kmodels.testing import oracle
from kmodels.testing.gradients import loss_gradients
from kmodels.testing.layer_contract import run_layer_test

np_ = keras.ops.convert_to_numpy

VOCAB_C, VOCAB_T, UNITS = 7, 6, 3
START, END = 1, 2


def _batch(rng, batch=3):
    """Right-padded ids: row 1 has a padded context, rows 0 and 2 padded
    targets (after END), row 2 a one-token context; rows repeat beyond 3."""
    rows = max(batch, 3)
    context = rng.integers(1, VOCAB_C, (rows, 5)).astype("int32")
    context[1, 3:] = 0
    context[2, 1:] = 0
    target = rng.integers(3, VOCAB_T, (rows, 5)).astype("int32")
    target[:, 0] = START
    target[0, 3] = END
    target[0, 4:] = 0
    target[2, 2] = END
    target[2, 3:] = 0
    context, target = context[:batch], target[:batch]
    return context, target[:, :-1], target[:, 1:]


def _model(rng, randomize, context, target_in, **kwargs):
    model = Translator(
        VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END, **kwargs
    )
    model.build((context.shape, target_in.shape))
    weights = randomize(model)
    return model, weights


def _all_nonzero(model, grads):
    return {
        v.path: float(np.abs(g).max())
        for v, g in zip(model.trainable_variables, grads)
        if not np.any(g != 0)
    }


def test_loss_gradients_match_finite_differences_of_oracle(
    rng, randomize, parity
):
    context, target_in, target_out = _batch(rng, batch=2)
    model, w = _model(rng, randomize, context, target_in)
    n_enc = len(model.encoder.weights)

    def oracle_loss(params):
        return oracle.seq2seq_loss(
            context, target_in, target_out, params[:n_enc], params[n_enc:]
        )

    expected = oracle.numerical_gradient(oracle_loss, w)
    loss, grads = loss_gradients(
        model, lambda: masked_loss(target_out, model((context, target_in)))
    )
    # Loss: float32 vs float64, ~1e-7. Gradients: float32 backprop through
    # GRUs, softmax and LayerNorm vs float64 central differences (~1e-9
    # accurate): measured errors < 2e-7.
    assert loss == pytest.approx(oracle_loss(w), rel=1e-5)
    assert len(grads) == len(w)
    for v, g, e in zip(model.trainable_variables, grads, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6, err_msg=v.path)
    # Gradient flow: every weight of the translator gets a gradient.
    assert _all_nonzero(model, grads) == {}
    parity.record("seq2seq/loss_grad_output_kernel", grads[-2], 1e-6, 1e-4)
    parity.record("seq2seq/loss_grad_encoder_kernel", grads[1], 1e-6, 1e-4)


def test_each_backend_runs_the_grus_it_runs_fastest_on_the_cpu():
    # `kmodels.seq2seq.gru`'s recurrence on every backend (it measured
    # faster than Keras' layers on each CPU), one loop for the whole
    # Translator on torch only.
    backend = keras.backend.backend()
    model = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END)
    model.build(((2, 5), (2, 4)))
    layers = (model.encoder.rnn.forward_layer, model.decoder.rnn)
    assert [check_fast_gru(layer) for layer in layers] == [True, True]
    context = np.ones((2, 5), "int32")
    fused = model._call_in_one_recurrence(context, np.ones((2, 4), "int32"))
    assert (fused is not None) is (backend == "torch")


@pytest.fixture
def one_recurrence(monkeypatch):
    """`Translator`'s single recurrence on every backend (where it is not
    the default too), so that its arithmetic is tested everywhere."""
    monkeypatch.setattr(gru_module, "prefers_one_recurrence", lambda: True)
    monkeypatch.setattr(
        translator_module, "prefers_one_model_recurrence", lambda: True
    )


@pytest.mark.parametrize("source, target", [(6, 3), (2, 5)])
def test_one_recurrence_equals_the_encoder_then_the_decoder(
    rng, randomize, source, target, one_recurrence
):
    # `Translator.call` runs the encoder's two GRUs and the decoder's GRU
    # in one recurrence of max(source, target) steps (the default on
    # torch); the shorter side is padded. Logits and every gradient equal
    # the layers called one after the other (each with its own path).
    # float32 both ways, the same operations in another grouping:
    # measured differences < 1e-7.
    context = rng.integers(1, VOCAB_C, (3, source)).astype("int32")
    context[1, source // 2 :] = 0
    target_in = rng.integers(3, VOCAB_T, (3, target)).astype("int32")
    target_in[:, 0] = START
    target_in[2, target // 2 :] = 0
    model, _ = _model(rng, randomize, context, target_in)
    assert model._call_in_one_recurrence(context, target_in) is not None
    weight = keras.ops.convert_to_tensor(
        rng.standard_normal((3, target, VOCAB_T)).astype("float32")
    )

    def one():
        return model((context, target_in))

    def separate():
        encoded = model.encoder(context)
        return model.decoder(encoded, target_in, context_mask=context != 0)

    np.testing.assert_allclose(np_(one()), np_(separate()), atol=1e-6)
    # And both against the float64 oracle.
    n_enc = len(model.encoder.weights)
    weights = [np_(w).astype("float64") for w in model.weights]
    context_ref = oracle.seq2seq_encoder(context, weights[:n_enc])
    logits_ref = oracle.seq2seq_decoder(
        context_ref, context != 0, target_in, weights[n_enc:]
    )[0]
    np.testing.assert_allclose(np_(one()), logits_ref, rtol=1e-5, atol=1e-6)
    _, grads = loss_gradients(model, lambda: keras.ops.sum(one() * weight))
    _, expected = loss_gradients(
        model, lambda: keras.ops.sum(separate() * weight)
    )
    assert len(grads) == len(expected) == len(model.trainable_variables)
    for v, g, e in zip(model.trainable_variables, grads, expected):
        np.testing.assert_allclose(g, e, atol=1e-6, err_msg=v.path)


def test_compile_auto_means_xla_on_every_compiling_backend(rng):
    # kmodels' models compile with XLA where Keras' "auto" does (JAX) and
    # on TensorFlow on the CPU, where Keras' does not (a plain
    # keras.Model shows Keras' own choice); torch stays eager.
    # `jit_compile=False` is obeyed.
    compiled = {"tensorflow": True, "jax": True, "torch": False}
    expected = compiled[keras.backend.backend()]
    context, target_in, target_out = _batch(rng)
    for model in (
        Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END),
        Autoencoder(VOCAB_C, UNITS),
    ):
        model.compile("adam", loss=masked_loss)
        assert model.jit_compile is expected
        model.compile("adam", loss=masked_loss, jit_compile=False)
        assert model.jit_compile is False
    inputs = keras.Input((3,))
    plain = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    plain.compile("adam", loss="mse")
    assert plain.jit_compile is (keras.backend.backend() == "jax")
    # The compiled step trains: its loss is the evaluated one, and one
    # small SGD step lowers it.
    keras.utils.set_random_seed(0)
    model = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END)
    model.compile(keras.optimizers.SGD(0.05), loss=masked_loss)
    before = float(model.evaluate((context, target_in), target_out, verbose=0))
    first = model.train_on_batch((context, target_in), target_out)
    assert float(first) == pytest.approx(before, rel=1e-5)
    after = float(model.evaluate((context, target_in), target_out, verbose=0))
    assert after < before


def _weights(layer):
    return [np.array(w) for w in layer.get_weights()]


def _changed(before, after):
    return [not np.array_equal(a, b) for a, b in zip(before, after)]


def test_freeze_pretrained_encoder_then_unfreeze(rng):
    context, target_in, target_out = _batch(rng, batch=4)
    auto = Autoencoder(VOCAB_C, UNITS)
    auto.compile(keras.optimizers.Adam(0.05), loss=masked_loss)
    auto.fit(context, context, epochs=2, verbose=0)
    encoder = auto.encoder
    encoder.trainable = False
    model = Translator(None, VOCAB_T, None, START, END, encoder=encoder)
    model.compile(
        keras.optimizers.Adam(0.05), loss=masked_loss, metrics=[masked_acc]
    )
    enc0 = _weights(encoder)
    model.build((context.shape, target_in.shape))
    dec0 = _weights(model.decoder)
    model.fit((context, target_in), target_out, epochs=3, verbose=0)
    assert _changed(enc0, _weights(encoder)) == [False] * 7  # bit-identical
    assert _changed(dec0, _weights(model.decoder)) == [True] * 16
    # Adam keeps momentum and velocity per trained weight, none for the
    # encoder: 2 counters + 2 x 16 decoder slots.
    paths = [v.path for v in model.optimizer.variables]
    assert len(paths) == 2 + 2 * 16
    assert not [p for p in paths if "encoder" in p]

    # Unfreezing (with a recompile) is in the next test.


@pytest.mark.slow(reason="four fits of a translator (12-26 s)")
def test_freezing_after_a_fit_with_and_without_recompiling(rng):
    """`Translator.set_encoder_trainable` (recompiles) behaves the same on
    every backend; flipping `encoder.trainable` on a model that has already
    trained, without recompiling, does not: pinned for Keras 3.15."""
    context, target_in, target_out = _batch(rng, batch=4)
    data = ((context, target_in), target_out)
    model = Translator(VOCAB_C, VOCAB_T, UNITS, START, END)
    # TensorFlow without XLA: the freezing rules are the trainer's, with XLA
    # or not, and XLA compiling four train steps was most of this test's
    # time there (8.1 s against 4.6 s, 2026-12-05). JAX without its jit
    # runs the GRUs step by step in Python (13 s against 5 s).
    jit = "auto" if keras.backend.backend() != "tensorflow" else False
    model.compile(
        keras.optimizers.Adam(0.05), loss=masked_loss, jit_compile=jit
    )
    model.fit(*data, epochs=1, verbose=0)

    enc0 = _weights(model.encoder)
    model.set_encoder_trainable(False)
    model.fit(*data, epochs=2, verbose=0)
    assert _changed(enc0, _weights(model.encoder)) == [False] * 7
    assert not [v for v in model.optimizer.variables if "encoder" in v.path]
    model.set_encoder_trainable(True)
    model.fit(*data, epochs=1, verbose=0)
    assert _changed(enc0, _weights(model.encoder)) == [True] * 7

    enc1 = _weights(model.encoder)
    model.encoder.trainable = False  # no recompile
    backend = keras.backend.backend()
    if backend == "jax":
        # The optimizer was built for the 23 weights it had at first fit.
        # (The failed fit also leaves the model's variables without values:
        # JAX's fit holds the state outside them during an epoch.)
        with pytest.raises(ValueError, match="optimizer was built with 23"):
            model.fit(*data, verbose=0)
    else:
        model.fit(*data, verbose=0)
        # TensorFlow reuses the traced train step: the encoder still
        # trains. Torch runs eagerly and sees the flag.
        still_trains = backend == "tensorflow"
        assert _changed(enc1, _weights(model.encoder)) == [still_trains] * 7


@pytest.fixture(scope="module")
def generator():
    """One randomized translator shared by the generation tests, so that
    each compiled generation loop is traced once per backend."""
    context, target_in, _ = _batch(np.random.default_rng(99))
    model = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=END)
    model.build((context.shape, target_in.shape))
    # Large random weights; this draw makes greedy decoding emit different
    # tokens across rows and steps (small random nets repeat one token).
    rng = np.random.default_rng(3)
    model.set_weights(
        [
            rng.uniform(-2.5, 2.5, w.shape).astype("float32")
            for w in model.weights
        ]
    )
    greedy = tuple(map(np_, model.generate(context, max_length=6)))
    return model, context, greedy


def _teacher_forced_argmax(model, context, ids, start=START):
    """Greedy decoding replayed with teacher forcing: feed [START] + ids and
    take the argmax over the non-padding ids."""
    batch = ids.shape[0]
    target_in = np.concatenate(
        [np.full((batch, 1), start, "int32"), ids[:, :-1]], axis=1
    )
    logits = np_(model((context, target_in)))
    return 1 + np.argmax(logits[..., 1:], axis=-1)


def test_greedy_generation_equals_teacher_forced_argmax(generator):
    model, context, (ids, attention) = generator
    assert ids.shape == (3, 6) and attention.shape == (3, 6, 5)
    assert ids.dtype == np.int32
    replay = _teacher_forced_argmax(model, context, ids)
    for row in range(3):
        n = int(np.sum(ids[row] != 0))
        assert np.all(ids[row, n:] == 0)
        np.testing.assert_array_equal(ids[row, :n], replay[row, :n])
        if n < 6:  # stopped: the next greedy token was END
            assert replay[row, n] == END
        # Attention rows: a distribution over real context positions for
        # generated tokens, zeros after the end.
        np.testing.assert_allclose(attention[row, :n].sum(-1), 1.0, 1e-5)
        assert np.all(attention[row, :n][:, context[row] == 0] == 0.0)
        assert np.all(attention[row, n:] == 0.0)


def test_generation_stops_at_end_and_pads(generator):
    model, context, (free_ids, _) = generator
    # Pick as END a token that greedy decoding first emits at step k >= 1
    # of some row r (not START, which would stop at once).
    r, k = next(
        (r, k)
        for r in range(3)
        for k in range(1, 6)
        if free_ids[r, k] not in (0, START)
        and free_ids[r, k] not in free_ids[r, :k]
    )
    end = int(free_ids[r, k])
    ended = Translator(VOCAB_C, VOCAB_T, UNITS, start_id=START, end_id=end)
    ended.build((context.shape, (3, 4)))
    ended.set_weights(model.get_weights())
    ids = np_(ended.generate(context, max_length=6)[0])
    for row in range(3):
        hits = np.flatnonzero(free_ids[row] == end)
        stop = int(hits[0]) if hits.size else 6
        np.testing.assert_array_equal(ids[row, :stop], free_ids[row, :stop])
        assert np.all(ids[row, stop:] == 0)
    assert np.all(ids[r, k:] == 0) and np.all(ids[r, :k] != 0)


def test_sampling_is_reproducible_with_a_seed(generator):
    model, context, (greedy, _) = generator
    a = np_(model.generate(context, 6, temperature=50.0, seed=7)[0])
    b = np_(model.generate(context, 6, temperature=50.0, seed=7)[0])
    np.testing.assert_array_equal(a, b)
    draws = [
        np_(model.generate(context, 6, temperature=50.0, seed=s)[0])
        for s in (1, 2, 3)
    ]
    assert any(not np.array_equal(a, d) for d in draws)
    # Near-uniform sampling. Sampled ids are valid (never the padding id)
    # and padding follows END.
    for ids in [a] + draws:
        assert ids.min() >= 0 and ids.max() < VOCAB_T
        for row in ids:
            n = int(np.sum(row != 0))
            assert np.all(row[n:] == 0)
    # Near-zero temperature: sampling puts all mass on the argmax.
    cold = np_(model.generate(context, 6, temperature=1e-4, seed=3)[0])
    np.testing.assert_array_equal(cold, greedy)


def test_out_of_range_ids_are_rejected_before_generation(generator):
    model, context, _ = generator
    bad = context.copy()
    bad[0, 0] = VOCAB_C
    bad[1, 0] = -1
    message = (
        "context_tokens must lie in [0, 7) (vocabulary_size=7); got values "
        "[-1, 7] (min -1, max 7)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        model.generate(bad)
    with pytest.raises(ValueError, match=re.escape("got shape (5,)")):
        model.generate(context[0])
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        model.generate(context, temperature=-1.0)


def test_model_contract(rng):
    context, target_in, _ = _batch(rng)
    run_layer_test(
        Translator,
        dict(
            context_vocabulary_size=VOCAB_C,
            target_vocabulary_size=VOCAB_T,
            units=UNITS,
            start_id=START,
            end_id=END,
        ),
        input_data=(context, target_in),
        expected_output_shape=(3, 4, VOCAB_T),
        expected_output_dtype="float32",
        expected_num_trainable_weights=7 + 16,
        expected_num_non_trainable_weights=0,
        expected_mask=False,
        # Training is pinned above: every weight gets a gradient, and fit
        # moves exactly the trainable ones (freezing tests).
        run_training_check=False,
        # The .keras round trip (outputs, generation, freezing) is pinned
        # at the end of this file.
        run_saving_check=False,
    )


def test_constructor_checks():
    message = re.escape(
        "Translator: `end_id` must be an integer in [1, 5]; got 6 (int)."
    )
    with pytest.raises(ValueError, match=message):
        Translator(VOCAB_C, VOCAB_T, UNITS, start_id=1, end_id=6)
    auto = Autoencoder(VOCAB_C, UNITS)
    with pytest.raises(ValueError, match="units=5 does not match"):
        Translator(None, VOCAB_T, 5, encoder=auto.encoder)


def test_keras_round_trip_keeps_outputs_generation_and_freezing(
    generator, tmp_path
):
    model, context, (greedy, _) = generator
    target_in = np.array([[START, 3, 4]] * 3, "int32")
    # Compared in the same trainable state: torch's GRU may pick another
    # kernel for weights that need no gradient (last-digit differences).
    model.encoder.trainable = False
    try:
        model.compile("adam", loss=masked_loss, metrics=[masked_acc])
        path = str(tmp_path / "translator.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        assert isinstance(loaded, Translator)
        assert loaded.start_id == START and loaded.end_id == END
        assert not loaded.encoder.trainable
        assert len(loaded.trainable_variables) == 16
        np.testing.assert_array_equal(
            np_(loaded((context, target_in))),
            np_(model((context, target_in))),
        )
        np.testing.assert_array_equal(
            np_(loaded.generate(context, 6)[0]), greedy
        )
        sampled = np_(loaded.generate(context, 6, temperature=1.5, seed=4)[0])
        np.testing.assert_array_equal(
            sampled,
            np_(model.generate(context, 6, temperature=1.5, seed=4)[0]),
        )
    finally:
        model.encoder.trainable = True
