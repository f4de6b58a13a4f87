"""EAGLE-3.1 in homespec's llama.cpp (kernels/llamacpp/eagle3.1.patch): the installed build exports what
homespec calls, and an eagle3 GGUF made by head_gguf drafts in llama.cpp's own eagle3 graph the tokens
the torch reference head drafts from the same target features, its draft logits within fp tolerance.

Tolerance (docs/interop.md, "EAGLE-3.1 in llama.cpp"): with an f16 file the draft logits differ from the
float32 torch head's by at most 0.03 (measured 0.0046-0.0092 on logits of magnitude 10-19 for the shipped
head on 8 dev prompts x 5 steps); q8_0 by at most 0.5 (measured 0.16-0.25). torch runs in this test
process only: the conversion and llama.cpp modules never import it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from homespec.backends.llamacpp import exports
from tiny_heads import make_head_dir

ROOT = Path(__file__).resolve().parents[2]
N_LAYER, H, V = 8, 64, 49152
F16_TOL, Q8_TOL = 0.03, 0.5
TEXTS = ("The capital of France is", "def add(a, b):\n    return", "Once upon a time, there was a")


@pytest.fixture(scope="module")
def ll():
    from homespec.backends.llamacpp.lib import import_llama_cpp

    return import_llama_cpp()


def token_embd(path: Path) -> np.ndarray:
    """The target's token embeddings [V, H] float32, dequantised exactly (what llama.cpp's get_rows reads)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from homespec.formats.gguf import read_gguf_header
    from homespec.nets.config import tensor_offsets

    header = read_gguf_header(path)
    t = next(t for t in header.tensors if t.name == "token_embd.weight")
    off = tensor_offsets(header)[t.name]
    raw = np.asarray(np.memmap(path, dtype=np.uint8, mode="r")[off: off + t.n_bytes]).reshape(t.shape[1], -1)
    return dequantize(raw, GGMLQuantizationType[t.ggml_type]).reshape(t.shape[1], t.shape[0]).astype(np.float32)


def test_the_build_exports_every_entry_point_homespec_calls(ll):
    assert exports.missing_entry_points() == []
    assert exports.eagle3_features() == exports.PATCH_FEATURES
    assert exports.runs_eagle31()


def test_a_library_without_them_is_told_apart():
    """A real library that lacks every one of them (the C library): all reported missing, no features."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    assert exports.missing_entry_points(libc) == list(exports.ENTRY_POINTS)
    assert exports.eagle3_features(libc) == 0 and not exports.runs_eagle31(libc)


def test_the_smoke_test_reports_no_missing_entry_point():
    from homespec.backends.llamacpp.smoke_check import run_smoke

    result = run_smoke()
    assert result.outcome == "pass" and result.missing == (), result.line()


def test_the_marker_needs_no_torch_and_no_model():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from homespec.backends.llamacpp.exports import eagle3_features, missing_entry_points\n"
            "print(eagle3_features(), len(missing_entry_points()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.split() == [str(exports.PATCH_FEATURES), "0"], p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("dtype,tol", [("f16", F16_TOL), ("q8_0", Q8_TOL)])
def test_the_shipped_31_head_drafts_in_llamacpp_what_the_torch_head_drafts(tmp_path, smollm2_path, dtype, tol):
    """The shipped EAGLE-3.1 head on homespec's dev prompts (chat template), chains of 5."""
    from homespec.backends.llamacpp.head_convert import head_gguf
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import DEFAULT_HEAD
    from homespec.heads.check import compare_steps
    from homespec.nets.eagle3 import load_head
    from homespec.promptsets import load_prompts

    conv = head_gguf(DEFAULT_HEAD, smollm2_path, dtype=dtype, patched=True, cache_dir=tmp_path)
    assert conv.kind == "eagle3.1" and conv.window == 1024
    head = load_head(DEFAULT_HEAD, 30, 576, 49152)
    tok = load_tokenizer(str(smollm2_path))
    ids = [tok.encode(tok.chat_prompt([{"role": "user", "content": it.turns[0]}]), add_bos=False, special=True)
           for it in load_prompts("dev")[:4]]
    pairs = compare_steps(head, smollm2_path, conv.path, ids, k=5, embed=token_embd(smollm2_path))
    for p in pairs:
        assert p.torch_tokens == p.llamacpp_tokens, p
        assert p.max_abs < tol, p


@pytest.mark.slow
@pytest.mark.parametrize("fc_norm,norm_output", [(False, False), (True, False), (False, True), (True, True)])
def test_generated_heads_draft_alike_in_both(tmp_path, fc_norm, norm_output):
    """Small random heads of each kind (3.0; fc_norm alone; norm_output alone; 3.1) against a tiny
    target: chains of 4 from llama.cpp's graph and the torch head agree step for step."""
    from tiny_models import make_tiny_gguf

    from homespec.backends.llamacpp.head_convert import head_gguf
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.heads.check import compare_steps
    from homespec.nets.eagle3 import load_head

    target = make_tiny_gguf(tmp_path / "tiny.gguf", n_layer=N_LAYER, n_embd=H, seed=3)
    d, _ = make_head_dir(tmp_path / "h", "speculators", fc_norm=fc_norm, norm_output=norm_output, seed=21)
    conv = head_gguf(d, target, dtype="f16", patched=True, cache_dir=tmp_path / "c")
    head = load_head(d, N_LAYER, H, V)
    tok = load_tokenizer(str(target))
    pairs = compare_steps(head, target, conv.path, [tok.encode(t) for t in TEXTS], k=4, embed=token_embd(target))
    for p in pairs:
        assert p.torch_tokens == p.llamacpp_tokens and p.max_abs < F16_TOL, p


def test_llamacpp_drops_its_debug_lines_before_they_reach_python(smollm2_path):
    """homespec's patch (llama_homespec_log_min_level): with the level at INFO a decode's debug lines never reach
    the Python callback (each was a call into Python, ~12 a draft step); at 0 they do, as echoing them needs."""
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.llamacpp.lib import LOG, _min_level_entry_point
    from homespec.backends.settings import BackendSettings

    set_level = _min_level_entry_point()
    if set_level is None:
        pytest.skip("this llama.cpp lacks homespec's patch")
    import llama_cpp

    seen: list[int] = []
    cb = llama_cpp.llama_log_callback(lambda level, text, user: seen.append(level))
    be = LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=256, n_threads=2))
    try:
        be.prefill([1, 2, 3])
        got = {}
        for level in (2, 0):
            llama_cpp.llama_log_set(cb, None)
            set_level(level)
            seen.clear()
            be.verify([4], [-1])
            be.commit([0])
            got[level] = seen.count(1)  # ggml's debug level
        assert got[2] == 0 and got[0] > 0, got
    finally:
        LOG.reclaim()
        be.close()
