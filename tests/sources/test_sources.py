"""homespec.sources against a real hub-shaped HTTP server on 127.0.0.1 (tests/hub_server.py), with
HF_ENDPOINT pointed at it so huggingface_hub's own code path runs, and generated Ollama / LM Studio
stores in tmp dirs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from hub_server import Hub, Repo, interrupt_in_stall, served, use_hub
from homespec.cli import main
from homespec.embedded import DEFAULT_HEAD
from homespec.errors import UsageError
from homespec.sources.find import resolve_for_plan, resolve_for_run
from tiny_models import make_tiny_gguf, make_tiny_hf_dir


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def _write_llama(path: Path, split_max_tensors: int = 0) -> None:
    """A 2-layer llama GGUF, whole or split by gguf's writer into PREFIX-0000i-of-0000N.gguf parts
    (the layout of llama.cpp's gguf-split: split.no / split.count / split.tensors.count)."""
    import numpy as np
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    w.add_block_count(2), w.add_embedding_length(64), w.add_head_count(4), w.add_head_count_kv(2)
    w.add_feed_forward_length(128), w.add_context_length(2048), w.add_vocab_size(256), w.add_file_type(0)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((256, 64), dtype=np.float32))
    shapes = {"attn_q": (64, 64), "attn_k": (32, 64), "attn_v": (32, 64), "attn_output": (64, 64),
              "ffn_gate": (128, 64), "ffn_up": (128, 64), "ffn_down": (64, 128), "attn_norm": (64,), "ffn_norm": (64,)}
    for i in range(2):
        for name, shape in shapes.items():
            w.add_tensor(f"blk.{i}.{name}.weight", rng.standard_normal(shape, dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[Path, list[Path]]:
    folder = tmp_path_factory.mktemp("split")
    _write_llama(folder / "whole.gguf")
    _write_llama(folder / "m-Q4_K_M.gguf", split_max_tensors=8)
    return folder / "whole.gguf", sorted(folder.glob("m-Q4_K_M-*.gguf"))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return make_tiny_hf_dir(tmp_path_factory.mktemp("hf") / "tiny-hf")


@pytest.fixture(scope="module")
def server(tiny, split, hf_dir):
    head = {p.name: p for p in DEFAULT_HEAD.iterdir() if p.is_file()}
    hub = Hub(repos={
        "org/tiny-hf": Repo({p.name: p for p in hf_dir.iterdir() if p.is_file()} | {"README.md": Path(__file__)}),
        "org/split-GGUF": Repo({f"Q4_K_M/{p.name}": p for p in split[1]}),
        "org/tiny-GGUF": Repo({"tiny-F16.gguf": tiny, "tiny-Q4_K_M.gguf": tiny, "tiny-Q8_0.gguf": tiny,
                               "README.md": Path(__file__)}),
        "org/two-GGUF": Repo({"a-Q4_K_M.gguf": tiny, "b-Q4_K_M.gguf": tiny}),
        "org/gated-GGUF": Repo({"m-Q4_K_M.gguf": tiny}, gated=True),
        "org/huge-GGUF": Repo({"m-Q4_K_M.gguf": tiny}, claimed={"m-Q4_K_M.gguf": 2**60}),
        "org/head": Repo(head, commit="fedcba9876543210fedcba9876543210fedcba98"),
    })
    with served(hub):
        yield hub


@pytest.fixture
def hub(server, tmp_path, monkeypatch) -> Hub:
    """The server, a fresh hub cache, no token, and no stores but the ones a test builds."""
    use_hub(monkeypatch, server.url, tmp_path)
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    monkeypatch.setenv("HOMESPEC_LMSTUDIO_MODELS", str(tmp_path / "no-lmstudio"))
    server.log.clear()
    server.drop_once.clear()
    return server


def _plan_json(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(["plan", "--gpu", "none", "--draft", "none", "--json", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip().startswith("{") else None, err


# --- the hub -------------------------------------------------------------------------------------

def test_plan_reads_only_the_header_by_range(hub, tiny, capsys, tmp_path):
    code, plan, err = _plan_json(capsys, "--model", "org/tiny-GGUF")
    assert code == 0, err
    assert plan["model"]["arch"] == "llama" and plan["model"]["source"].endswith("/tiny-Q4_K_M.gguf")
    header = resolve_header_size(tiny)
    body = hub.sent("/resolve/")
    # the 1.77 MB header in growing range requests (256 KiB, 512 KiB, 1 MiB), never the 14.9 MB file
    assert header <= body <= header + 1024 * 1024 and body < tiny.stat().st_size / 4
    assert all(h.range for h in hub.log if h.method == "GET" and "/resolve/" in h.path)
    assert not list((tmp_path / "hub").rglob("*.gguf"))  # nothing downloaded
    code, plan, err = _plan_json(capsys, "--model", "org/tiny-GGUF:q8_0")
    assert code == 0, err
    assert plan["model"]["source"].endswith("/tiny-Q8_0.gguf")


def resolve_header_size(path: Path) -> int:
    from homespec.formats.gguf import read_gguf_header

    return read_gguf_header(path).data_offset


def test_a_split_model_is_planned_whole_and_downloaded_whole(hub, split, capsys):
    from homespec.formats.gguf import read_gguf_header

    whole, parts = split
    assert len(parts) == 3
    code, plan, err = _plan_json(capsys, "--model", "org/split-GGUF")
    assert code == 0, err
    assert plan["model"]["source"].endswith("/Q4_K_M/m-Q4_K_M-00001-of-00003.gguf")
    assert plan["model"]["weights_bytes"] == read_gguf_header(whole).tensor_bytes  # all three parts' tensors
    first = Path(resolve_for_run("org/split-GGUF"))
    assert sorted(p.name for p in first.parent.iterdir()) == [p.name for p in parts]
    assert all((first.parent / p.name).read_bytes() == p.read_bytes() for p in parts)


def test_a_transformers_repo_is_planned_from_its_config_and_run_from_a_snapshot(hub, hf_dir, capsys):
    code, plan, err = _plan_json(capsys, "--model", "org/tiny-hf", "--quant", "q8")
    assert code == 0 and plan["model"]["format"] == "hf" and plan["model"]["quant"] == "Q8_0", err
    fetched = {h.path.rsplit("/", 1)[-1] for h in hub.log if "/resolve/" in h.path}
    assert fetched == {"config.json"}  # the plan reads nothing else of the repo
    folder = Path(resolve_for_run("org/tiny-hf"))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    assert "README.md" not in {p.name for p in folder.iterdir()}
    assert (folder / "model.safetensors").read_bytes() == (hf_dir / "model.safetensors").read_bytes()


def test_quant_choices_are_listed_when_missing_or_ambiguous(hub, capsys):
    code, _, err = _plan_json(capsys, "--model", "org/tiny-GGUF:Q2_K")
    assert code == 2 and "org/tiny-GGUF has no Q2_K file; it has: F16, Q4_K_M, Q8_0" in err, err
    code, _, err = _plan_json(capsys, "--model", "org/two-GGUF")
    assert code == 2 and "a-Q4_K_M.gguf" in err and "b-Q4_K_M.gguf" in err and "hint: name one file" in err, err


def test_download_shows_progress_and_resumes_a_dropped_connection(hub, tiny, capsys, tmp_path):
    hub.drop_once.add("tiny-Q4_K_M.gguf")
    path = Path(resolve_for_run("org/tiny-GGUF"))
    assert path.read_bytes() == tiny.read_bytes()
    assert str(path).startswith(str(tmp_path / "hub" / "models--org--tiny-GGUF" / "snapshots"))
    gets = [h for h in hub.log if h.method == "GET" and "/resolve/" in h.path]
    # huggingface_hub writes 10 MiB chunks: the retry asks from the end of the last one written
    assert len(gets) == 2 and gets[0].range is None and gets[0].sent < tiny.stat().st_size
    resumed_at = int(gets[1].range.removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_at <= gets[0].sent and gets[1].sent == tiny.stat().st_size - resumed_at
    assert "tiny-Q4_K_M.gguf" in capsys.readouterr().err  # the progress bar on stderr
    hub.log.clear()
    assert resolve_for_run("org/tiny-GGUF") == str(path) and not hub.log  # cached: no request at all


def test_an_interrupted_download_resumes_where_it_stopped(hub, tiny):
    """Ctrl-C leaves blobs/ETAG.incomplete in the cache; the next run asks only for the rest."""
    data = tiny.read_bytes()
    blobs = Path(os.environ["HF_HUB_CACHE"]) / "models--org--tiny-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{hashlib.sha256(data).hexdigest()}.incomplete").write_bytes(data[:1_000_000])
    path = Path(resolve_for_run("org/tiny-GGUF:Q8_0"))
    assert path.read_bytes() == data
    gets = [h for h in hub.log if h.method == "GET" and "/resolve/" in h.path]
    assert [h.range for h in gets] == ["bytes=1000000-"] and gets[0].sent == len(data) - 1_000_000


def test_ctrl_c_mid_download_keeps_the_part_and_the_next_run_resumes(hub, tiny):
    """A real Ctrl-C (SIGINT) to `homespec generate` while the file arrives, then the same command again."""
    import signal
    import subprocess
    import sys

    hub.stall_once.add("tiny-Q4_K_M.gguf")
    hub.release.clear()
    argv = [sys.executable, "-m", "homespec", "generate", "--model", "org/tiny-GGUF", "--method", "none",
            "-n", "2", "-p", "hi", "--json"]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
                        # the stalled GET must hold until the Ctrl-C, not time out and resume first
                        "HF_HUB_DOWNLOAD_TIMEOUT": "300"}
    # a suite started in the background runs with SIGINT ignored, which its children inherit
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    blobs = Path(os.environ["HF_HUB_CACHE"]) / "models--org--tiny-GGUF" / "blobs"
    partial = blobs / f"{hashlib.sha256(tiny.read_bytes()).hexdigest()}.incomplete"
    err = interrupt_in_stall(proc, hub, partial)  # once the first 10 MiB chunk is on disk
    assert proc.returncode == 130, err
    kept = partial.stat().st_size
    assert 0 < kept < tiny.stat().st_size
    hub.log.clear()
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    gets = [h for h in hub.log if h.method == "GET" and "/resolve/" in h.path]
    assert [h.range for h in gets] == [f"bytes={kept}-"] and gets[0].sent == tiny.stat().st_size - kept


def test_a_bare_repo_asks_the_hub_unless_the_cache_has_its_default(hub, monkeypatch, capsys):
    """A cache holding only Q8_0 says nothing of the repo's Q4_K_M; without a network it is what there is."""
    q8 = resolve_for_run("org/tiny-GGUF:Q8_0")
    assert resolve_for_plan("org/tiny-GGUF").endswith("/tiny-Q4_K_M.gguf")  # listed: the hub's URL
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert resolve_for_plan("org/tiny-GGUF") == q8
    assert "warning: cannot reach http://127.0.0.1:9" in capsys.readouterr().err


def test_missing_and_gated_repos_are_one_line_errors(hub, capsys):
    code, _, err = _plan_json(capsys, "--model", "org/nope-GGUF")
    assert code == 2 and "error: no local path and no Hugging Face repo org/nope-GGUF" in err and "Traceback" not in err, err
    code, _, err = _plan_json(capsys, "--model", "org/tiny-GGUF/nope.gguf")
    assert code == 2 and "org/tiny-GGUF has no file nope.gguf" in err, err
    code, _, err = _plan_json(capsys, "--model", "org/gated-GGUF")  # listed, but its file answers 401
    assert code == 2 and "HTTP 401" in err and "gated repo: accept its terms" in err and "HF_TOKEN" in err, err
    code = main(["generate", "--model", "org/gated-GGUF", "--method", "none", "-n", "2", "-p", "hi"])
    err = capsys.readouterr().err
    assert code == 2 and "org/gated-GGUF/m-Q4_K_M.gguf is gated" in err and "hf auth login" in err, err


def test_the_token_opens_a_gated_repo(hub, monkeypatch, capsys, tiny):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    code, plan, err = _plan_json(capsys, "--model", "org/gated-GGUF")  # the range reads carry it
    assert code == 0 and plan["model"]["source"].endswith("/m-Q4_K_M.gguf"), err
    assert Path(resolve_for_run("org/gated-GGUF")).read_bytes() == tiny.read_bytes()


def test_a_download_larger_than_the_free_space_is_refused_before_it_starts(hub, capsys):
    code = main(["generate", "--model", "org/huge-GGUF", "--method", "none", "-n", "2", "-p", "hi"])
    err = capsys.readouterr().err
    assert code == 1 and "org/huge-GGUF/m-Q4_K_M.gguf needs 1073741824.00 GiB more" in err and "HF_HUB_CACHE" in err, err
    assert not [h for h in hub.log if h.method == "GET" and "/resolve/" in h.path]


def test_an_unreachable_hub_is_a_runtime_error(hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    code, _, err = _plan_json(capsys, "--model", "org/tiny-GGUF")
    assert code == 1 and "error: cannot reach http://127.0.0.1:9" in err and "hint:" in err, err


def test_a_draft_head_by_repo_id_is_fetched_into_the_cache(hub, capsys, smollm2_path):
    code = main(["plan", "--gpu", "none", "--json", "--model", str(smollm2_path), "--draft", "org/head"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["draft"]["kind"].startswith("eagle3")
    snap = Path(os.environ["HF_HUB_CACHE"]) / "models--org--head" / "snapshots" / "fedcba9876543210fedcba9876543210fedcba98"
    assert (snap / "config.json").is_file()
    hub.log.clear()  # a run drafts with the cached head, asking the hub nothing
    code = main(["generate", "--model", str(smollm2_path), "--draft", "org/head", "--method", "eagle3", "-n", "4",
                 "-p", "Name a colour.", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    row = json.loads(out.splitlines()[-1])
    assert row["method"] == "eagle3" and row["token_ids"] and not hub.log


# --- stores on this machine ---------------------------------------------------------------------

def _ollama_store(root: Path, model: Path, name: str = "smol", tag: str = "latest") -> Path:
    """Ollama's layout (server/images.go, types/model/name.go): a manifest naming blobs by digest."""
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    blob = root / "blobs" / f"sha256-{digest}"
    if not blob.exists():
        os.link(model, blob)
    config = b'{"model_format":"gguf"}'
    (root / "blobs" / f"sha256-{hashlib.sha256(config).hexdigest()}").write_bytes(config)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{hashlib.sha256(config).hexdigest()}", "size": len(config)},
        "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                    "size": model.stat().st_size},
                   {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 1}],
    }))
    return blob


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def stores(hub, tmp_path, monkeypatch, smollm2_path, tiny):
    ollama, lms = tmp_path / "ollama", tmp_path / "lmstudio"
    blob = _ollama_store(ollama, smollm2_path)
    (lms / "pub" / "tiny-GGUF").mkdir(parents=True)
    os.link(tiny, lms / "pub" / "tiny-GGUF" / "tiny-F32.gguf")
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.setenv("HOMESPEC_LMSTUDIO_MODELS", str(lms))
    return blob, ollama, lms


def test_models_lists_every_store_with_its_header(stores, capsys):
    blob, ollama, lms = stores
    before = _snapshot(ollama)
    resolve_for_run("org/tiny-GGUF:F16")  # one file in the hub cache
    capsys.readouterr()
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in listed if r["kind"] == "model"}
    assert set(rows) == {"ollama:smol:latest", "lmstudio:pub/tiny-GGUF/tiny-F32.gguf", "org/tiny-GGUF/tiny-F16.gguf"}
    heads = {r["name"]: r for r in listed if r["kind"] == "head"}
    assert heads["homespec-eagle3.1-smollm2-135m"]["pairs_with"] == "smollm2-135m"  # the shipped head
    smol = rows["ollama:smol:latest"]
    assert (smol["source"], smol["path"], smol["arch"], smol["quant"]) == ("ollama", str(blob), "llama", "Q4_1")
    assert rows["org/tiny-GGUF/tiny-F16.gguf"]["source"] == "hf-cache"
    assert rows["lmstudio:pub/tiny-GGUF/tiny-F32.gguf"]["quant"] == "F32"
    assert main(["models", "--json", "--gpu", "4090"]) == 0
    assert {r["verdict"] for r in json.loads(capsys.readouterr().out) if r["kind"] == "model"} == {"fits"}
    assert main(["models", "--gpu", "none"]) == 0
    table = capsys.readouterr().out
    assert "ollama:smol:latest" in table and "fits" in table
    assert _snapshot(ollama) == before  # read only


def test_plan_and_generate_run_on_store_names(stores, capsys, smollm2_path):
    blob, _, _ = stores
    code, plan, err = _plan_json(capsys, "--model", "ollama:smol")
    assert code == 0 and plan["model"]["source"] == str(blob), err
    assert resolve_for_plan("lmstudio:pub/tiny-GGUF").endswith("tiny-F32.gguf")
    code = main(["generate", "--model", "ollama:smol", "--method", "none", "-n", "4", "-p", "Hi", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    row = json.loads(out.splitlines()[-1])
    assert row["model"] == str(blob) and row["token_ids"]
    code = main(["plan", "--gpu", "none", "--model", "ollama:nothere:7b"])
    err = capsys.readouterr().err
    assert code == 2 and "no Ollama model ollama:nothere:7b" in err and "ollama pull nothere:7b" in err, err


def test_emit_names_the_repo_for_llama_server(hub, capsys):
    assert main(["plan", "--gpu", "none", "--draft", "none", "--model", "org/tiny-GGUF", "--emit", "llama-server"]) == 0
    out = capsys.readouterr().out
    assert "llama-server -hf org/tiny-GGUF:Q4_K_M " in out, out


def test_a_local_split_model_needs_its_first_part_and_every_part(split, tmp_path):
    from homespec.errors import FormatError
    from homespec.formats.gguf import read_gguf_header, read_model_header

    whole, parts = split
    assert read_model_header(parts[0]).tensor_bytes == read_gguf_header(whole).tensor_bytes
    with pytest.raises(FormatError, match="is part 2 of a split model"):
        read_model_header(parts[1])
    lone = tmp_path / parts[0].name
    lone.write_bytes(parts[0].read_bytes())
    with pytest.raises(UsageError, match="no such file"):  # the other two parts are not beside it
        read_model_header(lone)


def test_a_gguf_repo_as_draft_is_a_draft_model_read_by_range(hub, capsys, smollm2_path, tmp_path):
    code = main(["plan", "--gpu", "none", "--json", "--model", str(smollm2_path), "--draft", "org/tiny-GGUF"])
    out, err = capsys.readouterr()
    assert code == 0, err
    draft = json.loads(out)["draft"]
    assert draft["kind"] == "model" and draft["source"].endswith("/tiny-Q4_K_M.gguf")
    assert not list((tmp_path / "hub").rglob("*.gguf"))  # its header only, not a snapshot of every quant
