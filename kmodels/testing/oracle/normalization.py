import numpy as np


def layer_norm(x, gamma, beta, epsilon=1e-3):
    """Layer normalisation (Ba et al., 2016) over the last axis.

    `y = gamma * (x - mean) / sqrt(var + epsilon) + beta`, with the population
    variance. Keras' default epsilon is 1e-3; keras-hub's Transformer layers
    use 1e-5.
    """
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return np.asarray(gamma, np.float64) * (x - mean) / np.sqrt(
        var + epsilon
    ) + np.asarray(beta, np.float64)
