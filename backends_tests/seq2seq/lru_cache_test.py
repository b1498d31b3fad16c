"""`kmodels.seq2seq.eager_cache.LRUCache`: the bounded, thread-safe cache of
compiled functions (the eager calls' and `Translator.generate`'s loops)."""

import copy
import pickle
import threading

import pytest

from kmodels.seq2seq.eager_cache import LRUCache

pytestmark = pytest.mark.backend_independent(
    reason="a Python cache with a lock"
)


def test_the_least_recently_used_key_is_dropped():
    cache = LRUCache()
    made = []

    def get(key, bound=2):
        return cache.get(key, lambda: made.append(key) or key.upper(), bound)

    assert get("a") == "A" and get("b") == "B"
    assert get("a") == "A"  # a hit: "a" is now the most recent
    assert get("c") == "C"  # "b" goes
    assert len(cache) == 2 and "a" in cache and "c" in cache
    assert "b" not in cache
    assert made == ["a", "b", "c"]
    # A smaller bound applies at the next call, a hit included.
    assert get("c", bound=1) == "C"
    assert len(cache) == 1 and "c" in cache
    cache.clear()
    assert len(cache) == 0


def test_threads_asking_for_a_new_key_share_one_value():
    cache = LRUCache()
    made = []
    barrier = threading.Barrier(8)
    values = []

    def create():
        made.append(1)
        return object()

    def worker():
        barrier.wait()
        for key in range(50):
            values.append((key, cache.get(key, create, 64)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 50 and len(cache) == 50
    for key in range(50):
        assert len({id(v) for k, v in values if k == key}) == 1


def test_a_copy_starts_empty():
    cache = LRUCache()
    cache.get("a", lambda: "A", 2)
    for other in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert len(other) == 0
        assert other.get("b", lambda: "B", 2) == "B"
    assert len(cache) == 1
