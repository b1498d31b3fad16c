"""TensorFlow side of `kmodels.backend.contracts`."""

from kmodels.backend.common.batches import pull_batches


def wrap(model, kind, original, check, scope):
    if kind == "predict":
        # Called with the list of batches of one execution.
        def function(data):
            check(list(data), False)
            with scope():
                return original(data)

        return function

    def function(iterator):
        batches = pull_batches(iterator, model.steps_per_execution)
        check(batches, kind == "train")
        with scope():
            # A Python iterator: Keras runs its compiled one-batch step on
            # each batch.
            return original(iter(batches))

    return function
