"""TensorFlow side of `kmodels.backend.steps`.

The train and test functions take an iterator (Keras runs its compiled
one-batch step on each batch of a Python iterator); the predict function
takes the list of batches of one execution. Variables hold the state at
all times, and `tf.function` retraces for new shapes by itself.
"""

from kmodels.backend.common.batches import pull_batches
from kmodels.backend.common.steps import Step


def wrap(wrapper):
    # The wrapper holds the model weakly: so does the step.
    kind = wrapper.kind
    if kind == "predict":

        def function(data):
            step = Step(wrapper.model(), kind, list(data))
            return wrapper.run(step, lambda s: wrapper.original(data))

        return function

    def function(iterator):
        model = wrapper.model()
        batches = pull_batches(iterator, model.steps_per_execution)
        step = Step(model, kind, batches)
        return wrapper.run(step, lambda s: wrapper.original(iter(s.batches)))

    return function
