"""The original code: the TensorFlow "NMT with attention" tutorial's model
(seed 000), written for tf.keras and run under Keras 2 (`tf_keras`, with
`TF_USE_LEGACY_KERAS=1`), as users ran it before porting.

The classes are the tutorial's, with two changes that do not slow it down:
vocabulary sizes and start/end ids are given as integers instead of a
`TextVectorization` processor (the benchmark feeds token ids), and the
`ShapeChecker` debugging calls are left out (they cost time in eager mode,
so the baseline measured here is, if anything, faster than the tutorial).
"""

from benchmarks import data
from benchmarks import flops
from benchmarks.timing import measure


def _tutorial_classes():
    import tensorflow as tf
    import tf_keras

    class Encoder(tf_keras.layers.Layer):
        def __init__(self, vocab_size, units):
            super(Encoder, self).__init__()
            self.vocab_size = vocab_size
            self.units = units
            self.embedding = tf_keras.layers.Embedding(
                self.vocab_size, units, mask_zero=True
            )
            self.rnn = tf_keras.layers.Bidirectional(
                merge_mode="sum",
                layer=tf_keras.layers.GRU(
                    units,
                    return_sequences=True,
                    recurrent_initializer="glorot_uniform",
                ),
            )

        def call(self, x):
            x = self.embedding(x)
            x = self.rnn(x)
            return x

    class CrossAttention(tf_keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__()
            self.mha = tf_keras.layers.MultiHeadAttention(
                key_dim=units, num_heads=1, **kwargs
            )
            self.layernorm = tf_keras.layers.LayerNormalization()
            self.add = tf_keras.layers.Add()

        def call(self, x, context):
            attn_output, attn_scores = self.mha(
                query=x, value=context, return_attention_scores=True
            )
            attn_scores = tf.reduce_mean(attn_scores, axis=1)
            self.last_attention_weights = attn_scores
            x = self.add([x, attn_output])
            x = self.layernorm(x)
            return x

    class Decoder(tf_keras.layers.Layer):
        def __init__(self, vocab_size, units, start_token, end_token):
            super(Decoder, self).__init__()
            self.start_token = tf.constant(start_token, tf.int64)
            self.end_token = tf.constant(end_token, tf.int64)
            self.vocab_size = vocab_size
            self.units = units
            self.embedding = tf_keras.layers.Embedding(
                self.vocab_size, units, mask_zero=True
            )
            self.rnn = tf_keras.layers.GRU(
                units,
                return_sequences=True,
                return_state=True,
                recurrent_initializer="glorot_uniform",
            )
            self.attention = CrossAttention(units)
            self.output_layer = tf_keras.layers.Dense(self.vocab_size)

        def call(self, context, x, state=None, return_state=False):
            x = self.embedding(x)
            x, state = self.rnn(x, initial_state=state)
            x = self.attention(x, context)
            self.last_attention_weights = self.attention.last_attention_weights
            logits = self.output_layer(x)
            if return_state:
                return logits, state
            else:
                return logits

        def get_initial_state(self, context):
            batch_size = tf.shape(context)[0]
            start_tokens = tf.fill([batch_size, 1], self.start_token)
            done = tf.zeros([batch_size, 1], dtype=tf.bool)
            embedded = self.embedding(start_tokens)
            return start_tokens, done, self.rnn.get_initial_state(embedded)[0]

        def get_next_token(
            self, context, next_token, done, state, temperature=0.0
        ):
            logits, state = self(
                context, next_token, state=state, return_state=True
            )
            if temperature == 0.0:
                next_token = tf.argmax(logits, axis=-1)
            else:
                logits = logits[:, -1, :] / temperature
                next_token = tf.random.categorical(logits, num_samples=1)
            done = done | (next_token == self.end_token)
            next_token = tf.where(
                done, tf.constant(0, dtype=tf.int64), next_token
            )
            return next_token, done, state

    class Translator(tf_keras.Model):
        def __init__(self, units, vocab_size, start_token, end_token):
            super().__init__()
            self.encoder = Encoder(vocab_size, units)
            self.decoder = Decoder(vocab_size, units, start_token, end_token)

        def call(self, inputs):
            context, x = inputs
            context = self.encoder(context)
            logits = self.decoder(context, x)
            try:
                del logits._keras_mask
            except AttributeError:
                pass
            return logits

        # The tutorial's `translate`, on token ids (no text conversion).
        def translate(self, context, *, max_length=50, temperature=0.0):
            context = self.encoder(context)
            tokens = []
            attention_weights = []
            next_token, done, state = self.decoder.get_initial_state(context)
            for _ in range(max_length):
                next_token, done, state = self.decoder.get_next_token(
                    context, next_token, done, state, temperature
                )
                tokens.append(next_token)
                attention_weights.append(self.decoder.last_attention_weights)
                if tf.executing_eagerly() and tf.reduce_all(done):
                    break
            tokens = tf.concat(tokens, axis=-1)
            self.last_attention_weights = tf.concat(attention_weights, axis=1)
            return tokens

    def masked_loss(y_true, y_pred):
        loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none"
        )
        loss = loss_fn(y_true, y_pred)
        mask = tf.cast(y_true != 0, loss.dtype)
        loss *= mask
        return tf.reduce_sum(loss) / tf.reduce_sum(mask)

    return Encoder, Translator, masked_loss


