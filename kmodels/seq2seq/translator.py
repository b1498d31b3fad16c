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

import inspect

import keras
from keras import ops

from kmodels.arguments import check_bool
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int
from kmodels.backend import compiled as backend_compiled
from kmodels.backend.losses import prefers_fused_loss
from kmodels.backend.rnn import prefers_one_model_recurrence
from kmodels.contracts.checks import check_translator_inputs
from kmodels.contracts.hook import ContractModel
from kmodels.layers.sublayers import finish_build
from kmodels.saving.saving_model import SavingModel
from kmodels.seq2seq.decoder import Decoder
from kmodels.seq2seq.eager_cache import CheckedEagerCall
from kmodels.seq2seq.eager_cache import LRUCache
from kmodels.seq2seq.encoder import Encoder
from kmodels.seq2seq.free_cores import FreeCoreThreads
from kmodels.seq2seq.fused_loss import fused_masked_loss
from kmodels.seq2seq.generation import Generation
from kmodels.seq2seq.gru import check_fast_gru
from kmodels.seq2seq.gru import run_grus
from kmodels.seq2seq.losses import MaskedLoss
from kmodels.seq2seq.masking import padding_mask
from kmodels.seq2seq.masking import without_mask
from kmodels.seq2seq.xla_by_default import XLAByDefault


# `Translator.train_step` adds a third input to a batch's inputs for the
# fused loss, an empty int8 tensor (Keras takes only tensors as inputs):
# `call` then returns the output layer's input, and `compute_loss`, which
# receives the same inputs, projects the real positions only. Data, not
# state: no other call sees it.
def _features_request():
    return ops.zeros((0,), "int8")


def _asks_features(inputs):
    if not isinstance(inputs, (tuple, list)) or len(inputs) != 3:
        return False
    request = inputs[2]
    return (
        tuple(getattr(request, "shape", ())) == (0,)
        and keras.backend.standardize_dtype(request.dtype) == "int8"
    )


