"""A saved translator bundle as a TensorFlow SavedModel: strings in, strings
out, loadable with TensorFlow alone.

Only TensorFlow writes a SavedModel, so the export runs in a subprocess with
`KERAS_BACKEND=tensorflow`, whatever the caller's backend:
`export_bundle(bundle_path, export_path)` starts

    python -m kmodels.backend.common.saved_model BUNDLE EXPORT [--max-length N]

which loads the bundle's `translator.keras` (weights are portable across
backends) and `text.json`, and writes the SavedModel. Importing this module
imports no backend; only the subprocess's `_export` imports TensorFlow.

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
   (`tf.strings.regex_replace`), split on spaces, truncated to
   `max_length - 2` words, `[START]`/`[END]` added, looked up in the
   vocabulary (unknown words: `[UNK]`), padded with 0.
3. `Translator._generate_loop` (greedy) in the same graph.
4. Ids to tokens: a leading `[START]` dropped, cut at the first `[END]` or
   padding, joined with the bundle's separator.

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

from kmodels.backend.common.tensorflow_process import run_in_tensorflow

# The bundle's files (`kmodels.seq2seq.text_translator` writes them).
MODEL_FILE = "translator.keras"
TEXT_FILE = "text.json"
# `TextProcessor` configuration keys this exporter re-expresses, and the
# values it supports of keys that select another pipeline: any other key
# set to something else than None / False (a subword tokenizer, say) is
# refused.
SUPPORTED_KEYS = frozenset(
    ("max_length", "punctuation", "keep_digits", "split_digits", "vocabulary")
)
SUPPORTED_VALUES = {"tokenizer": "word"}
# The reserved tokens' ids (`kmodels.seq2seq.text_processor`).
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
ENDPOINT = "translate"


def unsupported_keys(processor_config):
    """`{key: value}` of a `TextProcessor` config this exporter cannot
    express (e.g. `{"tokenizer": "wordpiece"}`): keys it does not know, set
    to something else than None, False or the supported value."""
    return {
        k: v
        for k, v in sorted(processor_config.items())
        if k not in SUPPORTED_KEYS
        and v is not None
        and v is not False
        and v != SUPPORTED_VALUES.get(k)
    }


def export_bundle(bundle_path, export_path, max_length=None):
    """Writes the SavedModel of the bundle in folder `bundle_path` to
    `export_path`, from a TensorFlow subprocess.

    Args:
        bundle_path: str, a folder written by `TextTranslator.save`.
        export_path: str, the SavedModel folder to write.
        max_length: optional int, generated tokens at most (`[END]`
            included); the target processor's `max_length` by default.

    Raises:
        RuntimeError: the subprocess failed; the message ends with its
            error output.
    """
    arguments = [os.fspath(bundle_path), os.fspath(export_path)]
    if max_length is not None:
        arguments += ["--max-length", str(int(max_length))]
    run_in_tensorflow(
        "kmodels.backend.common.saved_model", arguments, "the translator"
    )


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


def _export(bundle_path, export_path, max_length=None):
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
                "The SavedModel export supports word-level TextProcessors "
                f"only; the {who} processor has {bad}."
            )
    separator = text["separator"]
    model = keras.saving.load_model(
        os.path.join(bundle_path, MODEL_FILE), compile=False
    )
    if max_length is None:
        max_length = target["max_length"]
    context_length = source["max_length"]

    table = char_table(source["punctuation"], source["keep_digits"])
    chars = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(table), tf.int64),
            tf.constant(list(table.values()), tf.string),
        ),
        default_value="",
    )
    words = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(source["vocabulary"], tf.string),
            tf.range(len(source["vocabulary"]), dtype=tf.int32),
        ),
        default_value=UNK_ID,
    )
    target_tokens = tf.constant(target["vocabulary"], tf.string)
    punct = "".join(f"\\x{{{ord(c):X}}}" for c in source["punctuation"])

    def tokenize(texts):
        codes = tf.strings.unicode_decode(texts, "UTF-8", errors="replace")
        pieces = tf.ragged.map_flat_values(
            chars.lookup, tf.cast(codes, tf.int64)
        )
        text = tf.strings.reduce_join(pieces, axis=-1)
        if source["split_digits"]:
            # Two passes: matches of one pattern never overlap, and the
            # spaces the first inserts change no letter-digit pair.
            text = tf.strings.regex_replace(text, "([0-9])([a-z])", r"\1 \2")
            text = tf.strings.regex_replace(text, "([a-z])([0-9])", r"\1 \2")
        if punct:
            text = tf.strings.regex_replace(text, f"([{punct}])", r" \1 ")
        split = tf.strings.split(text, sep=" ")
        split = tf.ragged.boolean_mask(split, tf.strings.length(split) > 0)
        empty = tf.equal(split.row_lengths(), 0)
        split = split[:, : context_length - 2]
        ids = tf.ragged.map_flat_values(words.lookup, split)
        batch = tf.shape(texts)[0]
        ids = tf.concat(
            [
                tf.fill([batch, 1], START_ID),
                ids,
                tf.fill([batch, 1], END_ID),
            ],
            axis=1,
        )
        return ids.to_tensor(PAD_ID, shape=[None, context_length]), empty

    def detokenize(ids):
        first = tf.equal(tf.range(tf.shape(ids)[1]), 0)[None, :]
        leading = tf.logical_and(first, tf.equal(ids, START_ID))
        stop = tf.logical_and(
            tf.logical_not(leading),
            tf.logical_or(tf.equal(ids, END_ID), tf.equal(ids, PAD_ID)),
        )
        before_stop = tf.equal(tf.cumsum(tf.cast(stop, tf.int32), axis=1), 0)
        keep = tf.logical_and(before_stop, tf.logical_not(leading))
        tokens = tf.ragged.boolean_mask(tf.gather(target_tokens, ids), keep)
        return tf.strings.reduce_join(tokens, axis=-1, separator=separator)

    def translate(texts):
        tokens, empty = tokenize(texts)
        batch = tf.shape(tokens)[0]
        ids, _ = model._generate_loop(
            tokens,
            tf.zeros([batch, max_length]),
            tf.constant(1.0),
            max_length,
            False,
        )
        return tf.where(empty, "", detokenize(tf.cast(ids, tf.int32)))

    # Variables and lookup tables are tracked by the module (so saved with
    # it); one trace, without autograph (the loop is an explicit
    # `while_loop`).
    module = tf.Module()
    module.model_variables = [v.value for v in model.variables]
    module.chars = chars
    module.words = words
    module.translate = tf.function(
        translate,
        input_signature=[tf.TensorSpec([None], tf.string, name="texts")],
        autograph=False,
    )
    tf.saved_model.save(
        module,
        export_path,
        signatures={ENDPOINT: module.translate.get_concrete_function()},
    )


def _main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m kmodels.backend.common.saved_model",
        description="Exports a saved TextTranslator bundle as a TensorFlow "
        "SavedModel with a `translate` signature (strings in and out).",
    )
    parser.add_argument("bundle", help="folder written by TextTranslator.save")
    parser.add_argument("export", help="SavedModel folder to write")
    parser.add_argument("--max-length", type=int, default=None)
    args = parser.parse_args(argv)
    _export(args.bundle, args.export, args.max_length)


if __name__ == "__main__":
    _main()
