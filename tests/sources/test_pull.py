"""`homespec pull` against a Hugging Face hub on 127.0.0.1 (tests/hub_server.py): catalogue heads by id,
head repos, GGUF repos with their eagle3 sidecar, resumed downloads (a dropped connection, a partial
file left by an earlier run, a real Ctrl-C), and the pulled head paired at run time."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import Hub, Repo, interrupt_in_stall, served, use_hub
from homespec.cli import main
from published_heads import published, reduced, write_head

REPO = Path(__file__).resolve().parents[2]
QWEN = "RedHatAI/Qwen3-8B-speculator.eagle3"  # the catalogue's redhat-eagle3-qwen3-8b, served at a reduced width
LLAMA = "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"


def _shape_only(folder: Path, cfg: dict) -> Path:
    """A head with its published config and full-size d2t / t2d only: its identity, few bytes."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    vocab = cfg["transformer_layer_config"]["vocab_size"]
    save_file({"d2t": np.zeros(cfg["draft_vocab_size"], np.int64), "t2d": np.zeros(vocab, bool)},
              str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tiny_models import make_tiny_gguf

    root = tmp_path_factory.mktemp("served")
    qwen = write_head(root / "qwen", reduced(published("redhat-qwen3-8b")))  # 12.6 MB: an embedding copy
    llama = _shape_only(root / "llama", published("redhat-llama3.1-8b"))
    tiny = make_tiny_gguf(root / "tiny.gguf")
    side = root / "side.gguf"
    side.write_bytes(b"GGUF" + bytes(60))  # a sidecar's bytes: pull fetches files, it does not read them
    hub = Hub(repos={
        QWEN: Repo({"config.json": qwen / "config.json", "model.safetensors": qwen / "model.safetensors",
                    "README.md": Path(__file__), "eagle3.py": Path(__file__)}),
        LLAMA: Repo({p.name: p for p in llama.iterdir()}, commit="b" * 40),
        "org/m-GGUF": Repo({"m-Q4_K_M.gguf": tiny, "m-Q8_0.gguf": tiny, "eagle3-m-Q8_0.gguf": side,
                            "eagle3-m-BF16.gguf": side}),
    })
    with served(hub):
        yield hub


@pytest.fixture
def hub(server, tmp_path, monkeypatch) -> Hub:
    use_hub(monkeypatch, server.url, tmp_path)
    server.log.clear()
    server.drop_once.clear()
    return server


def _pull(capsys, *args: str) -> tuple[int, list[dict], str]:
    code = main(["pull", "--json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else []), err


def _gets(hub: Hub) -> list:
    return [h for h in hub.log if h.method == "GET" and "/resolve/" in h.path]


def test_a_catalogue_head_is_pulled_by_its_id_with_a_progress_bar(hub, capsys):
    code, rows, err = _pull(capsys, "redhat-eagle3-qwen3-8b")
    assert code == 0, err
    (row,) = rows
    assert (row["kind"], row["repo"], row["name"]) == ("head", QWEN, "redhat-eagle3-qwen3-8b")
    assert row["files"] == ["config.json", "model.safetensors"]  # not its README, not its code
    snap = Path(row["path"])
    assert snap.parent.name == "snapshots" and (snap / "model.safetensors").is_file()
    assert "model.safetensors" in err  # the bar, on stderr
    hub.log.clear()
    code, rows, err = _pull(capsys, "redhat-eagle3-qwen3-8b")  # everything here: nothing fetched again
    assert code == 0 and not _gets(hub) and rows[0]["path"] == str(snap)


def test_a_dropped_connection_resumes_where_it_stopped(hub, capsys):
    hub.drop_once.add("model.safetensors")
    code, rows, err = _pull(capsys, QWEN)  # the repo's own name: the same head
    assert code == 0, err
    gets = [h for h in _gets(hub) if h.path.endswith("model.safetensors")]
    size = (Path(rows[0]["path"]) / "model.safetensors").stat().st_size
    assert len(gets) == 2 and gets[0].range is None and gets[0].sent < size
    resumed_at = int(gets[1].range.removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_at <= gets[0].sent and gets[1].sent == size - resumed_at


def test_a_partial_file_from_an_earlier_run_is_completed(hub, capsys, tmp_path):
    served = hub.repos[QWEN].files["model.safetensors"].read_bytes()
    blobs = tmp_path / "hub" / f"models--{QWEN.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{hashlib.sha256(served).hexdigest()}.incomplete").write_bytes(served[:3_000_000])
    code, rows, err = _pull(capsys, "redhat-eagle3-qwen3-8b")
    assert code == 0, err
    gets = [h for h in _gets(hub) if h.path.endswith("model.safetensors")]
    assert [h.range for h in gets] == ["bytes=3000000-"] and gets[0].sent == len(served) - 3_000_000
    assert (Path(rows[0]["path"]) / "model.safetensors").read_bytes() == served


def test_a_gguf_repo_comes_with_the_sidecar_llama_cpp_would_fetch(hub, capsys):
    code, rows, err = _pull(capsys, "org/m-GGUF")
    assert code == 0, err
    assert [(r["kind"], r["files"]) for r in rows] == [("model", ["m-Q4_K_M.gguf"]), ("sidecar", ["eagle3-m-Q8_0.gguf"])]
    code, rows, err = _pull(capsys, "org/m-GGUF:Q8_0", "--no-draft")
    assert code == 0 and [r["kind"] for r in rows] == ["model"]


def test_names_that_are_not_pulled_are_one_line_errors(hub, capsys):
    for name, words in (("ollama:llama3.2", "pulled by ollama"), ("homespec-eagle3.1-smollm2-135m", "ships with homespec"),
                        ("not-a-head", "neither a catalogue head")):
        code = main(["pull", name])
        err = capsys.readouterr().err
        assert code == 2 and words in err and err.startswith("error: ") and "Traceback" not in err


def test_a_pulled_head_pairs_with_its_model_at_run_time(hub, capsys, tmp_path):
    from shaped_models import shaped_gguf

    from homespec.sources.pairing import pair

    model = shaped_gguf(tmp_path / "Llama-3.1-8B-Instruct-Q4_0.gguf", name="Llama 3.1 8B Instruct", n_layer=32,
                        n_embd=4096, n_vocab=128256)
    assert pair(model).note.endswith("homespec pull eagle3-llama3.1-8b")
    code, rows, err = _pull(capsys, "redhat-eagle3-llama3.1-8b")
    assert code == 0, err
    p = pair(model)
    assert (p.entry, p.where, str(p.head)) == ("redhat-eagle3-llama3.1-8b", "hf-cache", rows[0]["path"])
    assert main(["models", "--json"]) == 0
    heads = [r for r in json.loads(capsys.readouterr().out) if r["kind"] == "head"]
    assert {"name": "redhat-eagle3-llama3.1-8b", "pairs_with": "llama-3.1-8b", "source": "hf-cache"}.items() <= \
        next(h for h in heads if h["source"] == "hf-cache").items()


def test_ctrl_c_mid_pull_keeps_the_part_and_the_next_pull_resumes(hub, tmp_path):
    """A real SIGINT to `homespec pull` while the weights arrive, then the same command again."""
    hub.stall_once.add("model.safetensors")
    hub.release.clear()
    argv = [sys.executable, "-m", "homespec", "pull", "redhat-eagle3-qwen3-8b"]
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_DOWNLOAD_TIMEOUT": "300"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    served = hub.repos[QWEN].files["model.safetensors"]
    partial = (tmp_path / "hub" / f"models--{QWEN.replace('/', '--')}" / "blobs" /
               f"{hashlib.sha256(served.read_bytes()).hexdigest()}.incomplete")
    err = interrupt_in_stall(proc, hub, partial)  # once the first chunk is on disk
    assert proc.returncode == 130, err
    kept = partial.stat().st_size
    assert 0 < kept < served.stat().st_size and "resumes on the next run" in err
    hub.log.clear()
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    gets = [h for h in _gets(hub) if h.path.endswith("model.safetensors")]
    assert [h.range for h in gets] == [f"bytes={kept}-"] and gets[0].sent == served.stat().st_size - kept
