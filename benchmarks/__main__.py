"""`python -m benchmarks`: run the backend benchmark (see `runner.main`)."""

from benchmarks.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
