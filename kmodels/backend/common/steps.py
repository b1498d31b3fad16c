"""What the per-backend halves of `kmodels.backend.steps` share: the hook
interface, the step the hooks see, and the wrapper that runs them."""

import contextlib
import weakref


class StepHook:
    """Something to run before each compiled step of a model.

    Subclasses override `before_step`, and `scope` or `runner` where they
    need to. Hooks with a lower `order` run first. Two hooks with the same
    `key` (not `None`) are one: adding the second replaces the first.
    """

    order = 0
    key = None

    def before_step(self, step):
        """Runs before the step, on `step.batches` (concrete data) of a
        step of `step.kind` (`step.training` is true for `"train"`). May
        raise (the step does not run), write variables inside
        `with step.variables():`, and call `step.shapes_changed()` after
        giving a variable a new shape."""

    def scope(self):
        """A context manager entered around Keras' step."""
        return contextlib.nullcontext()

    def runner(self, step):
        """A function `runner(batches) -> logs` that runs the step instead
        of Keras' compiled one, or `None` (the default: Keras' step)."""
        return None


class Step:
    """One execution of a compiled step, as the hooks see it: `model`,
    `kind`, `training` and `batches`. The backend's subclass says how to
    make the model's variables hold the current state (`variables`) and
    what a change of shape costs (`shapes_changed`)."""

    def __init__(self, model, kind, batches):
        self.model = model
        self.kind = kind
        self.training = kind == "train"
        self.batches = batches

    def variables(self):
        """A scope in which the model's variables hold the state of the
        running epoch (JAX keeps it outside them), and after which the
        step reads them again."""
        return contextlib.nullcontext()

    def shapes_changed(self):
        """Says that a variable has a new shape: the backend traces the
        step again where its compiled form is specialised on shapes."""


class Wrapper:
    """The hooks of one model and kind, and the step function they wrap."""

    def __init__(self, model, kind):
        self.model = weakref.ref(model)
        self.kind = kind
        self.hooks = []
        self.original = None
        self.function = None

    def run(self, step, call_original):
        """Runs the hooks, then the step (`call_original(step)` unless a
        hook supplies a runner), inside the hooks' scopes."""
        hooks = list(self.hooks)
        for hook in hooks:
            hook.before_step(step)
        runner = None
        for hook in hooks:
            runner = runner or hook.runner(step)
        with contextlib.ExitStack() as stack:
            for hook in hooks:
                stack.enter_context(hook.scope())
            if runner is not None:
                return runner(step.batches)
            return call_original(step)
