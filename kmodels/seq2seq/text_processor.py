"""Text to token ids and back, for the seq2seq models.

The standardisation is the one of the TensorFlow "NMT with attention"
tutorial (`tf_lower_and_split_punct`), written in plain Python so that it
runs the same under every Keras backend; the word to id lookup is a Python
dict (the tokens hold no whitespace, so it gives exactly the ids a
`keras.layers.TextVectorization` with `split="whitespace"` gives, without its
TensorFlow call: a few microseconds for one sentence instead of about 3 ms,
which matters to `TextTranslator.translate` of one sentence). With
`tokenizer="wordpiece"` the standardised words are split into subword pieces
by a keras-hub `WordPieceTokenizer` whose vocabulary
`compute_word_piece_vocabulary` learns.
"""

import collections
import re
import unicodedata

import keras
import numpy as np

from kmodels.arguments import check_bool
from kmodels.arguments import check_choice
from kmodels.arguments import check_int
from kmodels.arguments import check_texts
from kmodels.seq2seq import unicode_text
from kmodels.seq2seq.masking import PAD_ID
from kmodels.seq2seq.word_piece_vocabulary import learn_pieces

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
RESERVED = (PAD, UNK, START, END)
# The reserved tokens' ids, their places in RESERVED (PAD_ID is 0).
UNK_ID, START_ID, END_ID = 1, 2, 3
# The padding token's name in the WordPiece vocabulary (`set_vocabulary`).
WORD_PIECE_PAD = "[PAD]"
TOKENIZERS = ("word", "wordpiece")
STANDARDIZATIONS = ("tutorial", "unicode")
# The tutorial's punctuation, `TextProcessor`'s default.
TUTORIAL_PUNCTUATION = ".?!,¿"
# Marks a WordPiece that continues the previous one: "cats" -> cat ##s.
SUFFIX = "##"
# Between a digit and a letter: "3rd" -> "3 rd" with `split_digits=True`.
_DIGIT_LETTER = re.compile(r"(?<=[0-9])(?=[a-z])|(?<=[a-z])(?=[0-9])")


