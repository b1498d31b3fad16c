"""A translator's two processors and its evaluation pairs, checked:
`TextTranslator`'s, `translate`'s and the keras-hub task's checks."""

from kmodels.arguments import ArgumentTypeError


def check_pairing(translator, context_processor, target_processor):
    """Raises a `ValueError` unless the processors fit the translator
    (vocabulary sizes, start and end ids) and each other (both mask
    placeholders or neither)."""
    sizes = (
        (
            "context_processor",
            context_processor.vocabulary_size,
            "context_vocabulary_size",
            translator.context_vocabulary_size,
        ),
        (
            "target_processor",
            target_processor.vocabulary_size,
            "target_vocabulary_size",
            translator.target_vocabulary_size,
        ),
    )
    for who, size, attr, expected in sizes:
        if size != expected:
            raise ValueError(
                f"{who} has {size} tokens but the translator's {attr} is "
                f"{expected}: its ids would be out of range (or mean other "
                "words). Build the Translator with the processors' "
                "vocabulary_size."
            )
    if (
        context_processor.mask_placeholders
        != target_processor.mask_placeholders
    ):
        raise ValueError(
            "The context and target processors must both mask placeholders "
            "or neither (the target's slots are filled from the source): "
            f"mask_placeholders={context_processor.mask_placeholders} and "
            f"{target_processor.mask_placeholders}."
        )
    for attr in ("start_id", "end_id"):
        got, expected = (
            getattr(translator, attr),
            getattr(target_processor, attr),
        )
        if got != expected:
            raise ValueError(
                f"The translator's {attr} is {got} but the target "
                f"processor's is {expected}."
            )


def sources_and_references(pairs, owner):
    """`TextTranslator.evaluate`'s `pairs` as two lists of str: a tuple of
    two lists is `(sources, references)`, any other sequence holds
    `(source, reference)` pairs."""
    if isinstance(pairs, (str, bytes)):
        raise ArgumentTypeError(
            f"{owner} expects a sequence of (source, reference) pairs or a "
            f"tuple (sources, references) of two lists; got a "
            f"{type(pairs).__name__}."
        )
    if (
        isinstance(pairs, tuple)
        and len(pairs) == 2
        and all(isinstance(side, list) for side in pairs)
    ):
        sources, references = pairs
        for side, texts in (("sources", sources), ("references", references)):
            for i, text in enumerate(texts):
                if not isinstance(text, str):
                    raise ArgumentTypeError(
                        f"{owner}: (sources, references) must be two lists "
                        f"of str; {side}[{i}] is {text!r} "
                        f"({type(text).__name__})."
                    )
        if len(sources) != len(references):
            raise ValueError(
                f"{owner}: (sources, references) must have the same length; "
                f"got {len(sources)} sources and {len(references)} "
                "references."
            )
    else:
        pairs = list(pairs)
        for i, pair in enumerate(pairs):
            if (
                not isinstance(pair, (tuple, list))
                or len(pair) != 2
                or not all(isinstance(t, str) for t in pair)
            ):
                raise ArgumentTypeError(
                    f"{owner} expects (source, reference) pairs of str; "
                    f"item {i} is {pair!r}."
                )
        sources = [source for source, _ in pairs]
        references = [reference for _, reference in pairs]
    if not sources:
        raise ValueError(
            f"{owner} expects at least one (source, reference) pair; got none."
        )
    return list(sources), list(references)
