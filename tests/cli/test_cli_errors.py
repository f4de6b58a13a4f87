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


# --- the classes of a hostile new user's second pass: each test names its class --------------------------
# 1: file options that name no regular file (or a huge one), 8: user mistakes once called internal
# errors, 9: numbers and options without their range, 10: planner spellings and the headline.
# A path that could hang (a FIFO) runs in a child process, under a 2 GiB address-space cap.

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CAP = 2 << 30


def run_capped(*args: str, timeout: float = 120, env: dict | None = None) -> tuple[int, str, str]:
    """`homespec ARGS` in a child process under a 2 GiB address-space cap."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    r = subprocess.run([sys.executable, "-m", "homespec", *args], cwd=ROOT, timeout=timeout, capture_output=True,
                       text=True, preexec_fn=cap, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    return r.returncode, r.stdout, r.stderr


def _one_line(code: int, err: str, words: str, exit_code: int = 2) -> None:
    lines = err.strip().splitlines()
    assert code == exit_code and lines[0].startswith("error: ") and words in lines[0], err[-2000:]
    assert len(lines) == 2 and lines[1].startswith("hint: ") and "internal error" not in err and "Traceback" not in err


@pytest.fixture
def odd(tmp_path) -> dict[str, str]:
    """Paths that are no regular file, and a regular one too large for its purpose (sparse: no disk)."""
    os.mkfifo(tmp_path / "fifo")
    with open(tmp_path / "huge.jsonl", "wb") as f:
        f.truncate(3 << 30)
    return {"fifo": str(tmp_path / "fifo"), "zero": "/dev/zero", "dir": str(tmp_path), "huge": str(tmp_path / "huge.jsonl")}


WORDS = {"fifo": "is a FIFO", "zero": "is a character device", "dir": "is a directory", "huge": "is larger"}


@pytest.mark.parametrize("command", [["generate", "--prompts"], ["bench", "--prompts"], ["plan", "--calibrate"],
                                     ["serve", "--chat-template-file"], ["draft", "train", "--prompts"],
                                     ["chat", "--resume"]])
@pytest.mark.parametrize("kind", ["fifo", "zero", "huge"])
def test_class1_a_file_option_refuses_what_is_no_file_before_reading(odd, tmp_path, command, kind):
    extra = ["--out", str(tmp_path / "run")] if command[:2] == ["draft", "train"] else []
    code, _, err = run_capped(*command, odd[kind], *extra)
    _one_line(code, err, WORDS[kind])


def test_class1_chat_save_to_a_fifo_or_device_is_refused_without_opening_it(tmp_path):
    from types import SimpleNamespace

    from homespec.chat.app import Chat

    os.mkfifo(tmp_path / "fifo")
    session = SimpleNamespace(model_path="m.gguf", options=SimpleNamespace(method="none"))
    err = __import__("io").StringIO()
    chat = Chat(session, err=err, out=__import__("io").StringIO())  # type: ignore[arg-type]
    chat.history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    for target, words in ((tmp_path / "fifo", "is a FIFO"), ("/dev/null", "is a character device"),
                          (tmp_path, "is a directory"), ("/proc/x.json", "cannot write in /proc")):
        chat.save(str(target))
        assert words in err.getvalue(), err.getvalue()
    chat.save(str(tmp_path / "ok.json"))
    assert "saved 2 messages" in err.getvalue() and json.loads((tmp_path / "ok.json").read_text())["messages"]


@pytest.mark.parametrize("what", ["fifo", "dir", "list", "types"])
def test_class8_draft_train_init_with_a_bad_config_is_one_line(capsys, tmp_path, what):
    head = tmp_path / "head"
    head.mkdir()
    if what == "fifo":
        os.mkfifo(head / "config.json")
    elif what == "dir":
        (head / "config.json").mkdir()
    else:
        (head / "config.json").write_text("[1, 2]" if what == "list" else
                                          '{"hidden_size": "wide", "num_attention_heads": 9, "vocab_size": 1, '
                                          '"intermediate_size": 2}')
    code, _, err = run_capped("draft", "train", "--init", str(head), "--out", str(tmp_path / "run"), timeout=300)
    lines = err.strip().splitlines()
    assert code in (1, 2) and lines[-2].startswith("error: ") and lines[-1].startswith("hint: "), err[-2000:]
    assert "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("args, words", [
    (["--prompts", "{tmp}"], "is a directory"),
    (["--prompts", "{tmp}/missing.jsonl"], "does not exist"),
    (["--prompts", "{tmp}/long.jsonl", "--ctx", "256"], "more than --ctx 256 tokens long"),
    (["--draft-tokens", "1", "-p", "hi"], "--draft-tokens 1 is outside [2, 4096]"),
    (["--draft-depth", "0", "-p", "hi"], "--draft-depth 0 is outside"),
])
def test_class8_generate_mistakes_are_usage_errors(capsys, tmp_path, args, words):
    (tmp_path / "long.jsonl").write_text(json.dumps({"prompt": "word " * 300_000}) + "\n")
    code, _, err = run(capsys, "generate", *[a.format(tmp=tmp_path) for a in args])
    _one_line(code, err, words)


@pytest.mark.parametrize("flag, path, words", [("--plot", "/proc/bench.png", "cannot write in /proc"),
                                               ("--json-out", "/sys/bench.json", "cannot write in /sys"),
                                               ("--markdown", "/dev/null", "is a character device")])
def test_class8_bench_outputs_are_checked_before_the_run(capsys, flag, path, words):
    t0 = time.monotonic()
    code, _, err = run(capsys, "bench", "--limit", "1", flag, path)
    _one_line(code, err, words)
    assert time.monotonic() - t0 < 30  # nothing was run


def test_class8_export_to_a_full_disk_is_a_runtime_error_in_one_line(tmp_path):
    """A file-size limit makes the disk full for the child (EFBIG, as ENOSPC)."""
    import resource

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    r = subprocess.run([sys.executable, "-m", "homespec", "draft", "export", "homespec/data/heads/smollm2-135m-instruct",
                        "--format", "hf", "--out", str(tmp_path / "out")], cwd=ROOT, timeout=600, capture_output=True,
                       text=True, preexec_fn=small_disk, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and lines[-2].startswith("error: cannot write --out") and "disk is full" in lines[-2], \
        r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/m.gguf", "http://localhost:9/models/x.gguf"])
def test_class8_a_url_with_the_hub_offline_is_one_line(capsys, monkeypatch, url):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code, _, err = run(capsys, "plan", "--model", url)
    _one_line(code, err, "HF_HUB_OFFLINE is set", 1)


@pytest.mark.parametrize("args, words", [
    (["draft", "train", "--ttt-steps", "1000000"], "--ttt-steps 1000000 is outside [1, 32]"),
    (["draft", "train", "--epochs", "0"], "--epochs 0 is outside"),
    (["bench", "--repeat", "1000000000"], "--repeat 1000000000 is outside [1, 100]"),
    (["bench", "--limit", "0"], "--limit 0 is outside"),
    (["models", "--gpu", "zzz"], "unknown GPU 'zzz'"),
    (["models", "--ctx", "0"], "--ctx 0 is outside [16, 16777216]"),
    (["plan", "--ubatch", "1000000"], "--ubatch 1000000 is outside"),
    (["plan", "--gpu-memory-utilization", "0"], "--gpu-memory-utilization 0 is outside (0, 1]"),
    (["generate", "--device", "cuda", "-p", "hi"], "--device cuda chooses where the torch backend runs"),
    (["serve", "--window", "-1"], "--window -1 is outside"),
])
def test_class9_every_number_and_option_has_its_range(capsys, args, words):
    code, _, err = run(capsys, *args)
    _one_line(code, err, words)


def test_class9_cuda_that_torch_does_not_see_is_a_usage_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, _, err = run(capsys, "generate", "--backend", "torch", "--device", "cuda:1", "-p", "hi")
    _one_line(code, err, "torch sees no CUDA GPU")


@pytest.mark.parametrize("template", ["{{ bos_token }}<|im_start|>assistant\n", "{% for m in messages %}x{% endfor %}"])
def test_class9_a_chat_template_that_drops_the_users_message_is_refused_before_loading(capsys, tmp_path, template):
    (tmp_path / "t.jinja").write_text(template)
    code, _, err = run(capsys, "serve", "--chat-template-file", str(tmp_path / "t.jinja"))
    _one_line(code, err, "does not write the user's message")


@pytest.mark.parametrize("gpu, base", [("m3-ultra", "m3-ultra-96"), ("M4 Max", "m4-max-36")])
def test_class10_a_chip_without_its_memory_size_is_its_base_configuration(capsys, gpu, base):
    code, out, err = run(capsys, "plan", "--gpu", gpu, "--json")
    notes = json.loads(out)["notes"]
    assert code == 0 and any(f"the base configuration, {base}" in n for n in notes), notes


def test_class10_the_headline_is_the_shape_the_guard_settles_on(capsys):
    code, out, _ = run(capsys, "plan", "--gpu", "m3-ultra-96", "--model", "llama-3.1-70b-q4", "--json")
    e = json.loads(out)["estimate"]
    assert code == 0 and e["run_tree_tokens"] is not None and e["run_tree_tokens"] < 48
    assert e["run_tokens_per_s"] > e["spec_tokens_per_s"] and e["run_tokens_per_s"] > e["plain_tokens_per_s"]
    code, out, _ = run(capsys, "plan", "--gpu", "m3-ultra-96", "--model", "llama-3.1-70b-q4")
    headline = " ".join(out.split()).split("estimated decode: ")[1].split("(memory-bandwidth")[0]
    assert f"{e['run_tokens_per_s']:,.1f} tok/s with eagle3.1" in headline
    assert f"drafting {e['run_tree_tokens']}-node trees" in headline


def test_class10_generate_without_a_chat_template_names_no_chat(capsys, tmp_path, monkeypatch):
    import tiny_models

    fields = tiny_models._tokenizer_fields
    monkeypatch.setattr(tiny_models, "_tokenizer_fields",
                        lambda src: tuple(f for f in fields(src) if f[0] != "tokenizer.chat_template"))
    path = tiny_models.make_tiny_gguf(tmp_path / "plain.gguf", n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=64)
    code, _, err = run(capsys, "generate", "--model", str(path), "--method", "none", "-p", "hi", "-n", "2")
    _one_line(code, err, "has no chat template")
    assert "--no-chat" in err
    code, out, _ = run(capsys, "generate", "--model", str(path), "--method", "none", "-p", "hi", "-n", "2", "--no-chat")
    assert code == 0
