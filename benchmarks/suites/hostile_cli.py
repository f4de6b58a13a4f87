"""The command line against a hostile new user's inputs, each under a memory cap and a time limit.

    .venv/bin/python -m benchmarks hostile_cli [--cap-gib 2] [--limit-s 10] [--only CLASS] [--json FILE]

Every input runs as `homespec ...` in a child process whose address space is capped at --cap-gib
(RLIMIT_AS, as `prlimit --as` does) and which is killed after --limit-s. An input passes when it
ends in time with the exit code it should (2 usage, 1 runtime, 0 for the inputs that are no
mistake) and, when it fails, with one `error:` line and one `hint:` line, no traceback and no
"internal error". Prints a row per input and a summary per class.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import ROOT, use_tests
from benchmarks.results import Result

HEAD = "homespec/data/heads/smollm2-135m-instruct"


def inputs(d: Path) -> list[tuple[int, str, list[str], int, str | None]]:
    """(class, what, argv, expected exit code, stdin) of every input; files made in `d`."""
    fifo, huge, big_line, no_msg, bad_init, dead_init = (d / "fifo", d / "huge.jsonl", d / "line.jsonl",
                                                          d / "t.jinja", d / "init", d / "init2")
    os.mkfifo(fifo)
    with open(huge, "wb") as f:
        f.truncate(3 << 30)  # sparse: 3 GiB that take no disk
    with open(big_line, "w") as f:
        f.write(json.dumps({"prompt": "word " * (14 << 20)}) + "\n")  # a 70 MB line
    no_msg.write_text("{{ bos_token }}<|im_start|>assistant\n")
    bad_init.mkdir()
    (bad_init / "config.json").write_text('{"hidden_size": "wide", "num_attention_heads": 9}')
    dead_init.mkdir()
    os.mkfifo(dead_init / "config.json")
    out = str(d / "run")
    plain = str(_no_template_model(d))
    return [
        (1, "generate --prompts /dev/zero", ["generate", "--prompts", "/dev/zero"], 2, None),
        (1, "generate --prompts FIFO", ["generate", "--prompts", str(fifo)], 2, None),
        (1, "generate --prompts 3 GiB file", ["generate", "--prompts", str(huge)], 2, None),
        (1, "bench --prompts FIFO", ["bench", "--prompts", str(fifo)], 2, None),
        (1, "plan --calibrate /dev/zero", ["plan", "--calibrate", "/dev/zero"], 2, None),
        (1, "plan --calibrate FIFO", ["plan", "--calibrate", str(fifo)], 2, None),
        (1, "serve --chat-template-file /dev/zero", ["serve", "--chat-template-file", "/dev/zero"], 2, None),
        (1, "serve --chat-template-file FIFO", ["serve", "--chat-template-file", str(fifo)], 2, None),
        (1, "draft train --prompts /dev/zero", ["draft", "train", "--prompts", "/dev/zero", "--out", out], 2, None),
        (1, "draft train --prompts FIFO", ["draft", "train", "--prompts", str(fifo), "--out", out], 2, None),
        (1, "draft train --init DIR (config.json a FIFO)", ["draft", "train", "--init", str(dead_init), "--out", out],
         2, None),
        (1, "chat --resume FIFO", ["chat", "--resume", str(fifo)], 2, None),
        (1, "chat, /save FIFO", ["chat", "--method", "none", "-n", "2", "--ctx", "512"], 0, f"/save {fifo}\n/quit\n"),
        (8, "generate --prompts DIR", ["generate", "--prompts", str(d)], 2, None),
        (8, "draft train --init DIR (config.json malformed)", ["draft", "train", "--init", str(bad_init), "--out", out],
         1, None),
        (8, "draft train --prompts (one 70 MB line)", ["draft", "train", "--prompts", str(big_line), "--out", out],
         2, None),
        (8, "draft export to a full disk", ["draft", "export", HEAD, "--format", "hf", "--out", str(d / "exp")], 1,
         "FSIZE"),
        (8, "bench --plot /proc/x.png", ["bench", "--plot", "/proc/x.png"], 2, None),
        (8, "bench --json-out /sys/x.json", ["bench", "--json-out", "/sys/x.json"], 2, None),
        (8, "plan --model https://... (HF_HUB_OFFLINE=1)", ["plan", "--model", "http://127.0.0.1:9/m.gguf"], 1,
         "OFFLINE"),
        (8, "generate --draft-tokens 1", ["generate", "--draft-tokens", "1", "-p", "hi"], 2, None),
        (9, "draft train --ttt-steps 1000000", ["draft", "train", "--ttt-steps", "1000000", "--out", out], 2, None),
        (9, "bench --repeat 1000000000", ["bench", "--repeat", "1000000000"], 2, None),
        (9, "models --gpu zzz", ["models", "--gpu", "zzz"], 2, None),
        (9, "models --ctx 0", ["models", "--ctx", "0"], 2, None),
        (9, "generate --prompts missing.jsonl", ["generate", "--prompts", str(d / "missing.jsonl")], 2, None),
        (9, "generate --device cuda (llama.cpp)", ["generate", "--device", "cuda", "-p", "hi"], 2, None),
        (9, "generate --backend torch --device cuda",
         ["generate", "--backend", "torch", "--device", "cuda", "-p", "hi"], 2, None),
        (9, "serve --chat-template-file (no user message)", ["serve", "--chat-template-file", str(no_msg)], 2, None),
        (10, "plan --gpu m3-ultra", ["plan", "--gpu", "m3-ultra"], 0, None),
        (10, "plan --gpu 'm4 max' --json", ["plan", "--gpu", "m4 max", "--json"], 0, None),
        (10, "generate on a model without a chat template", ["generate", "--model", plain, "--method", "none", "-p",
                                                             "hi"], 2, None),
    ]


def _no_template_model(d: Path) -> Path:
    """A tiny GGUF with SmolLM2's vocabulary and no chat template (tests/tiny_models.py)."""
    use_tests()
    import tiny_models

    fields = tiny_models._tokenizer_fields
    tiny_models._tokenizer_fields = lambda src: tuple(f for f in fields(src) if f[0] != "tokenizer.chat_template")
    return tiny_models.make_tiny_gguf(d / "plain.gguf", n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=64)


