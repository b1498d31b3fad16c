"""A saved translator bundle as a TensorFlow SavedModel: strings in, strings
out, loadable with TensorFlow alone.

Only TensorFlow writes a SavedModel, so off the TensorFlow backend the
export runs in a subprocess with `KERAS_BACKEND=tensorflow` (on TensorFlow,
`_main` runs in the caller's process: `tensorflow_process`):
`export_bundle(bundle_path, export_path)` starts

    python -m kmodels.export.saved_model BUNDLE EXPORT [--max-length N]

which loads the bundle's `translator.keras` (weights are portable across
backends) and `text.json`, and writes the SavedModel. Importing this module
imports no TensorFlow; only the functions that build graphs (`tokenizer`,
`detokenizer`, the subprocess's `_export`) import TensorFlow.

The exported `translate` function re-expresses, with core TensorFlow ops
only (no `tensorflow_text`, so the loading process needs nothing but
TensorFlow), what `TextProcessor` does in Python, then runs the model and
decodes:

1. Characters: each code point becomes the characters it leaves after
   `TextProcessor`'s standardisation (NFKD, lower case, whitespace to a
   space, every character outside `[ a-z]`, the digits if kept and the
   punctuation dropped), from a table computed at export time with the
   exporting Python's `unicodedata` (most code points leave nothing).
   Standardising code point by code point equals standardising the string
   because NFKD decomposes each code point on its own (the canonical
   reordering only moves combining marks, which are dropped) and lower case
   is per character except the Greek final sigma (dropped too).
2. Digits and letters split (`split_digits`), punctuation made tokens
   (`tf.strings.regex_replace`), split on spaces.
3. Words (`tokenizer="word"`): the first `max_length - 2` words looked up
   in the vocabulary (unknown words: `[UNK]`). Subwords
   (`tokenizer="wordpiece"`): keras-hub's WordPiece, greedy longest match
   first, vectorised over every character of every word of the batch (see
   `_word_pieces`); the first `max_length - 2` pieces kept. Then
   `[START]`/`[END]` added, padded with 0.
4. `Translator.generate_step` (greedy) in the same graph or, for an
   export with search options (beam search, constraints),
   `Translator.search_step` (keras-hub's sampler loop, traced).
5. Ids to tokens: a leading `[START]` dropped, cut at the first `[END]` or
   padding, `##` pieces glued to the piece before them (subwords), joined
   with the bundle's separator.

Two signatures: `translate` (strings in, the best translation out) and
`nbest` (strings in, `{"translations": (batch, n) strings, "scores":
(batch, n) float32, "attention": (batch, n, max_length, s) float32,
"source_ids": (batch, s) int32}` out, best first; an empty text gives `""`
at score `-inf` with zero weights). `attention` holds each sequence's
cross-attention weights per output position over the source tokens
`source_ids`, what `translate(..., return_attention=True)` returns, for
alignments: the same traced loop computes them, so they cost no trace of
their own.

A text with no word left after standardisation (`""`, `"日本"`), for which
`TextProcessor` raises a `ValueError`, translates to `""` in the export (a
serving batch is not failed for one empty request). Input that is not valid
UTF-8 has its bad bytes replaced by U+FFFD (then dropped), where Python
would fail to decode it.
"""

import argparse
import json
import os
import re
import unicodedata

from kmodels.export.tensorflow_process import run_in_tensorflow
from kmodels.seq2seq.masking import PAD_ID
from kmodels.seq2seq.text_processor import END_ID
from kmodels.seq2seq.text_processor import START_ID
from kmodels.seq2seq.text_processor import SUFFIX
from kmodels.seq2seq.text_processor import UNK_ID
from kmodels.seq2seq.text_processor import WORD_PIECE_PAD

