"""Peak resident memory of one case in the child process (Linux `/proc`).

`start()` resets the process' high-water mark of resident memory (`VmHWM`)
by writing "5" to `/proc/self/clear_refs`, so that `peak_mb()` read after
a case is that case's peak, not the process lifetime's. Where the reset is
not permitted (or there is no `/proc`), the peak falls back to
`ru_maxrss`, the process lifetime's peak, and `scope` says so."""

import re
import resource
import sys

_STATUS = "/proc/self/status"


def _status_mb(field, path=_STATUS):
    """`field` ("VmHWM", "VmRSS") of `/proc/self/status` in MB, or None."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


def reset_peak(path="/proc/self/clear_refs"):
    """Resets the resident-memory high-water mark; True if it worked."""
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def start():
    """Call before a case: returns `(scope, rss_mb)`, where scope is "case"
    when the high-water mark was reset, "process" otherwise."""
    scope = "case" if reset_peak() else "process"
    return scope, _status_mb("VmRSS")


def peak_mb(scope):
    """The peak resident memory in MB since `start()` ("case") or since the
    process started ("process")."""
    peak = _status_mb("VmHWM") if scope == "case" else None
    if peak is None:
        # ru_maxrss: kB on Linux, bytes on macOS.
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = rss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return peak
