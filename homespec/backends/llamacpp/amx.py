"""Whether models load with llama.cpp's extra buffer types (AMX, CPU_REPACK), decided once per build.

llama.cpp repacks weights for its fastest CPU kernels into extra buffer types at load: `AMX` on
Intel CPUs with AMX when the build has its kernels, `CPU_REPACK` for the AVX2 / AVX-512 / ARM
layouts. On virtualised Sapphire / Granite Rapids Xeons the AMX kernels segfault in the first
decode (llama.cpp #20824); loading with `llama_model_params.use_extra_bufts = false` avoids them.
`scripts/setup.sh` builds without AMX when its smoke test crashes, so a homespec-built library
never needs this; a llama-cpp-python the user built is checked here, once:

* `HOMESPEC_LLAMA_AMX=off` -> never use the extra buffers; `on` -> always (no check);
* a build whose system info has no `AMX_INT8 = 1` -> use them (nothing to fear);
* else the verdict recorded for this library file on this CPU (a pass from setup, or an earlier
  check); with none, the smoke test runs in a child (homespec.backends.llamacpp.smoke), and its
  verdict is recorded under the user's cache directory. A crash -> load without them, and say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from homespec.atomic import write_text
from homespec.backends.llamacpp.exports import missing_entry_points, runs_eagle31
from homespec.backends.llamacpp.smoke_check import check_build
from homespec.errors import HomespecError
from homespec.hardware.isa import amx_choice, installed_variant

UPSTREAM = "llama.cpp #20824"

_decided: dict[str, bool] = {}  # library id -> allowed, for this process



def system_info(ll: Any) -> str:
    """llama.cpp's own list of the instruction sets its CPU backend was built with and found."""
    raw = ll.llama_print_system_info()
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def build_features(info: str) -> dict[str, bool]:
    """{"AVX2": True, "AMX_INT8": False, ...} from system info's `NAME = 0|1` pairs."""
    out: dict[str, bool] = {}
    for part in info.replace("\n", "|").split("|"):
        name, eq, val = part.partition("=")
        if eq and val.strip() in ("0", "1"):
            out[name.strip().split(":")[-1].strip()] = val.strip() == "1"
    return out


def uses_amx(info: str) -> bool:
    return build_features(info).get("AMX_INT8", False)


def library_file(ll: Any) -> str:
    """The shared library llama_cpp loaded (libllama)."""
    lib = getattr(getattr(ll, "llama_cpp", ll), "_lib", None)
    return os.path.realpath(getattr(lib, "_name", "") or "")


def library_id(ll: Any) -> str:
    """One build on one CPU: the library's path, size and time, and the CPU's flags."""
    path = library_file(ll)
    try:
        st = os.stat(path)
        stamp = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        stamp = path
    return hashlib.sha256(f"{stamp}|{cpu_flags_line()}".encode()).hexdigest()[:20]


def cpu_flags_line() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


# --- the verdict store --------------------------------------------------------------------------


def verdict_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "homespec" / "llama-checks"


