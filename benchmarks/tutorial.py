"""The original code: the TensorFlow "NMT with attention" tutorial's model
(seed 000), written for tf.keras and run under Keras 2 (`tf_keras`), as
users ran it before porting. The benchmark times it (`benchmarks.original`)
and the decoder tests load its weights into kmodels' layers
(`backends_tests/seq2seq/decoder_test.py`).

The classes are the tutorial's, with two changes that change neither their
weights nor their speed: vocabulary sizes and start/end ids are given as
integers instead of a `TextVectorization` processor (the benchmark and the
tests feed token ids; the processors hold no weights), and the
`ShapeChecker` debugging calls are left out (they cost time in eager mode,
so the baseline measured here is, if anything, faster than the tutorial).
"""

import collections
import functools

TutorialClasses = collections.namedtuple(
    "TutorialClasses",
    ("Encoder", "CrossAttention", "Decoder", "Translator", "masked_loss"),
)


@functools.cache
def tutorial_classes():
    """The tutorial's `Encoder(vocab_size, units)`, `CrossAttention(units)`,
    `Decoder(vocab_size, units, start_token, end_token)`,
    `Translator(units, vocab_size, start_token, end_token)` and
    `masked_loss`, defined under `tf_keras` (imported on the first call; a
    package of its own, so a Keras 3 process can use it too).

    Returns:
        A `TutorialClasses` named tuple of the five.

    References:
        TensorFlow tutorial "Neural machine translation with attention"
        (https://www.tensorflow.org/text/tutorials/nmt_with_attention).
    """
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

    return TutorialClasses(
        Encoder, CrossAttention, Decoder, Translator, masked_loss
    )
