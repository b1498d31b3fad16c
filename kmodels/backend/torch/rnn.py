"""torch side of `kmodels.backend.rnn`."""

import numpy as np
from keras import ops


def is_eager_right_padded(mask):
    try:
        m = np.asarray(ops.convert_to_numpy(mask))
    except Exception:  # traced (e.g. torch.compile): keep the masked path
        return False
    lengths = m.sum(axis=1, keepdims=True)
    return bool(np.all(m == (np.arange(m.shape[1])[None, :] < lengths)))
