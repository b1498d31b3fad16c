"""torch's intra-op thread count for the entry points of kmodels' models
on a busy machine (`kmodels.backend.threads`)."""

import contextlib
import os

import torch

# torch's count when kmodels was imported: a different count at an entry
# point is the user's own choice (`torch.set_num_threads`), or an outer
# entry point's, and stands.
IMPORTED_THREADS = torch.get_num_threads()
# Set, they are the user's choice of the count, and stand.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# With OpenMP's passive wait the threads sleep instead of spinning: torch's
# count then beat one thread under a CPU hog per core (0.43x its epoch,
# `benchmarks.busy`), so it stands too.
WAIT_POLICY = "OMP_WAIT_POLICY"


def _user_chose_threads():
    """Whether the user chose torch's thread count: a variable of
    `THREAD_VARIABLES` set, OpenMP's passive wait, or a count other than
    torch's at import."""
    if any(os.environ.get(name) for name in THREAD_VARIABLES):
        return True
    if os.environ.get(WAIT_POLICY, "").strip().upper() == "PASSIVE":
        return True
    return torch.get_num_threads() != IMPORTED_THREADS


@contextlib.contextmanager
def free_core_scope(choose):
    """torch's count set to `choose(current)` inside the block and put
    back after it, unless the user chose the count; yields the count set,
    or None where it changed nothing."""
    current = torch.get_num_threads()
    if _user_chose_threads():
        yield None
        return
    chosen = choose(current)
    if chosen == current:
        yield None
        return
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(current)
