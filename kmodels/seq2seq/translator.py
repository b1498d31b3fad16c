"""The seq2seq translator: an `Encoder` and a `Decoder`, with generation.

Freezing, per backend (Keras 3.15): setting `encoder.trainable = False`
before the first `fit` (after `compile` or not) freezes it everywhere, and
the optimizer creates no slots for it. Flipping the flag on a compiled model
that has already trained, without recompiling, differs: TensorFlow reuses
its traced train step and keeps training the encoder; JAX raises
`ValueError` (the optimizer was built for the old variable list) and leaves
the model's variables without values; torch (eager) honours the new flag but
keeps the encoder's optimizer slots. `Translator.set_encoder_trainable`
recompiles and behaves the same on all three.
"""

import keras
from keras import ops

from kmodels.arguments import check_bool
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.backend.compiled import compile_reader
from kmodels.contracts.checks import check_ids
from kmodels.contracts.checks import check_translator_inputs
from kmodels.contracts.checks import checked
from kmodels.contracts.hook import ContractModel
from kmodels.layers.sublayers import finish_build
from kmodels.saving.saving_model import SavingModel
from kmodels.seq2seq.decoder import Decoder
from kmodels.seq2seq.eager_cache import CheckedEagerCall
from kmodels.seq2seq.encoder import Encoder
from kmodels.seq2seq.masking import padding_mask


def check_token_range(
    tokens, vocabulary_size, name="context_tokens", owner="Translator"
):
    """Returns `tokens` as an int32 NumPy array `(batch, s)`, or raises
    the contract's error (`kmodels.contracts.check_ids`): a `TypeError` for
    a non-numeric dtype, a `ValueError` naming the allowed range and the
    values received otherwise (wrong rank, empty, fractional, out of
    range).

    Keras' `Embedding` returns NaN for an out-of-range id on JAX (and raises
    on the other backends), so ids are checked eagerly, before any compiled
    step."""
    return check_ids(tokens, name, owner, vocabulary_size).astype("int32")