# The bundle's files (`TextTranslator.save` writes them, under these names).
MODEL_FILE = "translator.keras"
TEXT_FILE = "text.json"
# `TextProcessor` configuration keys this exporter re-expresses, and the
# values it supports of keys that select another pipeline: any other key
# set to something else than None / False is refused.
SUPPORTED_KEYS = frozenset(
    ("max_length", "punctuation", "keep_digits", "split_digits", "vocabulary")
)
SUPPORTED_VALUES = {
    "tokenizer": ("word", "wordpiece"),
    "standardize": ("tutorial",),
}
# WordPiece's longest word in UTF-8 bytes (longer: `[UNK]`): keras-hub's
# `MAX_BYTES_PER_WORD`, in a private module of keras-hub.
MAX_BYTES_PER_WORD = 100
ENDPOINT = "translate"
# The n-best strings, their scores, attention weights and the source ids:
# `{"translations": (batch, n), "scores": (batch, n), "attention": (batch,
# n, max_length, s), "source_ids": (batch, s)}`.
NBEST_ENDPOINT = "nbest"


def unsupported_keys(processor_config):
    """`{key: value}` of a `TextProcessor` config this exporter cannot
    express: keys it does not know, set to something else than None, False
    or a supported value."""
    return {
        k: v
        for k, v in sorted(processor_config.items())
        if k not in SUPPORTED_KEYS
        and v is not None
        and v is not False
        and v not in SUPPORTED_VALUES.get(k, ())
    }


def check_processors(context_config, target_config, owner):
    """Raises a `ValueError` before anything is written when a
    processor's settings (`TextProcessor.get_config()`) are beyond this
    exporter (`standardize="unicode"`: core TensorFlow has no Unicode
    normalisation op to serve NFC)."""
    for who, config in (("context", context_config), ("target", target_config)):
        bad = unsupported_keys(config)
        if bad:
            raise ValueError(
                f"{owner}: the SavedModel export cannot express the {who} "
                f"TextProcessor's settings {bad} (core TensorFlow has no "
                "Unicode NFC); serve it from Python "
                "(`TextTranslator.translate`, or the keras-hub task). "
                "Nothing is written."
            )


def export_bundle(bundle_path, export_path, max_length=None, search=None):
    """Writes the SavedModel of the bundle in folder `bundle_path` to
    `export_path`, from a TensorFlow subprocess.

    Args:
        bundle_path: str, a folder written by `TextTranslator.save`.
        export_path: str, the SavedModel folder to write.
        max_length: optional int, generated tokens at most (`[END]`
            included); the target processor's `max_length` by default.
        search: optional dict of `Translator.search_step`'s keyword
            arguments (JSON values: `sampler`, `num_beams`,
            `num_return_sequences` and the constraints), checked by the
            caller; `None` serves greedy decoding.

    Raises:
        RuntimeError: the subprocess failed; the message ends with its
            error output.
    """
    arguments = [os.fspath(bundle_path), os.fspath(export_path)]
    if max_length is not None:
        arguments += ["--max-length", str(int(max_length))]
    if search:
        arguments += ["--search", json.dumps(search)]
    run_in_tensorflow("kmodels.export.saved_model", arguments, "the translator")


def char_table(punctuation, keep_digits):
    """`{code point: the characters it leaves}` after `TextProcessor`'s
    standardisation, for every code point that leaves any (a pure-Python
    function of the processor's settings)."""
    kept = "a-z" + ("0-9" if keep_digits else "") + re.escape(punctuation)
    codes = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    # One pass over every code point, each followed by NUL: NUL has no
    # decomposition and combining class 0 (NFKD reorders no mark across
    # it), is not cased, not whitespace and not kept, so the pieces between
    # NULs are exactly the per-code-point results.
    text = "\0".join(map(chr, codes)) + "\0"
    text = unicodedata.normalize("NFKD", text).lower()
    text = re.sub(r"\s", " ", text)
    text = re.sub(f"[^\\0 {kept}]", "", text)
    pieces = text.split("\0")[:-1]
    return {c: t for c, t in zip(codes, pieces) if t}


