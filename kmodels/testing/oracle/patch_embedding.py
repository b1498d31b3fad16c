import numpy as np


def patch_embedding(images, kernel, bias, patch_size):
    """Linear projection of non-overlapping square patches (Dosovitskiy et
    al., 2021, eq. 1): `z_i = flatten(patch_i) W + b`, patches in row-major
    order.

    Args:
        images: `(batch, height, width, channels)`.
        kernel: `(patch_size, patch_size, channels, dim)`; a patch is
            flattened in (row, column, channel) order to match it.
        bias: `(dim,)`.
        patch_size: side of the square patches; divides height and width.

    Returns:
        `(batch, (height / patch_size) * (width / patch_size), dim)`.
    """
    x = np.asarray(images, np.float64)
    b, h, w, c = x.shape
    p = patch_size
    patches = x.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, (h // p) * (w // p), p * p * c)
    kernel = np.asarray(kernel, np.float64).reshape(p * p * c, -1)
    return patches @ kernel + np.asarray(bias, np.float64)
