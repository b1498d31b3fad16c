"""Text to token ids and back, for the seq2seq models.

The standardisation is the one of the TensorFlow "NMT with attention"
tutorial (`tf_lower_and_split_punct`), written in plain Python so that it
runs the same under every Keras backend; the word to id lookup is a
`keras.layers.TextVectorization` (which uses TensorFlow internally: fine in a
data pipeline, never inside a compiled model).
"""

import collections
import re
import unicodedata

import keras
import numpy as np

from kmodels.arguments import check_bool
from kmodels.arguments import check_int

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
RESERVED = (PAD, UNK, START, END)
# Between a digit and a letter: "3rd" -> "3 rd" with `split_digits=True`.
_DIGIT_LETTER = re.compile(r"(?<=[0-9])(?=[a-z])|(?<=[a-z])(?=[0-9])")


def _as_list(texts, who):
    """Returns `(list_of_str, was_scalar)`; bytes are decoded as UTF-8."""
    scalar = isinstance(texts, (str, bytes))
    if scalar:
        texts = [texts]
    elif isinstance(texts, np.ndarray):
        texts = texts.reshape(-1).tolist()
    else:
        try:
            texts = list(texts)
        except TypeError:
            raise ValueError(
                f"{who} expects a string or a sequence of strings; got "
                f"{type(texts).__name__}."
            ) from None
    out = []
    for i, text in enumerate(texts):
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise ValueError(
                f"{who} expects strings; item {i} is "
                f"{type(text).__name__} ({text!r})."
            )
        out.append(text)
    return out, scalar