def _word_pieces(tf, vocabulary):
    """`(pieces, table)`: `pieces(words)` maps a 1-D string tensor of
    standardised words to the ragged `(words, pieces)` int32 ids that
    keras-hub's `WordPieceTokenizer` (the one `TextProcessor` makes, on its
    Python path) gives them; `table` is the lookup table to track.

    The same greedy longest match first, in core TensorFlow ops: for every
    character position of every word, every candidate of 1 to `longest`
    characters (`##`-prefixed after the first position) is looked up at
    once, giving the longest known piece starting there; then a
    `tf.while_loop` walks all words together from piece to piece. A word
    with a position where no piece starts (an unknown character), or longer
    than 100 UTF-8 bytes, is `[UNK]` as a whole, as in keras-hub.
    """
    # keras-hub's vocabulary (`TextProcessor.set_vocabulary`): the padding
    # token renamed, so that no key is "". A token listed twice (only a
    # hand-written "[PAD]" can be) has its last id, as in keras-hub's dict.
    keys = {key: i for i, key in enumerate([WORD_PIECE_PAD, *vocabulary[1:]])}
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(keys), tf.string),
            tf.constant(list(keys.values()), tf.int32),
        ),
        default_value=-1,
    )
    # No key is longer (in characters, with or without its "##"), so no
    # longer candidate can match: trying lengths up to it is the same
    # greedy match as keras-hub's, which tries every length.
    longest = max(len(key) for key in keys)
    sizes = tf.range(1, longest + 1, dtype=tf.int64)

    def pieces(words):
        count = tf.shape(words)[0]
        too_long = tf.strings.length(words) > MAX_BYTES_PER_WORD
        chars = tf.strings.length(words, unit="UTF8_CHAR")
        chars = tf.cast(tf.where(too_long, 0, chars), tf.int64)
        # One row per word, one entry per character position.
        starts = tf.ragged.range(chars)
        word_of = starts.value_rowids()
        start = starts.flat_values
        left = tf.gather(chars, word_of) - start
        positions = tf.shape(start, out_type=tf.int64)[0]
        shape = tf.stack([positions, longest])
        candidates = tf.strings.substr(
            tf.broadcast_to(tf.gather(words, word_of)[:, None], shape),
            tf.broadcast_to(start[:, None], shape),
            tf.broadcast_to(sizes[None, :], shape),
            unit="UTF8_CHAR",
        )
        prefix = tf.where(start > 0, SUFFIX, "")
        ids = table.lookup(prefix[:, None] + candidates)
        hit = tf.logical_and(ids >= 0, sizes[None, :] <= left[:, None])
        # The longest hit at each position (0: none) and its id.
        best = tf.reduce_max(
            tf.where(hit, sizes[None, :], tf.zeros_like(sizes[None, :])),
            axis=1,
        )
        best_id = tf.gather(ids, tf.maximum(best - 1, 0), batch_dims=1)
        # The walk: all words together, each from its first character,
        # piece after piece. Word w at character `at` is flat entry
        # `first[w] + at`; entry `positions` (one past the end, 0) is read
        # for a word that is done.
        first = starts.row_starts()
        best_or_none = tf.concat([best, tf.zeros([1], tf.int64)], axis=0)

        def walking(at, ok, visited):
            return tf.reduce_any(tf.logical_and(ok, at < chars))

        def step(at, ok, visited):
            active = tf.logical_and(ok, at < chars)
            flat = tf.where(active, first + at, positions)
            size = tf.gather(best_or_none, flat)
            ok = tf.logical_and(ok, tf.logical_or(~active, size > 0))
            taken = tf.boolean_mask(flat, tf.logical_and(active, size > 0))
            visited = tf.tensor_scatter_nd_update(
                visited, taken[:, None], tf.ones_like(taken, tf.bool)
            )
            return at + size, ok, visited

        _, ok, visited = tf.while_loop(
            walking,
            step,
            (
                tf.zeros([count], tf.int64),
                tf.ones([count], tf.bool),
                tf.zeros([positions], tf.bool),
            ),
        )
        # keras-hub: a word it cannot spell, or too long, is one [UNK].
        unknown = tf.logical_or(too_long, tf.logical_not(ok))
        keep = tf.logical_and(visited, ~tf.gather(unknown, word_of))
        splits = starts.row_splits
        spelled = tf.ragged.boolean_mask(
            tf.RaggedTensor.from_row_splits(best_id, splits),
            tf.RaggedTensor.from_row_splits(keep, splits),
        )
        unk = tf.ragged.boolean_mask(
            tf.fill([count, 1], UNK_ID), unknown[:, None]
        )
        return tf.concat([unk, spelled], axis=1)

    return pieces, table


