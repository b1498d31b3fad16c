"""Recurrences: how `kmodels.seq2seq` runs its GRUs on each backend.

On the CPU, `kmodels.seq2seq.gru` runs them in one recurrence of its own
(`prefers_one_recurrence`), in `keras.ops` with the loop (`scan`) and the
hand-written gradient (`custom_gradient`) of each backend, or in torch's
own operations (`gru_recurrence`). On an accelerator Keras' `GRU` layers
run; torch's has a fused (cuDNN) kernel only without a mask, and on a
right-padded batch (every row real tokens then padding) `Encoder` and
`Decoder` can run their GRUs without the mask and get the same results at
the real positions (`is_eager_right_padded`).
"""

from kmodels.backend import native
from kmodels.backend import native_function


def is_eager_right_padded(mask):
    """True on torch (eager) when every row of the boolean `(batch, s)`
    `mask` is real tokens then padding.

    Only torch benefits (its GRU has a fused kernel without a mask only);
    TensorFlow and JAX trace `call`, where the values are unknown, and
    return False, as torch does for a traced mask (`torch.compile`).
    """
    right_padded = native_function("rnn", "is_eager_right_padded")
    return False if right_padded is None else right_padded(mask)


def prefers_one_recurrence():
    """True where `kmodels.seq2seq.gru.run_grus` (input projections before
    the loop, both directions of a bidirectional GRU in one loop, a
    hand-written backward pass) trains faster than Keras' `GRU` layers:
    every backend on the CPU. Measured with the Seq2Seq train step of
    `benchmarks` (2-core CPU): TensorFlow with XLA 1.30x (259 against 338
    ms, one process per variant, alternated), torch 1.07x alone and 1.18x
    with `prefers_one_model_recurrence`; JAX 1.02-1.05x (variants
    alternated step by step in one process, 20-24 steps each, wall and
    CPU time alike: 1.02-1.03x on a busy machine, 1.045x on a quieter
    one, where the step was 1.17x the original's against 1.12x with
    Keras' layers). On JAX Keras' scan loses little: XLA
    fuses the gates and runs each step's product through its YNN kernels
    in both; the gain is mostly the input projections taken out of the
    loop (one product for every step). Most of JAX's backward pass is not
    the recurrence but the 5000-way output projection's two gradient
    products and the softmax gradient (an op-level trace: ~40% of the
    step against ~30% for the three GRUs forward and backward). On an
    accelerator Keras' layers stay (cuDNN's kernels: TensorFlow with any
    mask, torch on right-padded batches; JAX unmeasured there)."""
    return native.rnn.prefers_one_recurrence()


def prefers_one_model_recurrence():
    """True where `Translator` runs the encoder's two GRUs and the
    decoder's GRU in one loop (the decoder's GRU does not read the
    encoder): torch on the CPU, whose eager loop then takes 20 Python
    steps instead of 40 (the Seq2Seq train step 1.12x faster than with a
    loop per layer). Not TensorFlow with XLA, where one loop per layer was
    1.13x faster (XLA overlaps the decoder's loop with other work), nor
    JAX, where it measured no faster than a loop per layer (1.03-1.04x
    of Keras' GRU layers either way, on a busy machine)."""
    prefers = native_function("rnn", "prefers_one_model_recurrence")
    return False if prefers is None else prefers()


def gru_recurrence():
    """The stacked GRU recurrence of `kmodels.seq2seq.gru` in the backend's
    own operations, with its hand-written gradient, or None where the
    `keras.ops` version there is used (TensorFlow and JAX compile it; on
    torch, which runs it eagerly, Keras' per-operation overhead would cost
    more than the arithmetic).

    The function takes `(x_proj, h0, kernel, recurrent_bias, mask)`:
    time-major projected inputs `(t, g, batch, 3u)`, initial states
    `(g, batch, u)`, recurrent kernels `(g, u, 3u)`, recurrent biases
    `(g, 1, 3u)` and a boolean mask `(t, g, batch, 1)`, and returns
    `(states, final)`: the states after every step `(t, g, batch, u)`
    (carried over where the mask is False) and the final ones
    `(g, batch, u)`.
    """
    recurrence = native_function("rnn", "gru_recurrence")
    return None if recurrence is None else recurrence()


