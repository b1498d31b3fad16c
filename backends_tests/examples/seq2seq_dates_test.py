"""`python -m examples.seq2seq_dates --quick`, end to end."""

import contextlib
import io
import struct

import keras
import pytest

from examples import seq2seq_dates as demo


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    # PNG signature, then the IHDR chunk: width and height, big endian.
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def _quick(out=None):
    """`main(["--quick", ...])`: its result and what it printed."""
    printed = io.StringIO()
    argv = ["--quick"] + ([] if out is None else ["--out", str(out)])
    with contextlib.redirect_stdout(printed):
        result = demo.main(argv)
    return result, printed.getvalue()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick run, shared by the tests of its figures."""
    tmp_path = tmp_path_factory.mktemp("quick")
    result, out = _quick(tmp_path)
    return result, out, tmp_path


def test_quick_demo_end_to_end(quick_run):
    result, out, tmp_path = quick_run

    assert result["held_out"] == 100 and result["train_pairs"] == 512
    assert result["backend"] == keras.backend.backend()
    assert result["clock"] == "wall"
    assert 0.0 <= result["accuracy"] <= 1.0
    # Accuracy, errors and the printed line agree with each other.
    wrong = len(result["errors"])
    assert result["accuracy"] == (100 - wrong) / 100
    assert f"exact match on 100 held-out dates: {result['accuracy']:.4f}" in out
    assert f"({100 - wrong}/100)" in out
    # BLEU of TextTranslator.evaluate, printed beside its exact match, which
    # is the demo's own count.
    assert 0.0 <= result["bleu"] <= 1.0
    assert (
        f"BLEU {result['bleu']:.4f}, exact match {result['accuracy']:.4f}"
        in out
    )
    for source, prediction, expected in result["examples"]:
        assert isinstance(prediction, str)
        # Targets are ISO dates: YYYY-MM-DD.
        assert len(expected) == 10 and expected[4] == expected[7] == "-"
    assert len(result["examples"]) == 8

    # The frozen encoder did not move while the decoder trained.
    assert result["encoder_unchanged"] is True
    assert result["pretrain_epochs"] == 1
    assert 1 <= result["train_epochs"] <= 2
    assert result["total_train_seconds"] == pytest.approx(
        result["pretrain_seconds"] + result["train_seconds"]
    )

    # The heat map: a PNG of the documented size in pixels.
    assert result["heatmap"] == str(tmp_path / "attention.png")
    width, height = _png_size(result["heatmap"])
    assert (width, height) == (
        demo.HEATMAP_INCHES[0] * demo.HEATMAP_DPI,
        demo.HEATMAP_INCHES[1] * demo.HEATMAP_DPI,
    )
    assert (width, height) == (600, 400)


def test_unknown_flag_exits_with_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(["--fast"])
    assert info.value.code == 2
    assert "unrecognized arguments: --fast" in capsys.readouterr().err


def test_fixed_work_gives_the_same_figures_twice(quick_run):
    # The demo trains a fixed number of epochs (no time budget): a second
    # run with the same seed prints the same lines, and every loss and
    # translation is the same, on each backend.
    first, printed = quick_run[0], quick_run[1]
    second, again = _quick()
    assert first["train_epochs"] == second["train_epochs"] == 2
    assert first["train_history"]["loss"] == second["train_history"]["loss"]
    assert first["examples"] == second["examples"]
    assert first["accuracy"] == second["accuracy"]

    def figures(text):
        return [
            line.split("; training")[0]
            for line in text.splitlines()
            if line.startswith(("exact match", "BLEU", "  "))
        ]

    assert figures(printed) and figures(printed) == figures(again)
