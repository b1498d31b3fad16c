"""Makes the repository's `benchmarks` package importable (it is not part of
the installed `kmodels` wheel) for the harness tests in this folder."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
