"""Step-time summary and the measuring loop (no clock-dependent asserts)."""

import pytest

from benchmarks import timing

pytestmark = pytest.mark.backend_independent(
    reason="timing statistics over Python clocks"
)


def test_summarize_median_quartiles_and_range():
    stats = timing.summarize([0.005, 0.001, 0.003, 0.002, 0.004])
    # Seconds to milliseconds; inclusive quartiles of 1..5 are 2 and 4.
    assert stats == pytest.approx(
        {
            "median_ms": 3.0,
            "q1_ms": 2.0,
            "q3_ms": 4.0,
            "min_ms": 1.0,
            "max_ms": 5.0,
            "steps": 5,
        },
        rel=1e-12,  # float rounding of the unit conversion only
    )


def test_summarize_single_step_has_zero_spread():
    stats = timing.summarize([0.25])
    assert stats["q1_ms"] == stats["median_ms"] == stats["q3_ms"] == 250.0


def test_summarize_rejects_no_steps():
    with pytest.raises(ValueError, match="at least one step time; got none"):
        timing.summarize([])


def test_measure_runs_warmup_then_fixed_number_of_steps():
    calls = []
    stats = timing.measure(
        lambda: calls.append(1),
        warmup=2,
        min_steps=3,
        max_steps=3,
        max_seconds=1e9,
    )
    assert len(calls) == 5  # 2 untimed warm-up calls + 3 timed
    assert stats["steps"] == 3


def test_measure_stops_after_time_budget_once_min_steps_ran():
    calls = []
    stats = timing.measure(
        lambda: calls.append(1),
        warmup=0,
        min_steps=4,
        max_steps=100,
        max_seconds=0.0,
    )
    # The budget is spent at once, so exactly min_steps timed calls run.
    assert stats["steps"] == 4 and len(calls) == 4


def test_profile_writes_a_report_after_timing(tmp_path, monkeypatch):
    monkeypatch.setitem(timing.PROFILE, "dir", str(tmp_path))
    monkeypatch.setitem(timing.PROFILE, "stem", "case-backend")
    calls = []
    timing.measure(lambda: calls.append(1), warmup=1, min_steps=2, max_steps=2)
    # 1 warm-up + 2 timed + PROFILE_STEPS profiled calls (+ as many again
    # under the torch profiler when the backend is torch).
    profiled = len(calls) - 3
    assert profiled in (timing.PROFILE_STEPS, 2 * timing.PROFILE_STEPS)
    text = (tmp_path / "case-backend.txt").read_text()
    assert text.startswith(
        f"# {timing.PROFILE_STEPS} steps, cProfile by cumulative time"
    )


class _FakeClock:
    """A clock that only moves when a step runs: the step of call i takes
    `durations[i]` seconds (the last duration repeats)."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = list(durations)
        self.calls = 0

    def __call__(self):
        return self.now

    def step(self):
        i = min(self.calls, len(self.durations) - 1)
        self.now += self.durations[i]
        self.calls += 1


def test_measure_times_the_first_call_apart():
    # The first call (tracing, compilation) takes 5 s, the others 0.1 s:
    # the first is a warm-up call, reported as `first_step_ms` only.
    clock = _FakeClock([5.0, 0.2, 0.1])
    stats = timing.measure(
        clock.step, warmup=2, min_steps=3, max_steps=3, clock=clock
    )
    assert stats["first_step_ms"] == pytest.approx(5000.0, rel=1e-12)
    assert stats["median_ms"] == pytest.approx(100.0, rel=1e-12)
    assert stats["steps"] == 3 and clock.calls == 5
    assert timing.compile_ms(
        stats["first_step_ms"], stats["median_ms"]
    ) == pytest.approx(4900.0, rel=1e-12)


def test_measure_without_warmup_reports_the_first_timed_call():
    clock = _FakeClock([3.0, 1.0])
    stats = timing.measure(
        clock.step, warmup=0, min_steps=3, max_steps=3, clock=clock
    )
    # Timed calls 3, 1, 1 s: the first one is also the first call.
    assert stats["first_step_ms"] == pytest.approx(3000.0, rel=1e-12)
    assert stats["median_ms"] == pytest.approx(1000.0, rel=1e-12)


def test_compile_time_is_never_negative():
    # A first call faster than the median (noise) gives 0, not a negative.
    assert timing.compile_ms(90.0, 100.0) == 0.0
    assert timing.compile_ms(350.0, 100.0) == 250.0


def test_measure_alternating_takes_turns_in_abba_order():
    calls = []
    first, second = timing.measure_alternating(
        lambda: calls.append("a"),
        lambda: calls.append("b"),
        {"warmup": 1, "min_steps": 4, "max_steps": 4, "max_seconds": 60},
    )
    # One warm-up pair, then 4 timed pairs, the order flipping each pair.
    assert "".join(calls) == "ab" + "ba" + "ab" + "ba" + "ab"
    assert first["steps"] == second["steps"] == 4
