"""The sampling step of `Translator.generate`'s loops, where it costs
less than keras-hub's own.

TensorFlow and JAX run keras-hub's sampler loops compiled with XLA
(`kmodels.seq2seq.decoding`). There `TopKSampler.get_next_token` takes
`keras.ops.top_k` of the `(batch, vocabulary)` probabilities at every
step, and XLA's CPU top-k of whole rows is slow: for `(64, 5000)`, k=10,
more than the softmax before it (JAX, timed alone: 0.63-0.84 ms, against
0.26-0.47 ms for `top_k` below).

- `faster_sampler` gives `generate` a copy of an exact `TopKSampler`
  whose `get_next_token` finds the same k candidates in two smaller
  top-ks (`top_k`): the largest probability of each chunk of a row, the k
  chunks that hold the largest ones, then the top k of those chunks'
  entries only (`(64, 5000)`, k=10: 250 chunk maxima, then 200 entries).
  The values and ids come out exactly as `keras.ops.top_k` returns them
  compiled (largest first, ties to the lower id), so the
  `keras.random.categorical` call that follows, keras-hub's own, draws
  exactly the ids keras-hub's loop draws from the same seed; the copy
  shares the sampler's `SeedGenerator`, so its stream advances alike.
  torch never runs it: its native loop samples
  (`kmodels.backend.decoding.sampling_loop`, `sampling_rule`), and its
  unsorted top-k would order the candidates otherwise.
- `scale` divides the step's logits by the temperature, and skips the
  passes at temperature 1, where they change no bit of the softmax.

Measured at the benchmark's sizes (64 sequences, 50 steps, vocabulary
5,000, units 256, k=10, temperature 1): `docs/decoding.md` ("Top-k on
TensorFlow and JAX").
"""

import copy
import math

import keras
from keras import ops

# The two-stage top-k is used when its two top-ks together see at most
# this fraction of a row (below it, the chunk maximum and the gather cost
# less than what they save).
_MAX_FRACTION = 0.5