class TextProcessor:
    """Maps sentences to padded token ids and token ids back to sentences.

    Standardisation follows the tutorial's `tf_lower_and_split_punct`:
    Unicode NFKD normalisation (accents become separate combining marks),
    lower case, every character outside `[ a-z]` and `punctuation` (and
    `0-9` when `keep_digits=True`) dropped, each punctuation mark made a
    token of its own, then `[START]` and `[END]` added. Two deliberate
    differences: any whitespace (tab, newline) counts as a space (the
    tutorial deletes it and so glues words together), and runs of spaces are
    collapsed (the tokens are the same).

    Ids: 0 is padding, 1 is `[UNK]` (any word not in the vocabulary), 2 is
    `[START]` and 3 is `[END]`, always; the vocabulary learned by `adapt`
    follows, most frequent word first (ties in alphabetical order, so the
    ids do not depend on the backend or on hashing).

    Length: every output row has exactly `max_length` ids, `[START]` and
    `[END]` included. A longer text is **truncated**: its first
    `max_length - 2` words are kept and `[END]` still closes the row.

    Empty texts: a text with no word left after standardisation (`""`,
    `"   "`, `"日本"`) raises a `ValueError` naming its index, since there is
    nothing to translate; `adapt` skips such texts.

    Arguments are checked at construction: a bad one raises a
    `ValueError` naming it (`max_length=2.5`, `keep_digits="False"`).

    Args:
        max_length: int >= 3. Ids per row, `[START]` and `[END]` included.
        punctuation: str without whitespace. Characters kept as tokens of
            their own. The tutorial's set `".?!,¿"` by default.
        keep_digits: bool. Keep `0-9` (the tutorial drops them).
        split_digits: bool. Make a run of digits and a run of letters
            separate tokens (`"3rd"` -> `3 rd`), so a number is the same
            token whatever its suffix.
        vocabulary: optional list of str, a vocabulary returned by
            `vocabulary` (reserved tokens first), e.g. to restore a saved
            processor.

    Example:

    >>> p = TextProcessor(max_length=8)
    >>> p.standardize("¿Todavía está en casa?")
    '[START] ¿ todavia esta en casa ? [END]'
    >>> p.adapt(["Hola.", "Está en casa."])
    >>> p(["está en casa"]).tolist()
    [[2, 7, 6, 5, 3, 0, 0, 0]]
    >>> p.decode([[2, 7, 6, 5, 3, 0, 0, 0]])
    ['esta en casa']

    References:
        - [TensorFlow tutorial: Neural machine translation with attention](
          https://www.tensorflow.org/text/tutorials/nmt_with_attention)
    """

    def __init__(
        self,
        max_length=64,
        punctuation=".?!,¿",
        keep_digits=False,
        split_digits=False,
        vocabulary=None,
    ):
        owner = "TextProcessor"
        # [START], [END] and at least one word.
        max_length = check_int(max_length, "max_length", owner, 3)
        if not isinstance(punctuation, str) or any(
            c.isspace() for c in punctuation
        ):
            raise ValueError(
                f"{owner}: `punctuation` must be a str without whitespace; "
                f"got {punctuation!r} ({type(punctuation).__name__})."
            )
        keep_digits = check_bool(keep_digits, "keep_digits", owner)
        split_digits = check_bool(split_digits, "split_digits", owner)
        if vocabulary is not None and (
            isinstance(vocabulary, (str, bytes))
            or not isinstance(vocabulary, (list, tuple, np.ndarray))
        ):
            raise ValueError(
                f"{owner}: `vocabulary` must be a list of str or None; got "
                f"{type(vocabulary).__name__}."
            )
        self.max_length = max_length
        self.punctuation = punctuation
        self.keep_digits = keep_digits
        self.split_digits = split_digits
        kept = "a-z" + ("0-9" if self.keep_digits else "")
        punct = re.escape(self.punctuation) if self.punctuation else ""
        self._drop = re.compile(f"[^ {kept}{punct}]")
        self._kept = f"[ {kept}{self.punctuation}]"
        self._split = re.compile(f"([{punct}])") if punct else None
        self._vectorizer = keras.layers.TextVectorization(
            standardize=None,
            split="whitespace",
            output_mode="int",
            output_sequence_length=self.max_length,
        )
        self._vocabulary = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    # Text -> words ---------------------------------------------------------

    def _words(self, text):
        text = unicodedata.normalize("NFKD", text).lower()
        text = re.sub(r"\s", " ", text)
        text = self._drop.sub("", text)
        if self.split_digits:
            text = _DIGIT_LETTER.sub(" ", text)
        if self._split is not None:
            text = self._split.sub(r" \1 ", text)
        return text.split()

    def standardize(self, texts):
        """The standardised form of `texts`, markers included.

        Args:
            texts: a str or a sequence of str.

        Returns:
            A str for a str, else a list of str, e.g. `"[START] ¿ todavia
            esta en casa ? [END]"`. Not truncated (see `tokenize`).
        """
        texts, scalar = _as_list(texts, "TextProcessor.standardize")
        out = [" ".join([START, *self._words(t), END]) for t in texts]
        return out[0] if scalar else out

    def tokenize(self, texts):
        """The words of each text as the model sees them: markers added,
        truncated to `max_length` tokens.

        Raises:
            ValueError: a text is empty after standardisation.
        """
        texts, scalar = _as_list(texts, "TextProcessor")
        keep = self.max_length - 2
        out = []
        for i, text in enumerate(texts):
            words = self._words(text)
            if not words:
                raise ValueError(
                    f"TextProcessor got an empty text at index {i} "
                    f"({text!r}): no word is left after standardisation "
                    f"(NFKD, lower case, keep {self._kept}), so "
                    "there is nothing to encode."
                )
            out.append([START, *words[:keep], END])
        return out[0] if scalar else out

    # Vocabulary ------------------------------------------------------------

    def adapt(self, texts, max_tokens=None):
        """Learns the vocabulary from `texts` (most frequent words first).

        Args:
            texts: sequence of str. Empty texts are skipped.
            max_tokens: optional int, the vocabulary size cap, the four
                reserved tokens included; rarer words map to `[UNK]`.
        """
        texts, _ = _as_list(texts, "TextProcessor.adapt")
        if max_tokens is not None and max_tokens < len(RESERVED) + 1:
            raise ValueError(
                f"`max_tokens` must be at least {len(RESERVED) + 1} (the "
                f"reserved tokens {list(RESERVED)} and one word); got "
                f"{max_tokens}."
            )
        counts = collections.Counter()
        for text in texts:
            counts.update(self._words(text))
        words = sorted(counts, key=lambda w: (-counts[w], w))
        if max_tokens is not None:
            words = words[: max_tokens - len(RESERVED)]
        if not words:
            raise ValueError(
                "TextProcessor.adapt found no word in the texts it was given "
                f"({len(texts)} texts)."
            )
        self.set_vocabulary([*RESERVED, *words])

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary: the reserved tokens, then the words."""
        vocabulary = [str(v) for v in vocabulary]
        if tuple(vocabulary[: len(RESERVED)]) != RESERVED:
            raise ValueError(
                f"A vocabulary starts with {list(RESERVED)}; got "
                f"{vocabulary[: len(RESERVED)]}."
            )
        words = vocabulary[len(RESERVED) :]
        if len(set(words)) != len(words) or set(words) & set(RESERVED):
            raise ValueError("The vocabulary has repeated tokens.")
        self._vectorizer.set_vocabulary(vocabulary)
        self._vocabulary = vocabulary
        self._array = np.array(vocabulary, dtype=object)

    @property
    def vocabulary(self):
        """The tokens, indexed by id (a list of str)."""
        self._check_adapted()
        return list(self._vocabulary)

    @property
    def vocabulary_size(self):
        self._check_adapted()
        return len(self._vocabulary)

    pad_id = 0
    unk_id = 1
    start_id = 2
    end_id = 3

    def _check_adapted(self):
        if self._vocabulary is None:
            raise ValueError(
                "This TextProcessor has no vocabulary yet: call "
                "`adapt(texts)` or pass `vocabulary=` first."
            )

    # Text <-> ids ----------------------------------------------------------

    def __call__(self, texts):
        """Token ids, `(batch, max_length)` int32 NumPy, 0-padded.

        Args:
            texts: a str (gives one row) or a sequence of str.

        Raises:
            ValueError: a text is empty after standardisation.
        """
        self._check_adapted()
        texts, _ = _as_list(texts, "TextProcessor")
        if not texts:
            return np.zeros((0, self.max_length), "int32")
        rows = [" ".join(words) for words in self.tokenize(texts)]
        ids = self._vectorizer(rows)
        return keras.ops.convert_to_numpy(ids).astype("int32")

    def tokens(self, ids):
        """The tokens of `ids` (any shape of ints), as a NumPy str array."""
        self._check_adapted()
        ids = self._check_ids(ids)
        return self._array[ids].astype(str)

    def decode(self, ids, separator=" "):
        """Sentences from ids: a leading `[START]` dropped, each row cut at
        its first `[END]` or padding (0; `Translator.generate` pads from
        `[END]` on), tokens joined by `separator`.

        Args:
            ids: ints of shape `(batch, length)` (or `(length,)`, which
                gives one str).
            separator: str put between tokens; `""` turns the date
                tokens `2021 - 03 - 03` back into `"2021-03-03"`.

        Returns:
            A list of str (a str for a 1-D input).

        Raises:
            ValueError: an id is outside `[0, vocabulary_size)`.
        """
        self._check_adapted()
        ids = self._check_ids(ids)
        scalar = ids.ndim == 1
        if scalar:
            ids = ids[None]
        if ids.ndim != 2:
            raise ValueError(
                "TextProcessor.decode expects ids of shape (batch, length) or "
                f"(length,); got shape {ids.shape}."
            )
        out = []
        for row in ids:
            words = []
            row = row.tolist()
            if row and row[0] == self.start_id:
                row = row[1:]
            for i in row:
                if i in (self.end_id, self.pad_id):
                    break
                words.append(self._vocabulary[i])
            out.append(separator.join(words))
        return out[0] if scalar else out

    def _check_ids(self, ids):
        ids = np.asarray(keras.ops.convert_to_numpy(ids))
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"Token ids must be integers; got dtype {ids.dtype}."
            )
        ids = ids.astype("int64")
        size = len(self._vocabulary)
        if ids.size and (ids.min() < 0 or ids.max() >= size):
            bad = ids[(ids < 0) | (ids >= size)]
            raise ValueError(
                f"Token ids must be in [0, {size}) (the vocabulary size); "
                f"got {bad.size} out of range, e.g. {int(bad[0])}."
            )
        return ids

    # Serialisation ---------------------------------------------------------

    def get_config(self):
        return {
            "max_length": self.max_length,
            "punctuation": self.punctuation,
            "keep_digits": self.keep_digits,
            "split_digits": self.split_digits,
            "vocabulary": None
            if self._vocabulary is None
            else list(self._vocabulary),
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        size = None if self._vocabulary is None else len(self._vocabulary)
        return (
            f"TextProcessor(max_length={self.max_length}, "
            f"punctuation={self.punctuation!r}, "
            f"keep_digits={self.keep_digits}, "
            f"split_digits={self.split_digits}, vocabulary_size={size})"
        )
