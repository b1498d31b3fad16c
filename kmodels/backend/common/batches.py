"""The batches a compiled step is about to consume."""


def pull_batches(iterator, steps_per_execution):
    """Takes up to `steps_per_execution` batches (at least one) from
    `iterator`; `StopIteration` propagates when there is none."""
    batches = [next(iterator)]
    for _ in range(steps_per_execution - 1):
        try:
            batches.append(next(iterator))
        except StopIteration:
            break
    return batches
