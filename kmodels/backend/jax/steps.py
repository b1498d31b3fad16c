"""JAX side of `kmodels.backend.steps`.

While an epoch runs, Keras' JAX trainer keeps the model's state outside its
variables and passes it to each step, `step(state, iterator)`: a hook that
writes variables gets them back first (`Step.variables`), and a refused step
puts the state back, so that the model stays usable.
"""

import contextlib

import jax

from kmodels.backend.common.batches import pull_batches
from kmodels.backend.common.steps import Step
from kmodels.backend.jax import keras_internals


class JaxStep(Step):
    def __init__(self, model, kind, batches, state):
        super().__init__(model, kind, batches)
        self.state = state

    @contextlib.contextmanager
    def variables(self):
        keras_internals.set_jax_state(self.model, self.kind, self.state)
        yield
        # Writing a table may donate the synced arrays (a scatter): read
        # the variables again, and keep the trainer from syncing the old
        # ones.
        self.state = keras_internals.take_jax_state(self.model, self.kind)

    def shapes_changed(self):
        # The jitted step retraces for the new shapes by itself.
        pass

    def put_back(self):
        """The trainer took the state out of the variables (purged them):
        puts it back, unchanged. A step that failed while running has
        given its (donated) buffers away: nothing is left to put back."""
        leaves = jax.tree_util.tree_leaves(self.state)
        if any(isinstance(x, jax.Array) and x.is_deleted() for x in leaves):
            return
        keras_internals.set_jax_state(self.model, self.kind, self.state)


def wrap(wrapper):
    # The wrapper holds the model weakly: so does the step.
    kind = wrapper.kind

    def function(state, iterator):
        model = wrapper.model()
        batches = pull_batches(iterator, model.steps_per_execution)
        step = JaxStep(model, kind, batches, state)
        try:
            # An error raised while the step is traced (a layer's refusal)
            # leaves the state untouched as well.
            return wrapper.run(
                step, lambda s: wrapper.original(s.state, iter(s.batches))
            )
        except Exception:
            step.put_back()
            raise

    return function
