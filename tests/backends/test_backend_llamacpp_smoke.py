"""The llama.cpp build check: the smoke test's child, setup's rebuild decision and the run-time fallback.

Crashes here are real: HOMESPEC_SMOKE_FAULT makes the child kill itself with a signal just before its
first decode (homespec.backends.llamacpp.smoke), so the parent meets the same fate it meets on a CPU
whose AMX kernels segfault. Only the wheel build itself is replaced (by a function that notes which
variant it would install): building llama-cpp-python takes minutes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from homespec.backends.llamacpp import amx
from homespec.backends.llamacpp.smoke_check import run_smoke
from homespec.errors import HomespecError, UsageError

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private verdict store, and a clean environment for the choice."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HOMESPEC_LLAMA_AMX", raising=False)
    monkeypatch.delenv("HOMESPEC_SMOKE_FAULT", raising=False)
    amx._decided.clear()
    yield tmp_path / "cache" / "homespec" / "llama-checks"
    amx._decided.clear()


@pytest.fixture(scope="module")
def ll():
    from homespec.backends.llamacpp.lib import import_llama_cpp

    return import_llama_cpp()


# --- the child ------------------------------------------------------------------------------------


def test_smoke_test_passes_on_the_installed_build(cache):
    result = run_smoke()
    assert result.outcome == "pass", result.line()
    assert "Paris" in result.text
    assert "passed in" in result.line() and result.seconds > 0


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGILL", "SIGBUS"])
def test_a_child_killed_by_a_signal_is_a_crash(cache, monkeypatch, sig):
    monkeypatch.setenv("HOMESPEC_SMOKE_FAULT", sig)
    result = run_smoke()
    assert (result.outcome, result.signal) == ("crash", sig)
    assert sig in result.line()


def test_a_fault_of_the_extra_buffers_spares_a_load_without_them(cache, monkeypatch):
    monkeypatch.setenv("HOMESPEC_SMOKE_FAULT", "SIGSEGV@extra-bufts")
    assert run_smoke(extra_bufts=True).outcome == "crash"
    assert run_smoke(extra_bufts=False).outcome == "pass"


# --- the run-time decision --------------------------------------------------------------------------


def test_a_crashing_build_is_checked_once_recorded_and_loaded_without_amx(cache, monkeypatch, capfd, ll):
    monkeypatch.setenv("HOMESPEC_SMOKE_FAULT", "SIGSEGV@extra-bufts")
    assert amx.decide(ll, "CPU : AVX2 = 1 | AMX_INT8 = 1 |", "lib-crash") is False
    err = capfd.readouterr().err
    assert "warning: llama.cpp's AMX kernels crash (SIGSEGV) on this CPU (llama.cpp #20824)" in err
    assert "HOMESPEC_LLAMA_AMX=off" in err
    doc = json.loads((cache / "lib-crash.json").read_text())
    assert (doc["outcome"], doc["signal"], doc["without_extra"]) == ("crash", "SIGSEGV", "pass")
    # the verdict is read, not re-tested: no fault is armed now, and the answer stays the same
    monkeypatch.delenv("HOMESPEC_SMOKE_FAULT")
    assert amx.decide(ll, "AMX_INT8 = 1", "lib-crash") is False
    assert "checking once" not in capfd.readouterr().err


def test_a_build_that_crashes_without_amx_too_is_an_error_not_a_segfault(cache, monkeypatch, ll):
    monkeypatch.setenv("HOMESPEC_SMOKE_FAULT", "SIGSEGV")
    with pytest.raises(HomespecError, match="with and without AMX"):
        amx.decide(ll, "AMX_INT8 = 1", "lib-broken")
    doc = json.loads((cache / "lib-broken.json").read_text())
    assert (doc["outcome"], doc["without_extra"]) == ("crash", "crash")


def test_a_passing_build_is_recorded_and_keeps_its_buffers(cache, ll):
    assert amx.decide(ll, "AMX_INT8 = 1", "lib-pass") is True
    assert json.loads((cache / "lib-pass.json").read_text())["outcome"] == "pass"


def test_a_build_without_amx_is_not_checked(cache, ll):
    assert amx.decide(ll, "CPU : AVX2 = 1 | AMX_INT8 = 0 |", "lib-noamx") is True
    assert not (cache / "lib-noamx.json").exists()


def test_the_override_wins_and_is_checked(cache, monkeypatch, ll):
    monkeypatch.setenv("HOMESPEC_LLAMA_AMX", "off")
    assert amx.extra_bufts_allowed(ll) is False
    assert amx.model_params(ll).use_extra_bufts is False
    monkeypatch.setenv("HOMESPEC_LLAMA_AMX", "ON")
    assert amx.extra_bufts_allowed(ll) is True
    monkeypatch.setenv("HOMESPEC_LLAMA_AMX", "maybe")
    with pytest.raises(UsageError, match="HOMESPEC_LLAMA_AMX=maybe"):
        amx.extra_bufts_allowed(ll)


def test_the_backend_decodes_without_the_extra_buffers(cache, monkeypatch, smollm2_path):
    """What homespec does after a crash verdict: the same answer, from llama.cpp's plain buffers."""
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.backends.settings import BackendSettings

    monkeypatch.setenv("HOMESPEC_LLAMA_AMX", "off")
    with LlamaCppBackend(smollm2_path, BackendSettings(n_ctx=128, n_batch=64, n_ubatch=64)) as b:
        ids = b.tokenizer.encode("The capital of France is", add_bos=True)
        logits = b.prefill(ids).logits
        assert "Paris" in b.tokenizer.decode([int(logits[-1].argmax())])
        assert not any("REPACK" in line or "AMX" in line for line in b._log.lines if "buffer size" in line)