def tokenizer(config):
    """`(tokenize, tables)`: `tokenize(texts)` maps a 1-D string tensor to
    `(ids, empty)`, the int32 ids `(batch, max_length)` that
    `TextProcessor.from_config(config)(texts)` gives and a bool per text
    with no word (its ids are `[START] [END]`, where Python raises);
    `tables` are the lookup tables a module must track to save it. Core
    TensorFlow ops only; imports TensorFlow.

    Args:
        config: dict, a `TextProcessor.get_config()` with a vocabulary.
    """
    import tensorflow as tf

    bad = unsupported_keys(config)
    if bad:
        raise NotImplementedError(
            f"The SavedModel export cannot express a TextProcessor with {bad}."
        )
    length = config["max_length"]
    table = char_table(config["punctuation"], config["keep_digits"])
    chars = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(table), tf.int64),
            tf.constant(list(table.values()), tf.string),
        ),
        default_value="",
    )
    if config.get("tokenizer") == "wordpiece":
        to_ids, words = _word_pieces(tf, config["vocabulary"])
    else:
        words = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(config["vocabulary"], tf.string),
                tf.range(len(config["vocabulary"]), dtype=tf.int32),
            ),
            default_value=UNK_ID,
        )
        to_ids = words.lookup
    punct = "".join(f"\\x{{{ord(c):X}}}" for c in config["punctuation"])

    def tokenize(texts):
        codes = tf.strings.unicode_decode(texts, "UTF-8", errors="replace")
        pieces = tf.ragged.map_flat_values(
            chars.lookup, tf.cast(codes, tf.int64)
        )
        text = tf.strings.reduce_join(pieces, axis=-1)
        if config["split_digits"]:
            # Two passes: matches of one pattern never overlap, and the
            # spaces the first inserts change no letter-digit pair.
            text = tf.strings.regex_replace(text, "([0-9])([a-z])", r"\1 \2")
            text = tf.strings.regex_replace(text, "([a-z])([0-9])", r"\1 \2")
        if punct:
            text = tf.strings.regex_replace(text, f"([{punct}])", r" \1 ")
        split = tf.strings.split(text, sep=" ")
        split = tf.ragged.boolean_mask(split, tf.strings.length(split) > 0)
        empty = tf.equal(split.row_lengths(), 0)
        # A word gives one id or more: the words past the first
        # `length - 2` never reach the ids kept.
        split = split[:, : length - 2]
        ids = split.with_flat_values(to_ids(split.flat_values))
        if ids.ragged_rank == 2:
            ids = ids.merge_dims(1, 2)[:, : length - 2]
        batch = tf.shape(texts)[0]
        ids = tf.concat(
            [
                tf.fill([batch, 1], START_ID),
                ids,
                tf.fill([batch, 1], END_ID),
            ],
            axis=1,
        )
        return ids.to_tensor(PAD_ID, shape=[None, length]), empty

    return tokenize, [chars, words]


def detokenizer(config, separator):
    """`detokenize(ids)`: int32 ids `(batch, length)` to the 1-D string
    tensor `TextProcessor.from_config(config).decode(ids, separator)` gives.
    Core TensorFlow ops only; imports TensorFlow.

    Args:
        config: dict, a `TextProcessor.get_config()` with a vocabulary.
        separator: str between words.
    """
    import tensorflow as tf

    tokens = tf.constant(config["vocabulary"], tf.string)
    glue = config.get("tokenizer") == "wordpiece"

    def detokenize(ids):
        first = tf.equal(tf.range(tf.shape(ids)[1]), 0)[None, :]
        leading = tf.logical_and(first, tf.equal(ids, START_ID))
        stop = tf.logical_and(
            tf.logical_not(leading),
            tf.logical_or(tf.equal(ids, END_ID), tf.equal(ids, PAD_ID)),
        )
        before_stop = tf.equal(tf.cumsum(tf.cast(stop, tf.int32), axis=1), 0)
        keep = tf.logical_and(before_stop, tf.logical_not(leading))
        words = tf.ragged.boolean_mask(tf.gather(tokens, ids), keep)
        if not glue:
            return tf.strings.reduce_join(words, axis=-1, separator=separator)
        # `decode`: a "##" piece (more than the marker) after another piece
        # continues its word; any other piece starts a word, after the
        # separator unless it is the row's first.
        opening = tf.equal(tf.ragged.range(words.row_lengths()), 0)
        pieces = words.flat_values
        continues = tf.logical_and(
            tf.logical_not(opening.flat_values),
            tf.logical_and(
                tf.equal(tf.strings.substr(pieces, 0, len(SUFFIX)), SUFFIX),
                tf.strings.length(pieces) > len(SUFFIX),
            ),
        )
        pieces = tf.where(
            continues,
            tf.strings.regex_replace(pieces, f"^{re.escape(SUFFIX)}", ""),
            tf.where(opening.flat_values, pieces, separator + pieces),
        )
        return tf.strings.reduce_join(words.with_flat_values(pieces), axis=-1)

    return detokenize


