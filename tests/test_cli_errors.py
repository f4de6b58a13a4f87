"""Bad input is a usage error with one line and a hint, found before any work: never an internal
error, never after minutes of work."""

from __future__ import annotations

import time

import pytest

from homespec.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _usage(code: int, err: str, words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("error: ") and words in lines[0], err
    assert lines[-1].startswith("hint: ") and "internal error" not in err


@pytest.mark.parametrize("methods", ["", ",", " , "])
def test_bench_without_a_method(capsys, methods):
    code, _, err = run(capsys, "bench", "--methods", methods)
    _usage(code, err, "names no method")


@pytest.mark.parametrize("fmt, name", [("gguf", "x.gguf"), ("hf", "sub/dir")])
def test_export_under_a_file_is_refused_before_loading(capsys, tmp_path, fmt, name):
    (tmp_path / "FILE").write_text("not a directory")
    t0 = time.monotonic()
    code, _, err = run(capsys, "draft", "export", "homespec/data/heads/smollm2-135m-instruct", "--format", fmt,
                       "--eagle3-twin", "--out", str(tmp_path / "FILE" / name))
    _usage(code, err, "is a file, not a directory")
    assert time.monotonic() - t0 < 10  # nothing was loaded


def test_train_refuses_a_draft_vocabulary_above_the_targets(capsys, tmp_path):
    code, _, err = run(capsys, "draft", "train", "--draft-vocab", "100000", "--out", str(tmp_path / "run"))
    _usage(code, err, "more than the target's 49152 tokens")
    assert not (tmp_path / "run").exists()


def test_a_truncated_gguf_is_truncated_for_generate_as_for_plan(capsys, tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as f:
        cut.write_bytes(f.read(3_000_000))
    for command in (["plan"], ["generate", "-p", "hi", "--method", "none"]):
        code, _, err = run(capsys, *command, "--model", str(cut))
        assert code == 1 and "truncated" in err.splitlines()[0], err


def test_ctrl_c_while_models_are_torn_down_is_an_interrupt(capsys):
    """A Ctrl-C that lands in a finaliser (llama-cpp-python's Llama.__del__ at the end of bench)
    used to print a traceback from __del__ and exit 0: it is an interrupt, said in one line."""
    import gc
    import signal

    class Model:
        def __del__(self):  # torn down by the collector at the end of the command
            signal.raise_signal(signal.SIGINT)

    # an earlier test that ran _entry() in this process left SIGINT ignored, as a finished run does
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    gc.disable()
    try:
        m = Model()
        m.cycle = m  # freed only by the collector: at the end of main()
        del m
        code = main(["plan", "--json"])
    finally:
        gc.enable()
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert code == 130 and err.strip().splitlines()[-1] == "error: interrupted", err
    assert "Traceback" not in err and "Exception ignored" not in err
