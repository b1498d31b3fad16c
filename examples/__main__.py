"""`python -m examples`: every example on every installed backend (see
`examples/run_all.py`)."""

from examples.run_all import main

if __name__ == "__main__":
    main()
