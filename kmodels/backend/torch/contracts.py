"""PyTorch side of `kmodels.backend.contracts`."""


def wrap(model, kind, original, check, scope):
    # Called with the list of batches of one execution.
    def function(data):
        check(list(data), kind == "train")
        with scope():
            return original(data)

    return function