@keras.saving.register_keras_serializable(package="kmodels")
class Translator(CheckedEagerCall, ContractModel, SavingModel, keras.Model):
    """Attention-based sequence-to-sequence model returning logits.

    An `Encoder` over the context ids and a `Decoder` over the (shifted)
    target ids; `call((context_tokens, target_in))` returns the decoder's
    logits `(batch, t, target_vocabulary_size)`, to train with `masked_loss`
    against `target_out` (the targets shifted by one). The tutorial's
    version of this model returned the context by mistake.

    The start and end ids are constructor arguments. With a
    `keras.layers.TextVectorization` vocabulary they are the positions of
    the `[START]` and `[END]` tokens:
    `vocab = vectorizer.get_vocabulary(); start_id = vocab.index("[START]")`.
    The defaults (2 and 3) are where those tokens land when every sentence
    is wrapped in `[START] ... [END]` (after `''` and `[UNK]`), but pass the
    looked-up values.

    To reuse a pretrained encoder (e.g. from an `Autoencoder`), pass it as
    `encoder=`; set `encoder.trainable = False` (then compile) to freeze it.
    The sizes may then be left as `None` and are read from the encoder.

    Every argument is checked at construction, before any layer is made:
    a bad one raises a `ValueError` naming it, what was expected and what
    arrived (`2.5`, `"8"`, `True` are not sizes; NumPy ints are accepted
    and stored as Python ints).

    Args:
        context_vocabulary_size: int >= 1. Ids of the source side.
        target_vocabulary_size: int >= 3. Ids of the target side (logits
            width); padding (0), `start_id` and `end_id` are three of them.
        units: int >= 1. Size of every layer.
        start_id: int in `[1, target_vocabulary_size)`. Id fed to the
            decoder first in `generate`.
        end_id: int in `[1, target_vocabulary_size)`, not `start_id`. Id
            that ends a generated sequence.
        encoder: optional `Encoder` (or its config) to use instead of a new
            one.
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: tuple `(context_tokens (batch, s), target_in (batch, t))`,
            both int and right-padded with 0.

    Example:
    >>> import numpy as np
    >>> from kmodels.seq2seq import Translator
    >>> model = Translator(20, 30, units=8, start_id=2, end_id=3)
    >>> context = np.array([[5, 6, 7, 0]])
    >>> logits = model((context, np.array([[2, 9, 10]])))
    >>> tuple(logits.shape)
    (1, 3, 30)
    >>> ids, attention = model.generate(context, max_length=6)
    >>> tuple(ids.shape), tuple(attention.shape)
    ((1, 6), (1, 6, 4))
    """

    def __init__(
        self,
        context_vocabulary_size=None,
        target_vocabulary_size=None,
        units=None,
        start_id=2,
        end_id=3,
        encoder=None,
        **kwargs,
    ):
        # Every argument is checked before anything is built.
        owner = "Translator"
        context_vocabulary_size = check_optional_int(
            context_vocabulary_size, "context_vocabulary_size", owner
        )
        # Padding (0), `start_id` and `end_id` need three distinct ids.
        target_vocabulary_size = check_int(
            target_vocabulary_size, "target_vocabulary_size", owner, 3
        )
        units = check_optional_int(units, "units", owner)
        last_id = target_vocabulary_size - 1
        start_id = check_int(start_id, "start_id", owner, 1, last_id)
        end_id = check_int(end_id, "end_id", owner, 1, last_id)
        if start_id == end_id:
            raise ValueError(
                f"{owner}: `start_id` and `end_id` must differ; got "
                f"{start_id} for both."
            )
        if isinstance(encoder, dict):
            # Left unbuilt: this model's `build` builds it under its name
            # scope, so the weights keep their paths through a `.keras`
            # round trip.
            encoder = keras.saving.deserialize_keras_object(
                {k: v for k, v in encoder.items() if k != "build_config"}
            )
        if encoder is not None:
            if not isinstance(encoder, Encoder):
                raise ValueError(
                    f"{owner}: `encoder` must be a kmodels.seq2seq.Encoder "
                    f"(or its config) or None; got {type(encoder).__name__}."
                )
            for arg, value, expected in (
                (
                    "context_vocabulary_size",
                    context_vocabulary_size,
                    encoder.vocabulary_size,
                ),
                ("units", units, encoder.units),
            ):
                if value is not None and value != expected:
                    raise ValueError(
                        f"{owner}: {arg}={value} does not match the "
                        f"encoder's {expected}."
                    )
            context_vocabulary_size = encoder.vocabulary_size
            units = encoder.units
        elif context_vocabulary_size is None or units is None:
            raise ValueError(
                f"{owner}: `context_vocabulary_size` and `units` are "
                "required when no `encoder` is given; got "
                f"{context_vocabulary_size!r} and {units!r}."
            )
        super().__init__(**kwargs)
        self.context_vocabulary_size = context_vocabulary_size
        self.target_vocabulary_size = target_vocabulary_size
        self.units = units
        self.start_id = start_id
        self.end_id = end_id
        # Sublayers take the model's dtype policy (`Translator(dtype=
        # "mixed_float16")`), as keras-hub's layers pass theirs on.
        self.encoder = encoder or Encoder(
            self.context_vocabulary_size,
            self.units,
            dtype=self.dtype_policy,
            name="encoder",
        )
        self.decoder = Decoder(
            self.target_vocabulary_size,
            self.units,
            dtype=self.dtype_policy,
            name="decoder",
        )
        self._generators = {}

    def build(self, inputs_shape):
        context_shape, target_shape = (tuple(s) for s in inputs_shape)
        if not self.encoder.built:
            self.encoder.build(context_shape)
        self.decoder.build(context_shape + (self.units,), target_shape)
        finish_build(self)

    def _check_call_arguments(self, arguments, training):
        if arguments.get("inputs") is not None:
            check_translator_inputs(self, arguments.get("inputs"))

    def call(self, inputs, training=None):
        context_tokens, target_in = inputs
        context = self.encoder(context_tokens, training=training)
        return self.decoder(
            context,
            target_in,
            context_mask=padding_mask(context_tokens),
            training=training,
        )

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[1]) + (self.target_vocabulary_size,)

    def check_batch(self, x, y=None, training=False):
        """Checks a batch (or all the data) of `fit` / `evaluate` /
        `predict` / `*_on_batch` against the model's input contract, before
        any compiled step: `x = (context_tokens, target_in)` ids in
        `[0, context_vocabulary_size)` and `[0, target_vocabulary_size)`,
        2-D, non-empty, the same batch size; `y` (`target_out`, optional)
        ids in `[0, target_vocabulary_size)` of `target_in`'s shape. Raises
        the `TypeError` / `ValueError` of `kmodels.contracts`."""
        check_translator_inputs(self, x, y)

    def generate(
        self, context_tokens, max_length=50, temperature=0.0, seed=None
    ):
        """Generates target ids for a batch of context ids.

        Greedy (argmax) at `temperature=0`, else sampled from
        `softmax(logits / temperature)`; the padding id 0 is never
        produced. A sequence stops at `end_id`: the
        end id itself and everything after it are 0, as are the attention
        rows there. On TensorFlow and JAX the whole loop is one compiled
        `keras.ops.while_loop` (traced once per input shape, `max_length`
        and greedy/sampling); on torch it runs eagerly.

        Args:
            context_tokens: int `(batch, s)`, right-padded with 0; ids must
                lie in `[0, context_vocabulary_size)` (checked eagerly).
            max_length: int. Number of generated positions.
            temperature: float >= 0.
            seed: optional int. With a seed, sampling is reproducible (on a
                given backend); without, each call draws afresh.

        Returns:
            `(ids, attention)`: int32 `(batch, max_length)` and float
            `(batch, max_length, s)`.
        """
        tokens = check_token_range(
            context_tokens,
            self.context_vocabulary_size,
            owner="Translator.generate",
        )
        max_length = int(max_length)
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1; got {max_length}")
        temperature = float(temperature)
        if not temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0; got {temperature}")
        if not self.built:
            self.build((tokens.shape, (tokens.shape[0], 1)))
        sample = temperature > 0.0
        if sample:
            uniforms = keras.random.uniform(
                (tokens.shape[0], max_length), seed=seed
            )
        else:
            uniforms = ops.zeros((tokens.shape[0], max_length))
        key = (max_length, sample)
        if key not in self._generators:

            def loop(tokens, uniforms, temperature):
                return self._generate_loop(
                    tokens, uniforms, temperature, max_length, sample
                )

            self._generators[key] = compile_reader(loop, self.variables)
        with checked():
            return self._generators[key](
                ops.convert_to_tensor(tokens, "int32"),
                uniforms,
                ops.convert_to_tensor(
                    temperature if sample else 1.0, "float32"
                ),
            )

    def _generate_loop(self, tokens, uniforms, temperature, max_length, sample):
        context = self.encoder(tokens)
        context_mask = padding_mask(tokens)
        batch, s = ops.shape(tokens)[0], ops.shape(tokens)[1]
        positions = ops.arange(max_length, dtype="int32")
        vocab_ids = ops.arange(self.target_vocabulary_size, dtype="int32")

        def cond(i, token, state, done, ids, attention):
            return ops.logical_and(
                ops.less(i, max_length),
                ops.logical_not(ops.all(done)),
            )

        def body(i, token, state, done, ids, attention):
            logits, state, weights = self.decoder(
                context,
                token,
                state=state,
                return_state=True,
                context_mask=context_mask,
                return_attention_weights=True,
            )
            # The padding id is never generated.
            logits = ops.where(vocab_ids == 0, -1e9, logits[:, 0, :])
            if sample:
                probs = ops.softmax(logits / temperature, axis=-1)
                cdf = ops.cumsum(probs, axis=-1)
                u = ops.take(uniforms, i, axis=1)[:, None]
                # Inverse-CDF sampling: the first id whose cumulative
                # probability exceeds u.
                nxt = ops.sum(ops.cast(ops.less(cdf, u), "int32"), axis=-1)
                nxt = ops.minimum(nxt, self.target_vocabulary_size - 1)
            else:
                nxt = ops.cast(ops.argmax(logits, axis=-1), "int32")
            done = ops.logical_or(done, ops.equal(nxt, self.end_id))
            nxt = ops.where(done, 0, nxt)
            here = ops.equal(positions, i)[None, :]
            ids = ops.where(here, nxt[:, None], ids)
            keep = ops.logical_and(here[:, :, None], ~done[:, None, None])
            attention = ops.where(keep, weights, attention)
            return i + 1, nxt[:, None], state, done, ids, attention

        loop_vars = (
            ops.convert_to_tensor(0, "int32"),
            ops.full((batch, 1), self.start_id, dtype="int32"),
            ops.zeros((batch, self.units), dtype=self.compute_dtype),
            ops.zeros((batch,), dtype="bool"),
            ops.zeros((batch, max_length), dtype="int32"),
            ops.zeros((batch, max_length, s), dtype=self.compute_dtype),
        )
        out = ops.while_loop(cond, body, loop_vars)
        return out[4], out[5]

    def set_encoder_trainable(self, trainable):
        """Freezes (`False`) or unfreezes (`True`) the encoder, the same way
        on every backend.

        Setting `encoder.trainable` on a model that is already compiled
        behaves differently per backend (Keras 3.15, after a first `fit`):
        TensorFlow keeps the traced train step and goes on training the
        encoder, JAX raises a `ValueError` from the optimizer (it was built
        for the old variable list), torch (eager) takes the change into
        account. This method sets the flag and, when the model is compiled,
        recompiles it from its own compile config, with a fresh optimizer of
        the same configuration (its moments restart from zero).

        Args:
            trainable: `True` or `False` (a NumPy bool too); anything else
                (`"False"`, `0`, `None`) raises a `ValueError` and changes
                nothing.
        """
        trainable = check_bool(
            trainable, "trainable", "Translator.set_encoder_trainable"
        )
        self.encoder.trainable = trainable
        if self.compiled:
            self.compile_from_config(self.get_compile_config())

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "context_vocabulary_size": self.context_vocabulary_size,
                "target_vocabulary_size": self.target_vocabulary_size,
                "units": self.units,
                "start_id": self.start_id,
                "end_id": self.end_id,
                "encoder": keras.saving.serialize_keras_object(self.encoder),
            }
        )
        return config
