"""The command line of the real-data demos: `--quick` or not."""

import argparse


def parse(doc, argv, full, quick):
    """The settings a demo runs with: `quick` when `argv` holds
    `--quick`, else `full`; `doc` (the demo's docstring) gives the help's
    first line."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    return quick if args.quick else full