def _export(bundle_path, export_path, max_length=None, search=None):
    import keras
    import tensorflow as tf

    import kmodels  # noqa: F401 (registers the seq2seq classes)

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "The SavedModel exporter runs with KERAS_BACKEND=tensorflow; "
            f"got {keras.backend.backend()!r}."
        )
    with open(os.path.join(bundle_path, TEXT_FILE)) as f:
        text = json.load(f)
    source, target = text["context_processor"], text["target_processor"]
    for who, config in (("context", source), ("target", target)):
        bad = unsupported_keys(config)
        if bad:
            raise NotImplementedError(
                "The SavedModel export cannot express the TextProcessor "
                f"settings {bad} of the {who} processor."
            )
    model = keras.saving.load_model(
        os.path.join(bundle_path, MODEL_FILE), compile=False
    )
    if max_length is None:
        max_length = target["max_length"]
    tokenize, tables = tokenizer(source)
    detokenize = detokenizer(target, text["separator"])

    search = dict(search or {})

    def nbest(texts):
        tokens, empty = tokenize(texts)
        ids, scores, weights = model.search_step(
            tokens, max_length, return_attention=True, **search
        )
        count = ids.shape[1]
        ids = tf.reshape(tf.cast(ids, tf.int32), [-1, max_length])
        strings = tf.reshape(detokenize(ids), [-1, count])
        weights = tf.cast(weights, tf.float32)
        return {
            "translations": tf.where(empty[:, None], "", strings),
            "scores": tf.where(empty[:, None], float("-inf"), scores),
            "attention": tf.where(
                empty[:, None, None, None], tf.zeros_like(weights), weights
            ),
            "source_ids": tf.cast(tokens, tf.int32),
        }

    def translate(texts):
        if search:
            return nbest(texts)["translations"][:, 0]
        tokens, empty = tokenize(texts)
        ids, _ = model.generate_step(tokens, max_length)
        return tf.where(empty, "", detokenize(tf.cast(ids, tf.int32)))

    # Variables and lookup tables are tracked by the module (so saved with
    # it); one trace each, without autograph (the loops are explicit
    # `while_loop`s). `tokenize` and `detokenize` are the two text ends on
    # their own (ids in and out of the model).
    module = tf.Module()
    module.model_variables = [v.value for v in model.variables]
    module.tables = tables
    texts = tf.TensorSpec([None], tf.string, name="texts")
    module.translate = tf.function(
        translate, input_signature=[texts], autograph=False
    )
    module.nbest = tf.function(nbest, input_signature=[texts], autograph=False)
    module.tokenize = tf.function(
        lambda texts: tokenize(texts)[0],
        input_signature=[texts],
        autograph=False,
    )
    module.detokenize = tf.function(
        detokenize,
        input_signature=[tf.TensorSpec([None, None], tf.int32, name="ids")],
        autograph=False,
    )
    tf.saved_model.save(
        module,
        export_path,
        signatures={
            ENDPOINT: module.translate.get_concrete_function(),
            NBEST_ENDPOINT: module.nbest.get_concrete_function(),
        },
    )


def _main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m kmodels.export.saved_model",
        description="Exports a saved TextTranslator bundle as a TensorFlow "
        "SavedModel with a `translate` signature (strings in and out).",
    )
    parser.add_argument("bundle", help="folder written by TextTranslator.save")
    parser.add_argument("export", help="SavedModel folder to write")
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument(
        "--search",
        type=json.loads,
        default=None,
        help="JSON keyword arguments of Translator.search_step",
    )
    args = parser.parse_args(argv)
    _export(args.bundle, args.export, args.max_length, args.search)


if __name__ == "__main__":
    _main()