def _translator(sizes):
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    _, Translator, masked_loss = _tutorial_classes()
    model = Translator(
        sizes["units"], sizes["vocabulary"], data.START_ID, data.END_ID
    )
    return model, masked_loss


def seq2seq_train_step(sizes, timing):
    """The tutorial's Translator, compiled as in the tutorial (Adam,
    `masked_loss`), one `train_on_batch` per step."""
    model, masked_loss = _translator(sizes)
    (context, target_in), target_out = data.seq2seq_batch(sizes)
    model((context, target_in))
    model.compile(optimizer="adam", loss=masked_loss)
    stats = measure(
        lambda: model.train_on_batch((context, target_in), target_out),
        **timing,
    )
    t = target_in.shape[1]
    return dict(
        stats,
        flops=flops.seq2seq_train_step(
            sizes["batch"],
            sizes["source_length"],
            t,
            sizes["vocabulary"],
            sizes["units"],
        ),
    )


def translate(sizes, timing):
    """The tutorial's Python-loop `translate` (eager, greedy) on 64 right-
    padded sequences; the end token's logit is pushed to -1e9 so every call
    produces `max_length` tokens (same as for kmodels' `generate`)."""
    model, _ = _translator(sizes)
    sizes = dict(sizes, target_length=2)
    (context, target_in), _ = data.seq2seq_batch(sizes)
    model((context, target_in))
    bias = model.decoder.output_layer.bias
    bias.assign(bias.numpy() * 0 + _end_suppressed(sizes["vocabulary"]))
    out = {}

    def step():
        out["tokens"] = model.translate(
            context, max_length=sizes["max_length"]
        ).numpy()

    stats = measure(step, **timing)
    steps = out["tokens"].shape[1]
    return dict(
        stats,
        tokens=int(out["tokens"].shape[0] * steps),
        flops=flops.seq2seq_generate(
            sizes["batch"],
            sizes["source_length"],
            steps,
            sizes["vocabulary"],
            sizes["units"],
        ),
    )


def _end_suppressed(vocabulary):
    import numpy as np

    bias = np.zeros(vocabulary, "float32")
    bias[data.END_ID] = -1e9
    return bias


def encoder_train_step(sizes, timing):
    """The tutorial's Encoder (masked BiGRU) alone, trained to a zero target
    with mean squared error (the loss is masked through the Keras mask)."""
    import numpy as np
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    Encoder, _, _ = _tutorial_classes()
    rng = np.random.default_rng(0)
    ids = data.padded_tokens(
        rng, sizes["batch"], sizes["length"], sizes["vocabulary"]
    )
    inputs = tf_keras.Input((sizes["length"],), dtype="int32")
    model = tf_keras.Model(
        inputs, Encoder(sizes["vocabulary"], sizes["units"])(inputs)
    )
    model.compile(optimizer="adam", loss="mse")
    target = np.zeros(ids.shape + (sizes["units"],), "float32")
    stats = measure(lambda: model.train_on_batch(ids, target), **timing)
    return dict(
        stats,
        flops=flops.bigru_encoder_train_step(
            sizes["batch"], sizes["length"], sizes["units"]
        ),
    )
