"""`python -m benchmarks.distributed`: the scaling benchmark (see
`runner.main`)."""

from benchmarks.distributed.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