def read_verdict(lib_id: str) -> dict | None:
    try:
        doc = json.loads((verdict_dir() / f"{lib_id}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("outcome") in ("pass", "crash", "wrong") else None


def write_verdict(lib_id: str, result: Any, library: str) -> dict:
    doc = {**asdict(result), "library": library, "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        write_text(verdict_dir() / f"{lib_id}.json", json.dumps(doc, indent=2) + "\n")
    except OSError:
        pass  # an unwritable cache only means checking again next time
    return doc


def record_installed(result: Any) -> None:
    """Setup's smoke test passed (or crashed) for the library now installed: remember it."""
    # numpy via lib: `homespec probe` imports this module and reads the build in a child
    from homespec.backends.llamacpp.lib import import_llama_cpp

    ll = import_llama_cpp()
    write_verdict(library_id(ll), result, library_file(ll))


# --- the decision -------------------------------------------------------------------------------


def extra_bufts_allowed(ll: Any) -> bool:
    """Load models with llama.cpp's extra buffer types? Decided once per process and build."""
    choice = amx_choice()
    if choice != "auto":
        return choice == "on"
    lib_id = library_id(ll)
    if lib_id not in _decided:
        _decided[lib_id] = decide(ll, system_info(ll), lib_id)
    return _decided[lib_id]


def decide(ll: Any, info: str, lib_id: str) -> bool:
    """The check itself: trust a build without AMX, else its recorded verdict, else test it now."""
    if not uses_amx(info):
        return True
    verdict = read_verdict(lib_id)
    if verdict is None:
        print("homespec: checking once that this llama.cpp build's AMX kernels work here", file=sys.stderr)
        result = check_build()
        if result.outcome == "error":
            warn(f"could not check this build's AMX kernels ({result.detail})")
            return False
        verdict = write_verdict(lib_id, result, library_file(ll))
    if verdict["outcome"] == "pass":
        return True
    what = f"crash ({verdict.get('signal') or 'a signal'})" if verdict["outcome"] == "crash" else "decode wrong tokens"
    if verdict.get("without_extra") in ("crash", "wrong"):
        # not AMX: the build fails without its extra buffers too; a clean error beats a segfault
        raise HomespecError(
            f"this llama.cpp build ({library_file(ll)}) fails its smoke test here with and without AMX: "
            f"it would {what} in the first decode",
            hint="rebuild it with `bash scripts/setup.sh`; a CUDA build may clash with the torch loaded beside it "
                 "(docs/gpu.md, \"What the first run found\")")
    warn(f"llama.cpp's AMX kernels {what} on this CPU ({UPSTREAM})")
    return False


def warn(cause: str) -> None:
    print(f"warning: {cause}: loading models without AMX; hint: rebuild without it with "
          "`HOMESPEC_LLAMA_AMX=off bash scripts/setup.sh`, or set HOMESPEC_LLAMA_AMX=off", file=sys.stderr)


def model_params(ll: Any) -> Any:
    """llama_model_default_params() with the extra buffer types switched off where they crash."""
    mp = ll.llama_model_default_params()
    mp.use_extra_bufts = extra_bufts_allowed(ll)
    return mp


# --- what `homespec probe` says about the installed build ---------------------------------------



def amx_status(cpu_has_amx: bool, build_has_amx: bool, choice: str, verdict: dict | None, why: str) -> str:
    """One phrase: whether AMX is on this CPU, in this build, and used."""
    if not cpu_has_amx:
        return "absent on this CPU"
    if not build_has_amx:
        return f"present, disabled in this build because {why or 'it was built without AMX'}"
    if choice == "off":
        return "present, in this build, switched off by HOMESPEC_LLAMA_AMX=off"
    if choice == "on":
        return "present, used (HOMESPEC_LLAMA_AMX=on: not checked)"
    if verdict is None:
        return "present, in this build, not yet checked (homespec checks it once, at the first load)"
    if verdict["outcome"] == "pass":
        return "present, used (its smoke test passed)"
    return f"present, in this build, not used: its kernels crash here ({UPSTREAM})"


def build_report(cpu_has_amx: bool) -> dict | None:
    """The installed llama.cpp build as `homespec probe` shows it; None when llama_cpp is missing.
    Read in a child process: loading libllama takes time and memory `probe` should not spend, and a
    broken build cannot take probe down with it."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("llama_cpp") is None:
        return None
    cmd = [sys.executable, "-m", "homespec.backends.llamacpp.amx", "--report", "1" if cpu_has_amx else "0"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"error": f"reading the build failed (exit {getattr(locals().get('proc'), 'returncode', '?')})"}


def _report_here(cpu_has_amx: bool) -> dict:
    """build_report's work, in the process that may load libllama."""
    try:
        # inside the try: a broken install is reported, not raised
        from homespec.backends.llamacpp.lib import import_llama_cpp

        ll = import_llama_cpp()
    except Exception as e:  # a broken install is reported, not raised: probe must always answer
        return {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    info = system_info(ll)
    feats = build_features(info)
    variant, why = installed_variant()
    if not Path(library_file(ll)).is_relative_to(Path(sys.prefix).resolve()):
        variant, why = "", ""  # a llama_cpp from elsewhere on the path: not the build setup noted
    choice = os.environ.get("HOMESPEC_LLAMA_AMX", "auto").strip().lower() or "auto"
    verdict = read_verdict(library_id(ll)) if uses_amx(info) else None
    return {
        "library": library_file(ll),
        "variant": variant,
        "features": {k: feats[k] for k in ("AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI", "AMX_INT8",
                                           "NEON", "DOTPROD", "MATMUL_INT8", "SVE") if k in feats},
        "amx": amx_status(cpu_has_amx, uses_amx(info), choice, verdict, why),
        "smoke_test": verdict,
        # homespec's llama.cpp patch (kernels/llamacpp/): EAGLE-3.1 heads run as they are, not as their twin
        "eagle3_1": runs_eagle31(ll.llama_cpp._lib),
        "missing_entry_points": missing_entry_points(ll.llama_cpp._lib),
    }


if __name__ == "__main__":  # python -m homespec.backends.llamacpp.amx --report 0|1 (build_report's child)
    if sys.argv[1:2] == ["--report"]:
        print(json.dumps(_report_here(sys.argv[2:3] == ["1"])))
