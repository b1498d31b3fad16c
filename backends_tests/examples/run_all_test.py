"""The main job's oracle check, on the current backend."""

import pytest

from examples import run_all as demo


def test_oracle_check_agrees_on_this_backend(parity):
    summary = demo.oracle_check()
    assert set(summary) == {"gru", "bigru_masked", "transformer_encoder"}
    # float32 vs the float64 oracle: measured ~2e-7; the demo's bound is 1e-5.
    assert all(value < 1e-5 for value in summary.values()), summary


def test_unknown_demo_is_rejected(capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(["--demos", "nope"])
    assert info.value.code == 2
    assert "unknown demos ['nope']" in capsys.readouterr().err