def run_one(argv: list[str], stdin: str | None, cap: int, limit_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOMESPEC_CHATS_DIR": tempfile.gettempdir()}
    env.pop("HOMESPEC_DEBUG", None)
    fsize = stdin == "FSIZE"
    if stdin == "OFFLINE":
        env["HF_HUB_OFFLINE"] = "1"

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        if fsize:  # a disk that is full after 1 MiB (EFBIG, as ENOSPC)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "homespec", *argv], cwd=ROOT, env=env, preexec_fn=limits, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(None if stdin in (None, "FSIZE", "OFFLINE") else stdin, timeout=limit_s)
        code = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        code = None
    return {"exit": code, "seconds": round(time.monotonic() - t0, 2), "stderr": err, "stdout_chars": len(out)}


def judge(r: dict, expected: int, in_session: bool = False) -> tuple[bool, str]:
    """(passed, the line that says what happened). `in_session`: the mistake is said inside a
    session that goes on (chat's /save), which must say it and still exit 0."""
    lines = [x for x in r["stderr"].strip().splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error: ")]
    first = errors[0] if errors else (lines[-1] if lines else "")
    if r["exit"] is None:
        return False, "killed: did not end in time"
    clean = "Traceback" not in r["stderr"] and "internal error" not in r["stderr"]
    if expected == 0:  # no mistake, or one said inside a session that goes on (chat's /save)
        return r["exit"] == 0 and clean and (bool(errors) or not in_session), first
    shaped = len(errors) == 1 and errors[0] == lines[-2] and lines[-1].startswith("hint: ")
    return r["exit"] == expected and clean and shaped, first


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cap-gib", type=float, default=2.0)
    ap.add_argument("--limit-s", type=float, default=10.0)
    ap.add_argument("--only", type=int, default=None, help="one class")


def run(a: argparse.Namespace) -> Result:
    rows = []
    with tempfile.TemporaryDirectory(prefix="homespec-hostile-") as tmp:
        for cls, what, args, expected, stdin in inputs(Path(tmp)):
            if a.only is not None and cls != a.only:
                continue
            r = run_one(args, stdin, int(a.cap_gib * (1 << 30)), a.limit_s)
            ok, line = judge(r, expected, in_session=stdin is not None and stdin.startswith("/"))
            rows.append({"class": cls, "input": what, "expected_exit": expected, "exit": r["exit"],
                         "seconds": r["seconds"], "passed": ok, "says": line[:300]})
            print(f"{'ok  ' if ok else 'FAIL'} class {cls:>2}  {what:<48} exit {r['exit']} in {r['seconds']:5.2f} s  "
                  f"{line[:110]}", flush=True)
    by_class: dict[int, list[dict]] = {}
    for r in rows:
        by_class.setdefault(r["class"], []).append(r)
    print()
    for cls, rs in sorted(by_class.items()):
        slowest = max(r["seconds"] for r in rs)
        print(f"class {cls:>2}: {sum(r['passed'] for r in rs)}/{len(rs)} passed, slowest {slowest:.2f} s")
    return Result(rows=rows, detail={"cap_gib": a.cap_gib, "limit_s": a.limit_s,
                                     "load_average": round(os.getloadavg()[0], 2)},
                  status=0 if all(r["passed"] for r in rows) else 1)