def test_the_build_features_are_read_from_system_info():
    info = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 0 | LLAMAFILE = 1 | REPACK = 1 |"
    feats = amx.build_features(info)
    assert feats["AVX2"] and feats["AVX512"] and not feats["AMX_INT8"]
    assert not amx.uses_amx(info) and amx.uses_amx(info.replace("AMX_INT8 = 0", "AMX_INT8 = 1"))


def test_the_amx_status_says_why():
    crash = {"outcome": "crash", "signal": "SIGSEGV"}
    assert amx.amx_status(False, False, "auto", None, "") == "absent on this CPU"
    assert "disabled in this build because llama.cpp's AMX kernels crash" in amx.amx_status(
        True, False, "auto", None, "llama.cpp's AMX kernels crash on this CPU (llama.cpp #20824)")
    assert "switched off by HOMESPEC_LLAMA_AMX=off" in amx.amx_status(True, True, "off", None, "")
    assert "not used: its kernels crash here" in amx.amx_status(True, True, "auto", crash, "")
    assert "used (its smoke test passed)" in amx.amx_status(True, True, "auto", {"outcome": "pass"}, "")


# --- setup's decision (scripts/lib/llama_build.sh) ---------------------------------------------------


def _setup(tmp_path, **env: str) -> tuple[int, str, list[str]]:
    """llama_install_checked with the wheel build replaced by a note of the variant it would install;
    the smoke test is the real child, in this interpreter's environment."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "installed"
    script = f"""
