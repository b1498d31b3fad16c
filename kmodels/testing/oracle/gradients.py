import numpy as np


def numerical_gradient(f, params, eps=1e-6):
    """Central finite differences of a scalar `f(params)`.

    Args:
        f: callable taking a list of float64 arrays and returning a float.
        params: list of arrays; they are copied, never modified.
        eps: step. In float64 with O(1) values, 1e-6 gives ~1e-9 accuracy.

    Returns:
        A list of arrays shaped like `params`.
    """
    params = [np.array(p, np.float64) for p in params]
    grads = []
    for p in params:
        g = np.zeros_like(p)
        it = np.nditer(p, flags=["multi_index"])
        for _ in it:
            idx = it.multi_index
            old = p[idx]
            p[idx] = old + eps
            hi = f(params)
            p[idx] = old - eps
            lo = f(params)
            p[idx] = old
            g[idx] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads
