"""The dates demo (`examples/seq2seq_dates.py`) trained and scored under a
dtype policy: the held-out exact match of float32 and `mixed_bfloat16`.

A whole training (the demo's fixed work: 3 autoencoder and 20 translator
epochs, the same on every backend; times in CPU seconds of the child; quick
sizes: 1 + 2 epochs), so the cases are opt-in (`--cases 'dates*'`). The
record's times are the training time (one "step"), and `exact_match` the
accuracy on the 500 held-out dates."""

from benchmarks.timing import summarize


def _dates(sizes, dtype_policy):
    import keras

    from examples import seq2seq_dates

    if keras.backend.backend() == "torch":
        # The demo's default (`--threads 1`): torch's intra-op threads spin
        # on a shared 2-core CPU.
        import torch

        torch.set_num_threads(1)
    settings = dict(
        seq2seq_dates.QUICK
        if sizes["settings"] == "quick"
        else seq2seq_dates.FULL
    )
    result = seq2seq_dates.run(
        **settings, quiet=True, clock="cpu", dtype_policy=dtype_policy
    )
    return dict(
        summarize([result["total_train_seconds"]]),
        exact_match=result["accuracy"],
        bleu=result["bleu"],
        dtype_policy=result["dtype_policy"],
        pretrain_epochs=result["pretrain_epochs"],
        train_epochs=result["train_epochs"],
        train_masked_acc=result["train_masked_acc"],
        total_train_seconds=result["total_train_seconds"],
        translate_seconds=result["translate_seconds"],
        clock=result["clock"],
    )


def dates_float32(sizes, timing):
    """The demo as shipped (float32)."""
    return _dates(sizes, None)


def dates_bf16(sizes, timing):
    """The demo under the `mixed_bfloat16` policy."""
    return _dates(sizes, "mixed_bfloat16")
