"""PyTorch side of `kmodels.backend.steps`.

Every step function takes the list of batches of one execution; variables
hold the state at all times. A step compiled with `torch.compile`
(`jit_compile=True`) is specialised on shapes: it is made again after a
variable changed shape.
"""

from kmodels.backend.common.steps import Step


class TorchStep(Step):
    def shapes_changed(self):
        if self.model.jit_compile:
            # Imported here: the interface module imports this package.
            from kmodels.backend import steps

            steps.rebuild(self.model, self.kind)


def wrap(wrapper):
    # The wrapper holds the model weakly: so does the step.
    kind = wrapper.kind

    def function(data):
        step = TorchStep(wrapper.model(), kind, list(data))
        return wrapper.run(step, lambda s: wrapper.original(data))

    return function
