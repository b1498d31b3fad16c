"""Where a tensor sits in a nested structure of model inputs."""


def path_to(struct, tensor):
    """A function that picks `tensor`'s place in inputs shaped as
    `struct`, or `None`."""
    if struct is tensor:
        return lambda x: x
    if isinstance(struct, dict):
        for key, value in struct.items():
            inner = path_to(value, tensor)
            if inner is not None:
                return lambda x, k=key, f=inner: f(x[k])
    if isinstance(struct, (list, tuple)):
        for i, value in enumerate(struct):
            inner = path_to(value, tensor)
            if inner is not None:
                return lambda x, i=i, f=inner: f(
                    x[i] if isinstance(x, (list, tuple)) else x
                )
    return None
