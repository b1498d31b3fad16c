import numpy as np


def patch_embedding(
    images, kernel, bias, patch_size, padding="valid", class_token=None
):
    """Linear projection of non-overlapping patches (Dosovitskiy et al.,
    2021, eq. 1): `z_i = flatten(patch_i) W + b`, patches in row-major
    order, optionally after a class token `x_class` (eq. 1's first term).

    Args:
        images: `(batch, height, width, channels)`.
        kernel: `(patch_height, patch_width, channels, dim)`; a patch is
            flattened in (row, column, channel) order to match it.
        bias: `(dim,)`.
        patch_size: side of square patches, or `(patch_height,
            patch_width)`.
        padding: `"valid"`: the patches divide height and width;
            `"same"`: the images are first zero-padded at the bottom and
            right up to multiples of the patch (timm's `dynamic_img_pad`).
        class_token: `None`, or a vector `(dim,)` (any shape of `dim`
            values) put before the patches.

    Returns:
        `(batch, [1 +] (height / patch_height) * (width / patch_width),
        dim)`, the divisions rounded up with `"same"`.
    """
    x = np.asarray(images, np.float64)
    ph, pw = (
        (patch_size, patch_size)
        if np.ndim(patch_size) == 0
        else tuple(patch_size)
    )
    if padding == "same":
        b, h, w, c = x.shape
        padded = np.zeros((b, -(-h // ph) * ph, -(-w // pw) * pw, c))
        padded[:, :h, :w] = x
        x = padded
    b, h, w, c = x.shape
    if h % ph or w % pw:
        raise ValueError(f"patches {ph}x{pw} do not tile {h}x{w} images")
    patches = x.reshape(b, h // ph, ph, w // pw, pw, c)
    patches = patches.transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, (h // ph) * (w // pw), ph * pw * c)
    kernel = np.asarray(kernel, np.float64).reshape(ph * pw * c, -1)
    out = patches @ kernel + np.asarray(bias, np.float64)
    if class_token is None:
        return out
    token = np.asarray(class_token, np.float64).reshape(1, 1, -1)
    return np.concatenate(
        [np.broadcast_to(token, (b, 1, out.shape[-1])), out], 1
    )
