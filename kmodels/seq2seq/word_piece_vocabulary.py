"""`TextProcessor`'s WordPiece vocabulary, learned by keras-hub's trainer
from word counts (`TextProcessor.adapt` with `tokenizer="wordpiece"`)."""

import os
import tempfile


def learn_pieces(counts, max_tokens, reserved, suffix):
    """The WordPiece vocabulary (reserved tokens excluded) of a Counter of
    standardised words, for `TextProcessor.adapt`; `reserved` and `suffix`
    are its reserved tokens and continuation mark."""
    import keras_hub

    alphabet = sorted(set("".join(counts)))
    # Every character alone and as a continuation: any word made of
    # seen characters can then be spelled (the trainer keeps them all
    # but its final cut to `vocabulary_size` may drop rare ones).
    needed = [*alphabet, *(suffix + c for c in alphabet)]
    least = len(reserved) + len(needed)
    if max_tokens is None:
        max_tokens = max(len(reserved) + len(counts), least)
    if max_tokens < least:
        raise ValueError(
            f"TextProcessor.adapt: `max_tokens` must be at least {least} "
            f"with subwords (the {len(reserved)} reserved tokens and the "
            f"{len(alphabet)} characters seen, alone and after "
            f"{suffix!r}); got {max_tokens}."
        )
    # The trainer reads files or a tf.data.Dataset; a file keeps
    # TensorFlow out of this module. Its split (whitespace, then
    # punctuation kept as tokens) gives back exactly these words, which
    # are already standardised and space separated.
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "words.txt")
        with open(path, "w", encoding="utf-8") as f:
            for word, count in counts.items():
                f.write(" ".join([word] * count) + "\n")
        learned = keras_hub.tokenizers.compute_word_piece_vocabulary(
            [path],
            # The trainer adds its reserved tokens, not the padding "".
            max_tokens - 1,
            lowercase=False,
            strip_accents=False,
            split=True,
            split_on_cjk=False,
            suffix_indicator=suffix,
            reserved_tokens=list(reserved[1:]),
        )
    learned = [p for p in learned if p not in reserved]
    needed_set = set(needed)
    room = max_tokens - least
    others = [p for p in learned if p not in needed_set][:room]
    keep = needed_set | set(others)
    pieces = [p for p in learned if p in keep]
    # Characters and continuations the trainer's cut dropped.
    pieces += [p for p in needed if p not in set(pieces)]
    return pieces