@keras.saving.register_keras_serializable(package="kmodels")
class Translator(
    Generation,
    CheckedEagerCall,
    FreeCoreThreads,
    ContractModel,
    SavingModel,
    XLAByDefault,
    keras.Model,
):
    """Attention-based sequence-to-sequence model returning logits.

    An `Encoder` over the context ids and a `Decoder` over the (shifted)
    target ids; `call((context_tokens, target_in))` returns the decoder's
    logits `(batch, t, target_vocabulary_size)`, to train with `masked_loss`
    against `target_out` (the targets shifted by one). `generate` decodes
    with keras-hub's samplers (greedy by default); see docs/decoding.md.

    Args:
        context_vocabulary_size: int >= 1. Ids of the source side.
        target_vocabulary_size: int >= 3. Ids of the target side (logits
            width); padding (0), `start_id` and `end_id` are three of them.
        units: int >= 1. Size of every layer.
        start_id: int in `[1, target_vocabulary_size)`, the `[START]` id
            fed to the decoder first in `generate`. Defaults to `2`.
        end_id: int in `[1, target_vocabulary_size)`, not `start_id`, the
            `[END]` id that ends a generated sequence. Defaults to `3`.
        encoder: optional `Encoder` (or its config) to use instead of a new
            one, e.g. a pretrained one (set `encoder.trainable = False`
            before `compile` to freeze it); sizes left `None` are read from it.
        fused_loss: `True`, `False` or `None` (the default: `True` where
            it was measured faster, every backend on the CPU, see
            `kmodels.backend.losses.prefers_fused_loss`). With `True` the
            train step (`fit`, `train_on_batch`) projects to the
            vocabulary only the real target positions, fused with the loss
            (`kmodels.seq2seq.fused_loss`), when the model is compiled with
            a `MaskedLoss` (e.g. `masked_loss`), no metrics, no loss
            weights and a float32 dtype policy; otherwise, and with
            `False`, it computes the full logits. Same loss and gradients
            either way (to float32 rounding); `call`, `predict` and
            `evaluate` always return or use the full logits. See
            docs/seq2seq.md, section "Training without paying for
            padding".
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: tuple `(context_tokens (batch, s), target_in (batch, t))`,
            both int and right-padded with 0.

    Example:
    >>> from kmodels.seq2seq import Translator
    >>> model = Translator(20, 30, units=8, start_id=2, end_id=3)
    >>> context = np.array([[5, 6, 7, 0]])
    >>> logits = model((context, np.array([[2, 9, 10]])))
    >>> tuple(logits.shape)
    (1, 3, 30)
    >>> ids, attention = model.generate(context, max_length=6)
    >>> tuple(ids.shape), tuple(attention.shape)
    ((1, 6), (1, 6, 4))
    >>> ids, attention, scores = model.generate(
    ...     context, max_length=6, sampler="beam", num_beams=3,
    ...     return_scores=True)
    >>> tuple(ids.shape), tuple(scores.shape)
    ((1, 6), (1,))

    See docs/seq2seq.md, section "Translator".
    """

    def __init__(
        self,
        context_vocabulary_size=None,
        target_vocabulary_size=None,
        units=None,
        start_id=2,
        end_id=3,
        encoder=None,
        fused_loss=None,
        **kwargs,
    ):
        # Every argument is checked before anything is built.
        owner = "Translator"
        if fused_loss is not None:
            fused_loss = check_bool(fused_loss, "fused_loss", owner)
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
        self.fused_loss = fused_loss
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
        # Compiled generation loops by sampler configuration and
        # `max_length`, at most `decoding.MAX_LOOPS`.
        self._generators = LRUCache()

    def build(self, inputs_shape):
        context_shape, target_shape = (tuple(s) for s in inputs_shape)
        if not self.encoder.built:
            self.encoder.build(context_shape)
        self.decoder.build(context_shape + (self.units,), target_shape)
        finish_build(self)

    def _check_call_arguments(self, arguments, training):
        inputs = arguments.get("inputs")
        if inputs is not None:
            if _asks_features(inputs):
                inputs = inputs[:2]
            check_translator_inputs(self, inputs)

    def call(self, inputs, training=None):
        # From `train_step` with the fused loss: the output layer's input.
        project = not (training and _asks_features(inputs))
        context_tokens, target_in = inputs[:2]
        logits = self._call_in_one_recurrence(
            context_tokens, target_in, project
        )
        if logits is not None:
            return logits
        context = self.encoder(context_tokens, training=training)
        return self.decoder(
            context,
            target_in,
            context_mask=padding_mask(context_tokens),
            training=training,
            project=project,
        )

    def _uses_fused_loss(self):
        """True when the train step projects the real positions only (see
        the `fused_loss` argument)."""
        fused = self.fused_loss
        if fused is None:
            fused = prefers_fused_loss()
        return (
            fused
            and isinstance(getattr(self, "loss", None), MaskedLoss)
            and not getattr(self, "_fused_blocked_by_compile", True)
            and self.compute_dtype == "float32"
            and self.variable_dtype == "float32"
            and self.loss.dtype == "float32"
        )

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        # Keras keeps the metrics of an earlier `compile` when this one has
        # none: whether this one has any (or loss weights, which the fused
        # loss does not apply) is read from its arguments.
        arguments = (
            inspect.signature(keras.Model.compile)
            .bind(self, *args, **kwargs)
            .arguments
        )
        self._fused_blocked_by_compile = bool(
            arguments.get("metrics")
            or arguments.get("weighted_metrics")
            or arguments.get("loss_weights") is not None
        )

    def train_step(self, *args, **kwargs):
        # Keras' own step (one signature per backend: `(data)`, or
        # `(state, data)` on JAX), on inputs that ask `call` for the output
        # layer's input (`FEATURES`) where the loss is fused; Keras hands
        # the same inputs to `compute_loss`.
        if not self._uses_fused_loss():
            return super().train_step(*args, **kwargs)
        *state, data = args
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if not self.built:
            # Built from the batch's two inputs, not the request.
            self.build(tuple(tuple(t.shape) for t in x))
        data = keras.utils.pack_x_y_sample_weight(
            (*x, _features_request()), y, sample_weight
        )
        return super().train_step(*state, data, **kwargs)

    def compute_loss(
        self, x=None, y=None, y_pred=None, sample_weight=None, training=True
    ):
        if not (training and _asks_features(x)):
            return super().compute_loss(
                x, y, y_pred, sample_weight, training=training
            )
        # `y_pred` is the output layer's input (`call` above).
        output_layer = self.decoder.output_layer
        loss = fused_masked_loss(
            y_pred,
            output_layer.kernel,
            output_layer.bias,
            y,
            sample_weight=sample_weight,
            label_smoothing=self.loss.label_smoothing,
        )
        for extra in self.losses:
            loss = loss + ops.sum(ops.cast(extra, loss.dtype))
        return loss

    def _call_in_one_recurrence(self, context_tokens, target_in, project=True):
        """`call`'s logits with the encoder's two GRUs and the decoder's
        GRU in one recurrence (the decoder's GRU reads only the target
        ids, not the context), or None where that does not pay
        (`kmodels.backend.rnn.prefers_one_model_recurrence`) or
        `kmodels.seq2seq.gru` does not apply (another GRU configuration,
        lengths unknown until run time or symbolic).

        Same layers, variables and arithmetic as `self.decoder(
        self.encoder(context_tokens), target_in, context_mask=...)`; the
        recurrence takes as many steps as the longer side instead of the
        sum of both."""
        layers = (
            self.encoder.rnn.forward_layer,
            self.encoder.rnn.backward_layer,
            self.decoder.rnn,
        )
        if not prefers_one_model_recurrence():
            return None
        if not all(check_fast_gru(layer) for layer in layers):
            return None
        lengths = (context_tokens.shape[1], target_in.shape[1])
        if not all(isinstance(length, int) for length in lengths):
            return None
        context_mask = padding_mask(context_tokens)
        target_mask = padding_mask(target_in)
        x = without_mask(self.encoder.embedding(context_tokens))
        h = without_mask(self.decoder.embedding(target_in))
        zeros = ops.zeros((ops.shape(x)[0], self.units), x.dtype)
        (forward, backward, h), (_, _, state) = run_grus(
            layers,
            (x, x, h),
            (context_mask, context_mask, target_mask),
            (zeros, zeros, zeros),
            reverse=(False, True, False),
            zero_output=(True, True, False),
        )
        return self.decoder.attend(
            h,
            state,
            forward + backward,
            context_mask=context_mask,
            project=project,
        )

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[1]) + (self.target_vocabulary_size,)

    def export(self, filepath, *args, **kwargs):
        """Keras' `Model.export` of the logits model `call((context_tokens,
        target_in))` (docs/export.md has the formats per backend).

        Raises:
            NotImplementedError: on torch, where no format round-trips the
                model (Keras would fail inside its exporter); nothing is
                written. Use `TextTranslator.export` (any backend), or
                export under TensorFlow or JAX.
        """
        refusal = backend_compiled.model_export_refusal("Translator.export")
        if refusal is not None:
            raise NotImplementedError(refusal)
        return super().export(filepath, *args, **kwargs)

    def _batch_spec(self):
        # `(context_tokens, target_in), target_out`: what `fit` and
        # `evaluate` build the loss and metrics from (`ContractModel`).
        ids = keras.KerasTensor((None, None), "int32")
        return (ids, ids), ids

    def check_batch(self, x, y=None, training=False):
        """Checks a batch (or all the data) of `fit` / `evaluate` /
        `predict` / `*_on_batch` against the model's input contract, before
        any compiled step: `x = (context_tokens, target_in)` ids in
        `[0, context_vocabulary_size)` and `[0, target_vocabulary_size)`,
        2-D, non-empty, the same batch size; `y` (`target_out`, optional)
        ids in `[0, target_vocabulary_size)` of `target_in`'s shape. Raises
        the `TypeError` / `ValueError` of `kmodels.contracts`."""
        check_translator_inputs(self, x, y)

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
                "fused_loss": self.fused_loss,
                "encoder": keras.saving.serialize_keras_object(self.encoder),
            }
        )
        return config