class TextProcessor:
    """Maps sentences to padded token ids and token ids back to sentences.

    Standardises as the tutorial's `tf_lower_and_split_punct` (NFKD, lower
    case, other characters dropped, each punctuation mark a token, `[START]`
    and `[END]` added), then maps words, or WordPiece pieces, to ids: 0 is
    padding, 1 `[UNK]`, 2 `[START]`, 3 `[END]`, then the vocabulary learned
    by `adapt`, most frequent first. Every row has exactly `max_length` ids
    (longer texts are truncated); an empty text raises a `ValueError`.

    Args:
        max_length: int >= 3, default `64`. Ids per row, markers included.
        punctuation: str without whitespace. Characters kept as tokens of
            their own. Defaults to the tutorial's `".?!,¿"`.
        keep_digits: bool, default `False`. Keep `0-9` (the tutorial drops
            them).
        split_digits: bool, default `False`. Make a run of digits and a run
            of letters separate tokens (`"3rd"` -> `3 rd`).
        vocabulary: optional list of str returned by `vocabulary` (reserved
            tokens first), e.g. to restore a saved processor.
        tokenizer: `"word"` (whole words, the default) or `"wordpiece"`
            (subword pieces learned by keras-hub's WordPiece trainer).
        standardize: `"tutorial"` (the default: the rules above) or
            `"unicode"`, for real text: NFC, case and accents kept, every
            punctuation mark or symbol a token, placeholders and markup
            whole tokens, the spacing kept (`[JOIN]` and `[SPACE]`
            tokens where it differs from the usual rule) and restored by
            `decode`; `kmodels/seq2seq/unicode_text.py` has the rules.
            Words only (`tokenizer="word"`), with the default
            `punctuation`, `keep_digits` and `split_digits`; not
            exported to a SavedModel yet.
        placeholders: with `standardize="unicode"`, the regular
            expressions of protected tokens; `None` (the default): printf
            conversions (`%(name)s`, `%s`), brace fields (`{name}`,
            `{0}`), HTML tags and entities; `()`: none.
        mask_placeholders: bool, default `False`. With
            `standardize="unicode"`, write a text's placeholders as slots
            `[PH1]`, `[PH2]`, ... (the first 8 distinct ones) that `decode`
            fills back from `placeholders=`: a translator copies them
            whatever they are (`TextTranslator` passes the source's).

    Example:
    >>> p = TextProcessor(max_length=8)
    >>> p.standardize("¿Todavía está en casa?")
    '[START] ¿ todavia esta en casa ? [END]'
    >>> p.adapt(["Hola.", "Está en casa."])
    >>> p(["está en casa"]).tolist()
    [[2, 7, 6, 5, 3, 0, 0, 0]]
    >>> p.decode([[2, 7, 6, 5, 3, 0, 0, 0]])
    ['esta en casa']

    >>> u = TextProcessor(standardize="unicode")  # real text
    >>> u.tokenize("Sí, <b>%s</b>!")[1:-1]
    ['Sí', ',', '<b>', '[JOIN]', '%s', '[JOIN]', '</b>', '!']

    >>> w = TextProcessor(max_length=12, tokenizer="wordpiece")  # subwords
    >>> w.adapt(["the cat sat", "a tall act"])
    >>> w.tokenize("tact")
    ['[START]', 't', '##a', '##c', '##t', '[END]']
    >>> w.decode(w(["tact"]))
    ['tact']

    References:
        - [TensorFlow tutorial: Neural machine translation with attention](
          https://www.tensorflow.org/text/tutorials/nmt_with_attention)

    See docs/seq2seq.md, sections "The text pipeline" and "Subword text".
    """

    def __init__(
        self,
        max_length=64,
        punctuation=TUTORIAL_PUNCTUATION,
        keep_digits=False,
        split_digits=False,
        vocabulary=None,
        tokenizer="word",
        standardize="tutorial",
        placeholders=None,
        mask_placeholders=False,
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
        if not isinstance(tokenizer, str) or tokenizer not in TOKENIZERS:
            raise ValueError(
                f"{owner}: `tokenizer` must be one of {list(TOKENIZERS)}; got "
                f"{tokenizer!r} ({type(tokenizer).__name__})."
            )
        standardize = check_choice(
            standardize, "standardize", owner, STANDARDIZATIONS
        )
        # The scanner of standardize="unicode" (None: the tutorial's).
        placeholders, self._scanner = unicode_text.checked_settings(
            standardize,
            placeholders,
            owner,
            tokenizer=(tokenizer, "word"),
            punctuation=(punctuation, TUTORIAL_PUNCTUATION),
            keep_digits=(keep_digits, False),
            split_digits=(split_digits, False),
        )
        self.mask_placeholders = check_bool(
            mask_placeholders, "mask_placeholders", owner
        )
        if self.mask_placeholders and self._scanner is None:
            raise ValueError(
                f"{owner}: mask_placeholders=True needs "
                "standardize='unicode' (the tutorial's rules drop "
                "placeholders)."
            )
        self.standardize_mode = standardize
        self.placeholders = placeholders
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
        self.tokenizer = tokenizer
        kept = "a-z" + ("0-9" if self.keep_digits else "")
        punct = re.escape(self.punctuation) if self.punctuation else ""
        self._drop = re.compile(f"[^ {kept}{punct}]")
        self._kept = f"[ {kept}{self.punctuation}]"
        self._split = re.compile(f"([{punct}])") if punct else None
        # Word level: a dict of the vocabulary; subwords: a keras-hub
        # WordPieceTokenizer, made by `set_vocabulary`.
        self._ids = None
        self._word_piece = None
        self._vocabulary = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    # Text -> words ---------------------------------------------------------

    def _words(self, text, known=None):
        if self._scanner is not None:
            words = unicode_text.tokens(
                text, self._scanner, self.mask_placeholders, known
            )
            return words[0] if self.mask_placeholders else words
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
        texts, scalar = check_texts(texts, "TextProcessor.standardize")
        out = [" ".join([START, *self._words(t), END]) for t in texts]
        return out[0] if scalar else out

    def placeholders_in(self, texts):
        """The distinct placeholders of each text, in order of appearance:
        what `[PH1]`, `[PH2]`, ... stand for with `mask_placeholders=True`
        (a list of str for a str, else a list of such lists; empty lists
        with the tutorial's rules)."""
        texts, scalar = check_texts(texts, "TextProcessor.placeholders_in")
        out = [
            unicode_text.tokens(t, self._scanner, True)[1]
            if self._scanner is not None
            else []
            for t in texts
        ]
        return out[0] if scalar else out

    def tokenize(self, texts, placeholders=None):
        """The tokens of each text as the model sees them (words, or
        WordPiece pieces with `tokenizer="wordpiece"`): markers added,
        truncated to `max_length` tokens.

        Args:
            texts: a str or a sequence of str.
            placeholders: with `mask_placeholders=True`, the
                `placeholders_in` lists that number each text's slots
                (the source's, for a translation); `None`: each text's own.

        Returns:
            A list of str for a str (e.g. `["[START]", "casa", "[END]"]`),
            else a list of such lists.

        Raises:
            ValueError: a text is empty after standardisation, or (subwords
                only) the processor has no vocabulary yet.
        """
        texts, scalar = check_texts(texts, "TextProcessor")
        if scalar and placeholders is not None:
            placeholders = [placeholders]
        words = self._text_words(texts, placeholders)
        if self.tokenizer == "wordpiece":
            self._check_adapted()
            tokens = [
                [self._vocabulary[i] for i in row]
                for row in self._piece_ids(words)
            ]
        else:
            tokens = words
        keep = self.max_length - 2
        out = [[START, *row[:keep], END] for row in tokens]
        return out[0] if scalar else out

    def _text_words(self, texts, placeholders=None):
        """The words of each text; raises on a text with none."""
        placeholders = unicode_text.check_lists(
            placeholders, len(texts), "TextProcessor"
        )
        out = []
        for i, text in enumerate(texts):
            words = self._words(text, placeholders and placeholders[i])
            if not words:
                rules = (
                    "NFC, whitespace dropped"
                    if self._scanner is not None
                    else f"NFKD, lower case, keep {self._kept}"
                )
                raise ValueError(
                    f"TextProcessor got an empty text at index {i} "
                    f"({text!r}): no word is left after standardisation "
                    f"({rules}), so there is nothing to encode."
                )
            out.append(words)
        return out

    def _piece_ids(self, words):
        """WordPiece ids (lists of int) of lists of words."""
        # keras-hub's eager call runs its Python WordPiece (the same greedy
        # longest match as tf-text's FastWordpieceTokenizer, which it runs
        # inside a tf.function or tf.data pipeline).
        rows = self._word_piece.tokenize(words)
        return [np.asarray(row, "int64").reshape(-1).tolist() for row in rows]

    # Vocabulary ------------------------------------------------------------

    def adapt(self, texts, max_tokens=None):
        """Learns the vocabulary from `texts`.

        Words: the most frequent words first. Subwords
        (`tokenizer="wordpiece"`): the pieces that
        `keras_hub.tokenizers.compute_word_piece_vocabulary` learns from
        the standardised words (pieces seen at least about 10 times; see
        its docs), with every character seen kept alone and as a `##`
        continuation; the single characters first, then the other pieces,
        most frequent first, in the trainer's order.

        Args:
            texts: sequence of str. Empty texts are skipped.
            max_tokens: optional int, the vocabulary size cap, the four
                reserved tokens included; rarer words map to `[UNK]`. With
                subwords, the trainer's target size, which must leave room
                for every character seen twice (alone and after `##`);
                `None` gives at most as many tokens as the word vocabulary
                of the same texts (or that room, if larger).

        Raises:
            ValueError: no word in `texts` (the message says when they
                had digits, dropped unless `keep_digits=True`), or
                `max_tokens` too small.
        """
        texts, _ = check_texts(texts, "TextProcessor.adapt")
        if max_tokens is not None:
            max_tokens = check_int(
                max_tokens, "max_tokens", "TextProcessor.adapt", None
            )
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
        if not words:
            digits = ""
            if not self.keep_digits and any(
                re.search("[0-9]", unicodedata.normalize("NFKD", t))
                for t in texts
            ):
                digits = (
                    "; the texts contain digits, which are dropped unless "
                    "`keep_digits=True`"
                )
            raise ValueError(
                "TextProcessor.adapt found no word in the texts it was given "
                f"({len(texts)} texts){digits}."
            )
        if self.tokenizer == "wordpiece":
            pieces = learn_pieces(counts, max_tokens, RESERVED, SUFFIX)
        else:
            if self._scanner is not None:
                # The spacing markers first: a text's spacing never reads
                # [UNK], also when the texts adapted on had no such pair.
                markers = list(unicode_text.MARKERS)
                if self.mask_placeholders:
                    markers += unicode_text.SLOTS
                words = markers + [w for w in words if w not in markers]
            pieces = words
            if max_tokens is not None:
                pieces = words[: max_tokens - len(RESERVED)]
        self.set_vocabulary([*RESERVED, *pieces])

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary: the reserved tokens, then the words (or
        WordPiece pieces)."""
        vocabulary = [str(v) for v in vocabulary]
        if tuple(vocabulary[: len(RESERVED)]) != RESERVED:
            raise ValueError(
                f"A vocabulary starts with {list(RESERVED)}; got "
                f"{vocabulary[: len(RESERVED)]}."
            )
        words = vocabulary[len(RESERVED) :]
        if len(set(words)) != len(words) or set(words) & set(RESERVED):
            raise ValueError("The vocabulary has repeated tokens.")
        if self.tokenizer == "wordpiece":
            import keras_hub

            # tf-text warns about an empty token; the padding id 0 is never
            # a piece anyway, so keras-hub gets a name that no standardised
            # word can equal (it is upper case).
            self._word_piece = keras_hub.tokenizers.WordPieceTokenizer(
                vocabulary=[WORD_PIECE_PAD, *vocabulary[1:]],
                lowercase=False,
                strip_accents=False,
                split=False,
                suffix_indicator=SUFFIX,
                oov_token=UNK,
                dtype="int32",
            )
        else:
            self._ids = {token: i for i, token in enumerate(vocabulary)}
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

    pad_id = PAD_ID
    unk_id = UNK_ID
    start_id = START_ID
    end_id = END_ID

    def _check_adapted(self):
        if self._vocabulary is None:
            raise ValueError(
                "This TextProcessor has no vocabulary yet: call "
                "`adapt(texts)` or pass `vocabulary=` first."
            )

    # Text <-> ids ----------------------------------------------------------

    def __call__(self, texts, placeholders=None):
        """Token ids, `(batch, max_length)` int32 NumPy, 0-padded.

        Args:
            texts: a str (gives one row) or a sequence of str.
            placeholders: the slots' numbering, as in `tokenize`.

        Raises:
            ValueError: a text is empty after standardisation.
        """
        self._check_adapted()
        texts, _ = check_texts(texts, "TextProcessor")
        if not texts:
            return np.zeros((0, self.max_length), "int32")
        if self.tokenizer == "wordpiece":
            keep = self.max_length - 2
            ids = np.zeros((len(texts), self.max_length), "int32")
            rows = self._piece_ids(self._text_words(texts, placeholders))
            for i, row in enumerate(rows):
                row = [self.start_id, *row[:keep], self.end_id]
                ids[i, : len(row)] = row
            return ids
        ids = np.zeros((len(texts), self.max_length), "int32")
        lookup, unk = self._ids.get, self.unk_id
        for i, words in enumerate(self.tokenize(texts, placeholders)):
            ids[i, : len(words)] = [lookup(word, unk) for word in words]
        return ids

    def tokens(self, ids):
        """The tokens of `ids` (any shape of ints), as a NumPy str array."""
        self._check_adapted()
        ids = self._check_ids(ids)
        return self._array[ids].astype(str)

    def decode(self, ids, separator=" ", placeholders=None):
        """Sentences from ids: a leading `[START]` dropped, each row cut at
        its first `[END]` or padding (0; `Translator.generate` pads from
        `[END]` on), tokens joined by `separator`.

        With subwords, a `##` piece is first glued to the piece before it
        (`cat ##s` -> `cats`, as keras-hub's `detokenize`; a row that starts
        with one keeps it as is), then the words are joined by `separator`.

        With `standardize="unicode"` the words are joined with the text's
        own spacing (`[JOIN]` and `[SPACE]` applied), and `separator` must
        be `" "`; `placeholders` (a `placeholders_in` list per row, or one
        list for a 1-D input) fills the slots `[PH1]`, `[PH2]`, ...

        Args:
            ids: ints of shape `(batch, length)` (or `(length,)`, which
                gives one str).
            separator: str put between words; `""` turns the date
                tokens `2021 - 03 - 03` back into `"2021-03-03"`.

        Returns:
            A list of str (a str for a 1-D input).

        Raises:
            ValueError: an id is outside `[0, vocabulary_size)`.
        """
        self._check_adapted()
        if self._scanner is not None and separator != " ":
            raise ValueError(
                "TextProcessor(standardize='unicode').decode restores the "
                "text's own spacing: `separator` must be ' '; got "
                f"{separator!r}."
            )
        ids = self._check_ids(ids)
        scalar = ids.ndim == 1
        if scalar:
            ids = ids[None]
            placeholders = None if placeholders is None else [placeholders]
        if ids.ndim == 2:
            placeholders = unicode_text.check_lists(
                placeholders, len(ids), "TextProcessor.decode"
            )
        if ids.ndim != 2:
            raise ValueError(
                "TextProcessor.decode expects ids of shape (batch, length) or "
                f"(length,); got shape {ids.shape}."
            )
        out = []
        for n, row in enumerate(ids):
            words = []
            row = row.tolist()
            if row and row[0] == self.start_id:
                row = row[1:]
            glue = self.tokenizer == "wordpiece"
            for i in row:
                if i in (self.end_id, self.pad_id):
                    break
                token = self._vocabulary[i]
                if (
                    glue
                    and words
                    and token.startswith(SUFFIX)
                    and len(token) > len(SUFFIX)
                ):
                    words[-1] += token[len(SUFFIX) :]
                else:
                    words.append(token)
            if self._scanner is not None:
                fill = None if placeholders is None else placeholders[n]
                out.append(unicode_text.detokenize(words, fill))
            else:
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
            "tokenizer": self.tokenizer,
            "standardize": self.standardize_mode,
            "placeholders": self.placeholders,
            "mask_placeholders": self.mask_placeholders,
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
            f"split_digits={self.split_digits}, "
            f"tokenizer={self.tokenizer!r}, "
            f"standardize={self.standardize_mode!r}, vocabulary_size={size})"
        )
