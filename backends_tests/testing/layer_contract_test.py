"""`run_layer_test` passes a correct layer and fails each broken one."""

import keras
import numpy as np
import pytest
from keras import ops

from kmodels.testing.layer_contract import run_layer_test

X = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")


@keras.saving.register_keras_serializable(package="kmodels_contract_test")
class Affine(keras.layers.Layer):
    """A correct layer: `x @ kernel + bias`."""

    def __init__(self, units, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.scale = scale

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], self.units), name="kernel"
        )
        self.bias = self.add_weight(
            shape=(self.units,), initializer="zeros", name="bias"
        )

    def call(self, inputs):
        return self.scale * ops.matmul(inputs, self.kernel) + self.bias

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "scale": self.scale})
        return config


@keras.saving.register_keras_serializable(package="kmodels_contract_test")
class MissingArgument(Affine):
    """`scale` is not in the config: a reloaded layer would use 1.0."""

    def get_config(self):
        config = super().get_config()
        del config["scale"]
        return config


@keras.saving.register_keras_serializable(package="kmodels_contract_test")
class LyingShape(Affine):
    """Declares one unit more than `call` returns."""

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units + 1,)


@keras.saving.register_keras_serializable(package="kmodels_contract_test")
class DeadWeight(Affine):
    """A trainable weight that `call` never reads: it gets no update."""

    def build(self, input_shape):
        super().build(input_shape)
        self.unused = self.add_weight(shape=(self.units,), name="unused")


@keras.saving.register_keras_serializable(package="kmodels_contract_test")
class ForgetfulLoad(Affine):
    """Loads the kernel only: the trained bias is lost on load."""

    def load_own_variables(self, store):
        self.kernel.assign(store["0"])


@keras.saving.register_keras_serializable(package="kmodels_contract_test")
class Float32Output(Affine):
    """Returns float32 whatever the policy: a mixed model upcasts here."""

    def call(self, inputs):
        return ops.cast(super().call(inputs), "float32")


@keras.saving.register_keras_serializable(package="kmodels_contract_test")
class Float16Refused(Affine):
    """Refuses float16, e.g. for an op without a float16 kernel."""

    def build(self, input_shape):
        if self.compute_dtype == "float16":
            raise ValueError("Float16Refused needs float32 or bfloat16")
        super().build(input_shape)


def _run(cls, **kwargs):
    args = dict(
        input_data=X,
        expected_output_shape=(2, 4),
        expected_output_dtype="float32",
        expected_num_trainable_weights=2,
        expected_num_non_trainable_weights=0,
    )
    args.update(kwargs)
    return run_layer_test(cls, {"units": 4, "scale": 2.0}, **args)


def test_passes_a_correct_layer():
    layer = _run(Affine, expected_mask=False)
    # The returned layer is the one checked: built, saved and trained.
    assert isinstance(layer, Affine) and layer.built
    kernel, bias = (ops.convert_to_numpy(w) for w in layer.weights)
    # A 3-term float32 dot product: 1e-6.
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(X)),
        2.0 * X @ kernel + bias,
        rtol=1e-6,
        atol=1e-6,
    )


def test_fails_a_config_without_an_argument():
    with pytest.raises(AssertionError, match=r"lacks .*\['scale'\]"):
        _run(MissingArgument)


def test_fails_a_lying_compute_output_shape():
    with pytest.raises(AssertionError, match="symbolic call"):
        _run(LyingShape)


def test_fails_a_weight_without_training_update():
    with pytest.raises(AssertionError, match=r"unused.*unchanged"):
        _run(DeadWeight, expected_num_trainable_weights=3)


def test_fails_a_load_that_loses_a_weight():
    with pytest.raises(AssertionError, match=r"bias differs after a .keras"):
        _run(ForgetfulLoad)


def test_fails_an_output_outside_the_compute_dtype():
    with pytest.raises(
        AssertionError, match=r"under mixed_float16: eager output dtypes"
    ):
        _run(Float32Output)


def test_fails_wrong_weight_counts_and_shapes():
    with pytest.raises(AssertionError, match="has 2 trainable weights"):
        _run(Affine, expected_num_trainable_weights=3)
    with pytest.raises(AssertionError, match="output shape"):
        _run(Affine, expected_output_shape=(2, 5))
    with pytest.raises(AssertionError, match="carries no mask"):
        _run(Affine, expected_mask=np.ones((2,), bool))


def test_refused_policies():
    # Declared and raised: passes (bfloat16 is still checked).
    _run(
        Float16Refused,
        refused_policies={"mixed_float16": (ValueError, "needs float32")},
        run_training_check=False,
        run_saving_check=False,
    )
    # Raised but not declared: the error comes through.
    with pytest.raises(ValueError, match="needs float32"):
        _run(Float16Refused, run_training_check=False, run_saving_check=False)
    # Declared but not raised: fails.
    with pytest.raises(AssertionError, match="declared to refuse"):
        _run(
            Affine,
            refused_policies={"mixed_float16": (ValueError, "x")},
            run_training_check=False,
            run_saving_check=False,
        )
