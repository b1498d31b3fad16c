"""English to Spanish on real UI strings: Django's own catalogues.

    python -m examples.django_translator [--quick]

`kmodels.datasets.ui_strings` reads the English strings of Django's
interface and their Spanish translations from the `.po` catalogues in
Django's wheel (`pip install "django==5.2.*"`), split by a hash of the
source (634 pairs to train on, 157 held out). Both `TextProcessor`s use
`standardize="unicode"` with `mask_placeholders=True`: case, accents,
punctuation and spacing are kept, and each placeholder or tag of a string
(`%(name)s`, `{0}`, `<a href="...">`) becomes a slot `[PHk]` that
`TextTranslator.translate` fills from its own source, so placeholders
never seen in training are copied. A `Translator` trains a fixed number
of epochs from a fixed seed, and translates the held-out strings greedily
with `min_length=2` (at least one token before `[END]`: no empty output).

It prints, against the raw Spanish references (corpus BLEU of
`keras_hub.metrics.Bleu`, SacreBLEU's `13a` tokenisation, as
`TextTranslator.evaluate`; exact match of the whole string), the model
and two baselines computed in the same run: copying the English source,
and the nearest neighbour (the Spanish of the training string that shares
the most words with the source, Jaccard). It also counts the held-out
sources' placeholders that come back in their translations and the empty
outputs.
"""

import re
import time

import keras
import numpy as np

from examples.settings import parse
from kmodels.datasets import ui_strings
from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import TextTranslator
from kmodels.seq2seq import Translator
from kmodels.seq2seq import masked_acc
from kmodels.seq2seq import masked_loss

FULL = dict(units=64, epochs=30, limit=None)
QUICK = dict(units=16, epochs=2, limit=120)
MAX_LENGTH = 40
BATCH = 32
LEARNING_RATE = 3e-3
_WORDS = re.compile(r"\w+|[^\w\s]")


def processor(texts):
    p = TextProcessor(
        max_length=MAX_LENGTH, standardize="unicode", mask_placeholders=True
    )
    p.adapt(texts)
    return p


def bleu(hypotheses, references):
    """Corpus BLEU-4 of `hypotheses` against one reference each, as
    `TextTranslator.evaluate` computes it."""
    import keras_hub

    metric = keras_hub.metrics.Bleu(max_order=4)
    with np.errstate(divide="ignore"):
        metric.update_state([[r] for r in references], hypotheses)
    return float(keras.ops.convert_to_numpy(metric.result()))


def nearest_neighbour(sources, train):
    """For each source, the translation of the training string whose
    lower-cased word set overlaps its own most (Jaccard; the first on
    ties)."""
    words = [set(_WORDS.findall(s.lower())) for s, _ in train]
    out = []
    for source in sources:
        query = set(_WORDS.findall(source.lower()))
        overlap = [len(query & w) / max(1, len(query | w)) for w in words]
        out.append(train[int(np.argmax(overlap))][1])
    return out


def placeholders_copied(sources, translations, pattern):
    """`(copied, total)`: the distinct matches of `pattern` in each source,
    and how many of them its translation holds."""
    copied = total = 0
    for source, translation in zip(sources, translations):
        found = set(pattern.findall(source))
        total += len(found)
        copied += sum(p in translation for p in found)
    return copied, total


def run(units, epochs, limit=None, seed=0):
    """Trains and scores the translator; returns the printed figures.

    Args:
        units: the `Translator`'s width.
        epochs: training epochs.
        limit: train on the first this many pairs only (`None`: all).
        seed: the weights' and the shuffling's seed.
    """
    train, test = ui_strings.load_data("es")
    if limit is not None:
        train = train[:limit]
    sources = [s for s, _ in train]
    source, target = processor(sources), processor([t for _, t in train])
    x = source(sources)
    # Each target's slots numbered by its source's placeholders.
    y = target([t for _, t in train], source.placeholders_in(sources))
    keras.utils.set_random_seed(seed)
    model = Translator(
        source.vocabulary_size,
        target.vocabulary_size,
        units,
        start_id=target.start_id,
        end_id=target.end_id,
    )
    model.compile(
        keras.optimizers.Adam(LEARNING_RATE),
        loss=masked_loss,
        metrics=[masked_acc],
    )
    history = model.fit(
        (x, y[:, :-1]), y[:, 1:], batch_size=BATCH, epochs=epochs, verbose=0
    )
    bundle = TextTranslator(model, source, target)
    held, references = [s for s, _ in test], [r for _, r in test]
    translations = bundle.translate(held, min_length=2)
    pattern = re.compile("|".join(f"(?:{p})" for p in source.placeholders))
    copied, total = placeholders_copied(held, translations, pattern)
    figures = {
        "train": len(train),
        "test": len(test),
        "loss": round(float(history.history["loss"][-1]), 6),
        "bleu": bleu(translations, references),
        "exact_match": float(np.mean(np.equal(translations, references))),
        "copy_bleu": bleu(held, references),
        "copy_exact_match": float(np.mean(np.equal(held, references))),
        "placeholders_copied": copied,
        "placeholders": total,
        "empty": sum(not t.strip() for t in translations),
        "examples": list(zip(held[:4], translations[:4])),
    }
    neighbours = nearest_neighbour(held, train)
    figures["nn_bleu"] = bleu(neighbours, references)
    figures["nn_exact_match"] = float(np.mean(np.equal(neighbours, references)))
    return figures


def main(argv=None):
    settings = parse(__doc__, argv, FULL, QUICK)
    start = time.perf_counter()
    f = run(**settings)
    print(
        f"   Django en->es: {f['train']} pairs trained on, {f['test']} held "
        f"out; {settings['epochs']} epochs, final loss {f['loss']:.4f}"
    )
    for name, key in (
        ("translator", ""),
        ("copy the source", "copy_"),
        ("nearest neighbour", "nn_"),
    ):
        print(
            f"   {name:18s} BLEU {f[key + 'bleu']:.3f}   exact match "
            f"{f[key + 'exact_match']:.3f}"
        )
    print(
        f"   placeholders of the held-out sources copied: "
        f"{f['placeholders_copied']} of {f['placeholders']}; empty "
        f"outputs: {f['empty']}"
    )
    for english, spanish in f["examples"]:
        print(f"   {english!r} -> {spanish!r}")
    print(f"   ({time.perf_counter() - start:.0f} s)", flush=True)
    return f


if __name__ == "__main__":
    main()
