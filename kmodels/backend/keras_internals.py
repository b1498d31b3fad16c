"""The Keras internals kmodels relies on, each behind one function.

Keras 3 offers no public way to do what these functions do; each says why
kmodels needs it. `backends_tests/keras_internals_test.py` pins their
behaviour on the Keras versions the project is tested with, so that a Keras
release that changes one fails there first, by name.
"""

from keras.src.backend.common import global_state
from keras.src.backend.common import stateless_scope
from keras.src.backend.common import symbolic_scope


def outermost_layer():
    """The layer (often a model) whose `__call__` the current call runs
    inside, or `None` outside any layer call.

    Keras keeps one call context per thread while a layer is called, with
    the layer that opened it (the outermost one): a kmodels layer traced in
    a compiled step of a user's functional model learns the model from it
    (`kmodels.contracts` installs its input checks there).
    """
    context = global_state.get_global_attribute("current_call_ctx")
    return getattr(context, "entry_layer", None)


def sublayers(layer):
    """Every layer inside `layer`, at any depth, each once (not `layer`).

    `keras.Model.layers` lists the direct children only; Keras' own
    recursive walk is private.
    """
    return layer._flatten_layers(include_self=False)


def inputs_struct(model):
    """The nested structure of a functional model's `keras.Input`s (as the
    model takes them), or `None` for other models.

    `model.inputs` is flat; kmodels finds where a layer's argument sits in
    the data a model is given (`kmodels.contracts`).
    """
    return getattr(model, "_inputs_struct", None)


def inbound_nodes(layer):
    """The calls of `layer` in the functional graphs built so far: each has
    `.arguments` (`.args`, `.kwargs`: the symbolic tensors it was called
    on). Keras keeps them on the layer, privately."""
    return getattr(layer, "_inbound_nodes", [])


def calls_in_graph(model, layer):
    """How many times `layer` is called in the functional graph of `model`
    (0 for other models). Keras lists a functional model's calls by depth,
    privately; a layer's own list of calls spans every graph it is in."""
    by_depth = getattr(model, "_nodes_by_depth", None)
    if not isinstance(by_depth, dict):
        return 0
    return sum(
        1
        for nodes in by_depth.values()
        for node in nodes
        if node.operation is layer
    )


def in_stateless_scope():
    """Whether the current call runs inside Keras' `StatelessScope` (JAX's
    compiled steps, `stateless_call`): variables are read from the scope
    and must not be assigned. Keras exports the scope, not the test."""
    return stateless_scope.in_stateless_scope()


def in_symbolic_scope():
    """Whether Keras is tracing a call symbolically (building a functional
    model or computing an output spec): there is no data to check. Keras
    exports no test for it."""
    return symbolic_scope.in_symbolic_scope()