def chunk_size(vocabulary, k):
    """The chunk length of `top_k` for rows of `vocabulary` entries, or
    None when one top-k of the whole row is cheaper.

    The two top-ks see `vocabulary / chunk` chunk maxima, then `k * chunk`
    entries: fewest at `chunk = sqrt(vocabulary / k)`. A divisor of
    `vocabulary` is preferred when it sees at most 1.5x as many (a row
    that does not split evenly is padded: one more copy of it).
    """
    ideal = math.sqrt(vocabulary / k)

    def seen(chunk):
        return -(-vocabulary // chunk) + k * chunk

    chunk = max(1, round(ideal))
    divisors = [
        d
        for d in range(1, math.isqrt(vocabulary) + 1)
        if vocabulary % d == 0
        for d in (d, vocabulary // d)
    ]
    divisor = min(divisors, key=seen)
    if seen(divisor) <= 1.5 * seen(chunk):
        chunk = divisor
    if k > -(-vocabulary // chunk) or seen(chunk) > _MAX_FRACTION * vocabulary:
        return None
    return chunk


def top_k(x, k, chunk=None):
    """`keras.ops.top_k(x, k)` of a 2-D float tensor without NaN, in two
    smaller top-ks: the same `(values, indices)`, largest first, ties in
    id order (top-k sampling here, beam search in
    `kmodels.seq2seq.beam_search`).

    Each chunk of `chunk_size` entries of a row is represented by its
    maximum. An entry among the k largest (ties to the lower id) lies in
    a chunk among the k best by that maximum (ties to the lower chunk,
    which holds the lower ids): otherwise k better chunks would hold k
    larger entries. Those chunks are gathered in id order, so that the
    second top-k breaks ties as the first would.

    Args:
        x: float `(rows, n)`, no NaN.
        k: int, `1 <= k <= n`.
        chunk: optional int, the chunk length (tests); by default
            `chunk_size(n, k)`.

    Example:

    >>> x = keras.ops.convert_to_tensor([[0.1, 0.4, 0.2, 0.5, 0.0, 0.3]])
    >>> values, ids = top_k(x, 2)
    >>> keras.ops.convert_to_numpy(ids).tolist()
    [[3, 1]]
    """
    n = ops.shape(x)[-1]
    if chunk is None:
        chunk = chunk_size(n, k)
    if chunk is None:
        return ops.top_k(x, k)
    chunks = -(-n // chunk)
    pad = chunks * chunk - n
    if pad:
        # Below every entry: never among the k largest of a row of n >= k.
        low = ops.min(x, axis=-1, keepdims=True) - 1.0
        x = ops.concatenate(
            [x, ops.broadcast_to(low, (ops.shape(x)[0], pad))], axis=-1
        )
    blocks = ops.reshape(x, (-1, chunks, chunk))
    _, best = ops.top_k(ops.max(blocks, axis=-1), k)
    best = ops.sort(best, axis=-1)
    candidates = ops.take_along_axis(blocks, best[:, :, None], axis=1)
    values, position = ops.top_k(ops.reshape(candidates, (-1, k * chunk)), k)
    block = ops.take_along_axis(best, position // chunk, axis=1)
    return values, block * chunk + position % chunk


def _get_next_token(self, probabilities):
    # keras-hub's `TopKSampler.get_next_token` with `top_k` for
    # `ops.top_k`: the same operations on the same values otherwise.
    top_k_pred, top_k_indices = top_k(probabilities, self.k)
    sample_indices = keras.random.categorical(
        ops.cast(ops.log(top_k_pred), "float32"),
        1,
        seed=self.seed_generator,
        dtype="int32",
    )
    output = ops.take_along_axis(top_k_indices, sample_indices, axis=-1)
    return ops.squeeze(output, axis=-1)


def faster_sampler(sampler, vocabulary):
    """`sampler`, or for an exact `keras_hub.samplers.TopKSampler` (not a
    subclass, which may draw otherwise) whose k makes `top_k` cheaper over
    `vocabulary` ids, a shallow copy of it that draws the same ids through
    `top_k` in a compiled loop. The copy shares the sampler's
    `SeedGenerator`.

    Example:

    >>> sampler = keras_hub.samplers.TopKSampler(k=10, seed=1)
    >>> faster_sampler(sampler, 5000) is sampler
    False
    >>> faster_sampler(sampler, 12) is sampler
    True
    """
    import keras_hub  # imported on use: not by `import kmodels`

    if type(sampler) is not keras_hub.samplers.TopKSampler:
        return sampler
    if chunk_size(vocabulary, int(sampler.k)) is None:
        return sampler
    faster = copy.copy(sampler)
    faster.get_next_token = _get_next_token.__get__(faster)
    return faster


def scale(logits, temperature, is_pad):
    """`logits` float32 `(rows, vocabulary)` (the padding id at `-inf`)
    divided by `temperature` (a float32 scalar tensor > 0), less their
    maximum: the most likely ids stay at 0 (a tiny temperature, even one
    float32 flushes to 0, gives -inf elsewhere, never inf or NaN), and the
    padding id (`is_pad`, bool `(vocabulary,)`) is masked again afterwards
    (-inf / inf is NaN).

    At temperature 1 the result would be the logits less their maximum,
    whose softmax is the softmax of the logits, bit for bit (the softmax
    subtracts the maximum itself): the logits are returned as they are,
    without the passes over them.

    Example:

    >>> logits = keras.ops.convert_to_tensor([[float("-inf"), 1.0, 3.0]])
    >>> is_pad = keras.ops.arange(3) == 0
    >>> keras.ops.convert_to_numpy(
    ...     scale(logits, keras.ops.convert_to_tensor(2.0), is_pad)
    ... ).tolist()
    [[-inf, -1.0, 0.0]]
    """

    def scaled():
        top = ops.max(logits, axis=-1, keepdims=True)
        out = ops.where(logits == top, 0.0, (logits - top) / temperature)
        return ops.where(is_pad, float("-inf"), out)

    return ops.cond(temperature == 1.0, lambda: logits, scaled)


def sampling_rule(sampler):
    """`(kind, k, p)` of a keras-hub `RandomSampler`, `TopKSampler` or
    `TopPSampler` (exactly these classes, at temperature 1: a subclass may
    draw otherwise), for `kmodels.backend.decoding.sampling_loop`; None
    for any other sampler."""
    import keras_hub  # imported on use: not by `import kmodels`

    samplers = keras_hub.samplers
    if sampler.temperature != 1.0 or len(sampler.variables) != 1:
        return None
    if type(sampler) is samplers.RandomSampler:
        return ("random", None, None)
    if type(sampler) is samplers.TopKSampler:
        return ("top_k", int(sampler.k), None)
    if type(sampler) is samplers.TopPSampler:
        k = None if sampler.k is None else int(sampler.k)
        return ("top_p", k, float(sampler.p))
    return None