def gru_projected_recurrence(x):
    """`gru_recurrence` with the input projections inside it, or None
    (TensorFlow and JAX, and torch below float32, where
    `kmodels.seq2seq.gru` projects the inputs in `keras.ops` and stacks
    them). torch writes each group's projection with its bias into one
    group-major buffer: no fresh projected, flipped and stacked copies
    (forward), nor their unstacked, flipped and joined gradients
    (backward).

    `x` is a float input of the recurrence (its dtype decides). The
    function takes `(inputs, sources, kernels, biases, reverse, h0,
    kernel, recurrent_bias, mask)`: the distinct batch-major inputs
    `(batch, t_i, features_i)`; per group, the index of its input, its
    input kernel `(features, 3u)`, input bias `(3u,)` and whether it reads
    its input last step first; then `h0`, `kernel`, `recurrent_bias` and
    `mask` as `gru_recurrence` takes them (the mask in each group's
    processing order, False after a group's own steps). It returns
    `gru_recurrence`'s `(states, final)`.
    """
    recurrence = native_function("rnn", "gru_projected_recurrence")
    return None if recurrence is None else recurrence(x)


def scan(f, init, xs, reverse=False):
    """`keras.ops.scan(f, init, xs, reverse=reverse)` over the leading axis
    of the tensors in the tuple `xs`, with `f` returning `(carry, ys)`,
    `ys` a tuple of tensors; returns `(last_carry, stacked_ys)`. With
    `reverse`, the steps run last to first and `ys` is stacked in the
    order of `xs` (as `jax.lax.scan`), so no sequence is flipped.

    TensorFlow: a `tf.while_loop` over `TensorArray`s (Keras 3.15's
    `ops.scan` stacks a tuple of per-step outputs wrongly there). torch: a
    Python loop over `unbind`ed steps (`ops.scan` indexes the stacked
    inputs at each step, and the gradient of each index is a zero-filled
    tensor of the whole sequence: quadratic in its length). JAX:
    `ops.scan`, not unrolled (see `kmodels.backend.jax.rnn`).
    """
    return native.rnn.scan(f, init, xs, reverse=reverse)


def custom_gradient(forward, backward, output_shapes):
    """A function of tensors with a hand-written gradient.

    Returns `f(*inputs)`, which returns `forward(*inputs)[0]` (a tuple of
    tensors) and is differentiated with `backward` on every backend
    (`jax.custom_vjp`, `tf.custom_gradient`, a `torch.autograd.Function`;
    `keras.ops.custom_gradient` takes a single output gradient on torch).
    On TensorFlow each pass is compiled with XLA, also inside a step
    compiled without it (TensorFlow's graph executor pays per operation in
    a loop: a masked BiGRU encoder train step took 146 ms so against 115 ms
    for Keras' GRU layers, 112 ms with it).

    Args:
        forward: `forward(*inputs) -> (outputs, residuals)`, two tuples of
            tensors; `residuals` is what `backward` needs. It is not
            differentiated itself.
        backward: `backward(residuals, output_gradients) -> gradients`:
            one gradient per output in (zeros for an output that does not
            reach the loss), one per input out, `None` for a boolean or
            integer input.
        output_shapes: `output_shapes(*inputs) -> shapes`, the static
            shape of each output (tuples, None where unknown) from the
            inputs' static shapes: a TensorFlow function boundary loses
            what shape inference would know otherwise (e.g. a batch size
            that only the initial state has, in a generation loop).
    """
    return native.rnn.custom_gradient(forward, backward, output_shapes)
