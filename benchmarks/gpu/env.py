"""What homespec needs on a machine it did not set up (the GPU machine of scripts/gpu_check.sh).

Checks, without importing homespec's heavy parts: the Python version; every runtime dependency
in pyproject.toml plus what the GPU steps use (torch with CUDA, triton, pytest and its plugins);
the toolchain (nvcc, cmake, ninja). A distribution that is *missing* is installed from a carried
wheelhouse (`--wheels DIR`, pure-Python wheels made by `gpu_check.sh prepare`) into `--target
DIR` with pip's --no-index --no-deps; nothing already present is replaced unless `--force`
names it, and torch / triton never are. Then it checks again and names precisely what is still
missing. Exit 0 when everything required is there, 1 otherwise.

    python benchmarks/gpu/env.py --wheels .gpu-carry/call1/wheels --target /tmp/homespec-gpu/site --json env.json

Beside the packages it records what the report names the run by: nvidia-smi's view of the GPU and
`homespec probe --json` (this CPU's instruction sets).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[2]
# distribution -> module it provides, where the two names differ
MODULES = {"nvidia-ml-py": "pynvml", "pytest-timeout": "pytest_timeout", "llama-cpp-python": "llama_cpp"}
# what the GPU steps use besides the runtime dependencies: (distribution, minimum, required?)
# (llama-cpp-python is not among them: the check builds it there, from the source it carries)
EXTRA = (("torch", "2.4", True), ("triton", "3.0", False), ("pytest", "8", True), ("pytest-timeout", "2", True),
         ("hypothesis", "6", False), ("diskcache", "5", True))  # diskcache: what llama-cpp-python imports
NEVER_INSTALL = frozenset({"torch", "triton"})  # the machine's own builds (CUDA) must stay
# runtime dependencies of `homespec serve` alone: no GPU step imports them (they need pydantic's
# compiled core, which a pure-Python wheelhouse cannot carry), so their absence is only reported
SERVE_ONLY = frozenset({"fastapi", "uvicorn"})
TOOLS = (("nvcc", ["nvcc", "--version"]), ("cmake", ["cmake", "--version"]), ("ninja", ["ninja", "--version"]))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[tuple[str, str, bool]]:
    """(distribution, minimum version, required) for homespec's runtime and the GPU steps."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = []
    for spec in deps:
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(?:>=\s*([0-9][0-9A-Za-z.]*))?", spec)
        if m:
            out.append((m.group(1), m.group(2) or "0", _norm(m.group(1)) not in SERVE_ONLY))
    return out + [e for e in EXTRA if _norm(e[0]) not in {_norm(n) for n, _, _ in out}]


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:4])


def probe_dist(name: str, minimum: str) -> dict:
    """Installed version, whether its module imports, and whether it meets `minimum`."""
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        version = None
    module = MODULES.get(_norm(name), _norm(name).replace("-", "_"))
    try:
        importlib.import_module(module)
        error = None
    except Exception as e:  # a broken install is as missing as an absent one
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    status = "ok"
    if error is not None:
        status = "missing"
    elif version is not None and _version_key(version) < _version_key(minimum):
        status = "older"
    return {"name": name, "module": module, "version": version, "minimum": minimum, "status": status, "error": error}


def probe_torch() -> dict:
    try:
        import torch
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    info = {"version": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, capability=f"{props.major}.{props.minor}", memory_bytes=props.total_memory,
                    multiprocessors=props.multi_processor_count)
    return info


def probe_tools() -> dict:
    out = {}
    for name, cmd in TOOLS:
        path = shutil.which(cmd[0])
        line = None
        if path:
            try:
                text = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
                line = text[-1] if name == "nvcc" and text else (text[0] if text else "")
            except (OSError, subprocess.TimeoutExpired) as e:
                line = f"failed: {e}"
        out[name] = {"path": path, "version": line}
    return out


def probe_gpu() -> dict:
    """nvidia-smi's name, driver, memory, clocks and power limit of each GPU (read only)."""
    fields = "name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    rows = [dict(zip(fields.split(","), (x.strip() for x in line.split(",")))) for line in out.stdout.splitlines() if line]
    return {"gpus": rows} if out.returncode == 0 else {"error": out.stderr.strip()[-300:]}