source scripts/lib/llama_build.sh
llama_install() {{ echo "$1" >> '{log}'; }}
llama_install_checked
"""
    full = {**os.environ, "LLAMA_PY": sys.executable, "LLAMA_VENV": str(tmp_path), "HOMESPEC_LLAMA_BUILD": "cpu",
            "XDG_CACHE_HOME": str(tmp_path / "cache"), **env}
    if "HOMESPEC_LLAMA_AMX" not in env:
        full.pop("HOMESPEC_LLAMA_AMX", None)
    p = subprocess.run(["bash", "-c", script], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)
    installed = log.read_text().split() if log.exists() else []
    return p.returncode, p.stderr, installed


x86_only = pytest.mark.skipif(platform.machine() != "x86_64", reason="builds without AMX exist on x86-64 only")


def test_setup_builds_once_when_the_smoke_test_passes(tmp_path):
    rc, err, installed = _setup(tmp_path, HOMESPEC_SMOKE_FAULT="")
    assert (rc, installed) == (0, ["cpu"]), err
    assert "setup: llama.cpp smoke test passed in" in err and "AMX" not in err


@x86_only
def test_setup_rebuilds_without_amx_when_the_build_crashes(tmp_path):
    rc, err, installed = _setup(tmp_path, HOMESPEC_SMOKE_FAULT="SIGSEGV@extra-bufts,cpu")
    assert (rc, installed) == (0, ["cpu", "cpu-noamx"]), err
    assert "setup: llama.cpp's AMX kernels crash on this CPU (llama.cpp #20824); built without AMX" in err
    assert "crashed with SIGSEGV" in err and "smoke test passed" in err


@x86_only
def test_a_second_setup_keeps_the_build_without_amx_it_chose(tmp_path):
    """Set-up is idempotent: where an earlier run replaced a crashing AMX build, the next one checks
    that build again instead of reinstalling the crashing one first."""
    (tmp_path / "homespec-llama-variant").write_text(
        "cpu-noamx\nllama.cpp's AMX kernels crash on this CPU (llama.cpp #20824)\n")
    rc, err, installed = _setup(tmp_path, HOMESPEC_SMOKE_FAULT="SIGSEGV@extra-bufts,cpu")
    assert (rc, installed) == (0, ["cpu-noamx"]), err
    assert "crashed" not in err and "smoke test passed" in err


def test_setup_fails_without_a_rebuild_when_the_crash_is_not_amx(tmp_path):
    """A child that dies with and without the extra buffers: a build without AMX would not help."""
    rc, err, installed = _setup(tmp_path, HOMESPEC_SMOKE_FAULT="SIGBUS")
    assert (rc, installed) == (1, ["cpu"]), err
    assert "and without its AMX / repack buffers too" in err
    assert "error: the llama-cpp-python build (cpu) fails its smoke test (exit 5)" in err and "hint:" in err
    assert "setup: ok" not in err


@x86_only
def test_setup_honours_the_override(tmp_path):
    rc, err, installed = _setup(tmp_path, HOMESPEC_LLAMA_AMX="off", HOMESPEC_SMOKE_FAULT="SIGSEGV@extra-bufts,cpu")
    assert (rc, installed) == (0, ["cpu-noamx"]), err
    rc, err, installed = _setup(tmp_path / "on", HOMESPEC_LLAMA_AMX="on", HOMESPEC_SMOKE_FAULT="SIGSEGV@extra-bufts,cpu")
    assert (rc, installed) == (1, ["cpu"]) and "error:" in err
    rc, err, _ = _setup(tmp_path / "bad", HOMESPEC_LLAMA_AMX="maybe")
    assert rc == 1 and "error: HOMESPEC_LLAMA_AMX=maybe" in err


# --- homespec probe ------------------------------------------------------------------------------------


def test_probe_shows_the_instruction_sets_and_the_build(cache):
    p = subprocess.run([sys.executable, "-m", "homespec", "probe", "--json"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"]})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert set(doc["cpu_isa"]) and all(isinstance(v, bool) for v in doc["cpu_isa"].values())
    build = doc["llama_cpp"]
    assert build["library"] and isinstance(build["features"], dict)
    assert build["eagle3_1"] is True and build["missing_entry_points"] == []  # set-up's patched build
    if doc["cpu_isa"].get("AMX") is False:
        assert build["amx"] == "absent on this CPU"
    text = subprocess.run([sys.executable, "-m", "homespec", "probe"], capture_output=True, text=True, timeout=120)
    assert "CPU instruction sets:" in text.stdout and "llama.cpp" in text.stdout
    assert "EAGLE-3.1 heads: run as they are" in text.stdout


# --- the patched source (scripts/lib/llama_build.sh) ---------------------------------------------------


def _bash(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"source scripts/lib/llama_build.sh\n{script}"], cwd=ROOT, text=True,
                          capture_output=True, timeout=600, env={**os.environ, **env})


def test_the_patch_hash_names_the_builds():
    import hashlib

    p = _bash("llama_patch_id")
    want = hashlib.sha256((ROOT / "kernels" / "llamacpp" / "eagle3.1.patch").read_bytes()).hexdigest()[:12]
    assert p.returncode == 0 and p.stdout.strip() == want, p.stderr


def _cached_sdist() -> Path | None:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "homespec"
    for c in (root / "sdist" / "llama_cpp_python-0.3.36.tar.gz", root / "gpu-check" / "sdist" / "llama_cpp_python-0.3.36.tar.gz"):
        if c.is_file():
            return c
    return None


@pytest.mark.skipif(_cached_sdist() is None, reason="no llama-cpp-python 0.3.36 sdist in the cache (set-up downloads it)")
def test_the_source_is_the_sdist_with_the_patch_applied(tmp_path):
    p = _bash(f"llama_source '{tmp_path}'", HOMESPEC_LLAMA_SDIST=str(_cached_sdist()))
    assert p.returncode == 0, p.stderr
    root = Path(p.stdout.strip())
    eagle3 = (root / "vendor" / "llama.cpp" / "src" / "models" / "eagle3.cpp").read_text()
    assert "llama_homespec_eagle3_features" in eagle3 and "hparams.norm_output" in eagle3
    # applied twice it does not apply: a changed pin or a stale tree is an error, not a silent success
    again = _bash(f"cd '{root}/vendor/llama.cpp' && patch -p1 -N --dry-run -s < '{ROOT}/kernels/llamacpp/eagle3.1.patch'")
    assert again.returncode != 0
    bad = tmp_path / "stale.patch"
    bad.write_text((ROOT / "kernels" / "llamacpp" / "eagle3.1.patch").read_text().replace(
        "     ml.get_key(LLM_KV_NORM_BEFORE_FC, hparams.norm_before_fc, false);", "     ml.get_key(SOMETHING_ELSE);"))
    p = _bash(f"llama_patch='{bad}'; llama_source '{tmp_path / 'stale'}'", HOMESPEC_LLAMA_SDIST=str(_cached_sdist()))
    assert p.returncode != 0 and "does not apply" in p.stderr and "hint:" in p.stderr
