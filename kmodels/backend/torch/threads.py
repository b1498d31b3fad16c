"""torch's intra-op thread count for the entry points of kmodels' models
on a busy machine (`kmodels.backend.threads`)."""

import contextlib
import os
import threading

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


# The entry points running now inside a changed count, and the count to
# put back when the last of them returns: torch's count is the process's,
# so two threads' calls share one change instead of undoing each other's.
_SCOPE = {"depth": 0, "restore": None}
_LOCK = threading.Lock()


@contextlib.contextmanager
def free_core_scope(choose):
    """torch's count set to `choose(current)` inside the block and put
    back after it, unless the user chose the count; yields the count set,
    or None where it changed nothing. Calls from several threads at once
    share the first one's count; the last to return puts it back."""
    with _LOCK:
        if _SCOPE["depth"]:
            _SCOPE["depth"] += 1
            chosen = torch.get_num_threads()
        else:
            current = torch.get_num_threads()
            if _user_chose_threads():
                chosen = None
            else:
                chosen = choose(current)
                if chosen == current:
                    chosen = None
            if chosen is not None:
                torch.set_num_threads(chosen)
                _SCOPE.update(depth=1, restore=current)
    if chosen is None:
        yield None
        return
    try:
        yield chosen
    finally:
        with _LOCK:
            _SCOPE["depth"] -= 1
            if not _SCOPE["depth"]:
                torch.set_num_threads(_SCOPE["restore"])