def probe_host() -> dict:
    """`homespec probe --json`: this machine's CPU and its instruction sets (an AMX Xeon: docs/backends.md)."""
    try:
        out = subprocess.run([sys.executable, "-m", "homespec", "probe", "--json"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr.strip()[-300:]}
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        return {"error": str(e)}


def probe_cli() -> dict:
    """Whether `python -m homespec --help` starts here (the benches need the CLI: typer and rich)."""
    proc = subprocess.run([sys.executable, "-m", "homespec", "--help"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return {"ok": proc.returncode == 0, "exit": proc.returncode, "stderr_tail": last}


def wheel_for(name: str, wheels: Path | None) -> Path | None:
    if wheels is None or not wheels.is_dir():
        return None
    want = _norm(name).replace("-", "_")
    for w in sorted(wheels.glob("*.whl")):
        if _norm(w.name.split("-")[0]).replace("-", "_") == want:
            return w
    return None


def install(names: Sequence[str], wheels: Path, target: Path) -> list[dict]:
    """pip install --no-index --no-deps --target: only the given distributions' carried wheels."""
    done = []
    files = []
    for n in names:
        w = wheel_for(n, wheels)
        if _norm(n) in NEVER_INSTALL or w is None:
            done.append({"name": n, "installed": False, "why": "never replaced" if w else "no wheel carried"})
        else:
            files.append(str(w))
            done.append({"name": n, "installed": True, "wheel": w.name})
    if files:
        target.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--upgrade", "--target", str(target), *files]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            for d in done:
                if d["installed"]:
                    d.update(installed=False, why=f"pip failed: {proc.stderr.strip().splitlines()[-1:]}")
    return done


def report(dists: list[dict], required: dict[str, bool], torch_info: dict, need_cuda: bool) -> list[str]:
    """The one-line problems that stop the GPU steps (empty: good to go)."""
    problems = []
    for d in dists:
        if d["status"] == "missing" and required[d["name"]]:
            problems.append(f"{d['name']}>={d['minimum']} is missing ({d['error']}); carry its wheel in the wheelhouse")
    if need_cuda and not torch_info.get("cuda_available"):
        problems.append(f"torch sees no CUDA device ({torch_info.get('error') or 'torch ' + str(torch_info.get('version'))})")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=None, help="wheelhouse of pure-Python wheels to install missing ones from")
    ap.add_argument("--target", type=Path, default=None, help="directory to install into (put it on PYTHONPATH)")
    ap.add_argument("--force", default="", help="comma list of distributions to install from the wheelhouse even if present")
    ap.add_argument("--no-cuda", action="store_true", help="do not require a CUDA device (the CPU dry run)")
    ap.add_argument("--json", dest="json_file", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.target is not None and str(args.target) not in sys.path:
        sys.path.insert(0, str(args.target))
    reqs = requirements()
    required = {n: r for n, _, r in reqs}
    dists = [probe_dist(n, v) for n, v, _ in reqs]
    forced = {_norm(f) for f in args.force.split(",") if f.strip()}
    # an older one stays: replacing it (typer 0.27 -> 0.29) can pull in what the machine lacks (pydantic)
    todo = [d["name"] for d in dists if d["status"] == "missing" or _norm(d["name"]) in forced]
    installed = []
    if todo and args.wheels is not None and args.target is not None:
        installed = install(todo, args.wheels, args.target)
        importlib.invalidate_caches()
        dists = [probe_dist(n, v) for n, v, _ in reqs]
    torch_info = probe_torch()
    problems = report(dists, required, torch_info, need_cuda=not args.no_cuda)
    cli = probe_cli()
    warnings = [] if cli["ok"] else [f"`python -m homespec --help` fails ({cli['stderr_tail']}): the bench steps will too"]
    warnings += [f"{d['name']} {d['version']} is older than homespec's >={d['minimum']}" for d in dists if d["status"] == "older"]
    result = {"python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
              "cpus": os.cpu_count(), "dists": dists, "installed": installed, "torch": torch_info, "tools": probe_tools(),
              "nvidia_smi": probe_gpu(), "host": probe_host(), "cli": cli, "problems": problems, "warnings": warnings}
    if args.json_file:
        args.json_file.write_text(json.dumps(result, indent=2) + "\n")
    for d in dists:
        print(f"  {d['name']:<18} {d['version'] or '-':<14} {d['status']}{'' if d['status'] == 'ok' else ' (need >=' + d['minimum'] + ')'}")
    for i in installed:
        print(f"  installed {i['name']} from {i.get('wheel')}" if i["installed"] else f"  could not install {i['name']}: {i['why']}")
    print(f"  torch {torch_info.get('version')} cuda {torch_info.get('cuda_build')} device {torch_info.get('device', '-')}")
    for g in result["nvidia_smi"].get("gpus", []):
        print("  nvidia-smi: " + ", ".join(f"{k} {v}" for k, v in g.items()))
    for name, t in result["tools"].items():
        print(f"  {name:<6} {t['version'] or 'not found'}")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if problems:
        print("hint: run `bash scripts/gpu_check.sh prepare` on the CPU machine and carry .gpu-carry/call1", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
