"""A plan as the command line that serves it with another engine: llama-server or vLLM.

A printed command runs as printed, or its notes say what it still needs (a GGUF to download or convert,
a head to train, a plan that does not fit): they are printed as `# ` lines above the command and as
warnings on stderr. A plan the engine cannot run at all (EXL2 weights) is refused with the fix.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from homespec.errors import UsageError
from homespec.plan.emit_remote import (ray_commands, remotes, rpc_flags, rpc_notes, rpc_server_commands,
                                       vllm_parallel_flags)
from homespec.plan.fit import Plan
from homespec.plan.render import verdict_line
from homespec.plan.vllm_kv import DEFAULT_UTILIZATION, vllm_kv
from homespec.sources.names import HubRef, parse
from homespec.sources.pick import split_info
from homespec.types import DraftSpec, ModelSpec
from homespec.userfiles import existing

TARGETS = ("llama-server", "vllm")

# Every flag the llama-server command can carry. tests/plan/test_plan_emit.py checks them against
# tests/data/llama_server_flags.txt, the flags of llama.cpp's common/arg.cpp as vendored in
# llama-cpp-python 0.3.36 (where --draft-max is removed in favour of --spec-draft-n-max).
LLAMA_SERVER_FLAGS = ("-m", "--model-url", "-c", "-ngl", "-ub", "-fa", "--cache-type-k", "--cache-type-v",
                      "--tensor-split", "--rpc", "--n-cpu-moe", "--cpu-moe", "--swa-full", "-np", "--spec-draft-model",
                      "--spec-draft-ngl", "--spec-draft-n-max", "--spec-type")
VLLM_FLAGS = ("--tokenizer", "--max-model-len", "--tensor-parallel-size", "--pipeline-parallel-size",
              "--distributed-executor-backend", "--enable-expert-parallel", "--max-num-seqs", "--kv-cache-dtype",
              "--gpu-memory-utilization", "--speculative-config")

UNQUANTISED = ("F32", "F16", "BF16")
GGUF_PLUGIN = ("vLLM reads GGUF weights only through the vllm-gguf-plugin (`pip install vllm-gguf-plugin`; "
               "experimental, single-file GGUFs)")


@dataclass(frozen=True, slots=True)
class Emitted:
    """The command for one engine, and what must happen before it runs as printed."""

    target: str
    command: str
    notes: tuple[str, ...] = ()
    info: tuple[str, ...] = ()  # what the engine will make of the plan (vLLM's KV capacity), not a to-do
    kv_capacity: dict | None = None
    # A plan over several machines: (machine, command) to run there first (ggml-rpc-server, ray start).
    remote_commands: tuple[tuple[str, str], ...] = ()

    def text(self) -> str:
        head = "".join(f"# {n}\n" for n in (*self.notes, *self.info))
        if not self.remote_commands:
            return head + self.command
        first = "".join(f"# on {where}:\n{cmd}\n" for where, cmd in self.remote_commands)
        return head + first + "# then, on this machine:\n" + self.command

    def as_json(self) -> dict:
        out = {"target": self.target, "command": self.command, "notes": list(self.notes)}
        if self.remote_commands:
            out["remote_commands"] = [{"machine": w, "command": c} for w, c in self.remote_commands]
        return out | ({"info": list(self.info), "kv_capacity": self.kv_capacity} if self.info else {})


def emit(plan: Plan, target: str, model_arg: str | None = None, draft_arg: str | None = None, *,
         gpu_memory_utilization: float = DEFAULT_UTILIZATION) -> Emitted:
    """The `target` command for `plan`; `model_arg`/`draft_arg` are the user's --model/--draft spellings;
    `gpu_memory_utilization` the share of each GPU vLLM takes (its KV capacity is reported at it)."""
    if target not in TARGETS:
        raise UsageError(f"unknown --emit target '{target}'", hint="use --emit llama-server or --emit vllm")
    notes: list[str] = []
    if not plan.fits:
        notes.append(f"the plan does not fit, so this command cannot load as planned: {verdict_line(plan)}")
    if target == "llama-server":
        cmd, more = _llama_server(plan, model_arg, draft_arg)
        return Emitted(target, shlex.join(cmd), tuple(notes + more + rpc_notes(plan)),
                       remote_commands=rpc_server_commands(plan))
    if not 0.05 <= gpu_memory_utilization <= 1.0:
        raise UsageError(f"--gpu-memory-utilization {gpu_memory_utilization:g} is out of range",
                         hint="give the share of each GPU vLLM may use, between 0.05 and 1 (vLLM's default 0.9)")
    cmd, more = _vllm(plan, model_arg, draft_arg)
    if gpu_memory_utilization != DEFAULT_UTILIZATION:
        cmd[3:3] = ["--gpu-memory-utilization", f"{gpu_memory_utilization:g}"]
    kv = vllm_kv(plan, gpu_memory_utilization)
    info = (kv.line(),) if kv is not None else ()
    ray = ray_commands(plan) if remotes(plan) else ()
    return Emitted(target, shlex.join(cmd), tuple(notes + more), info, kv.as_json() if kv is not None else None, ray)


# --- llama-server ------------------------------------------------------------------------------

def _llama_server(plan: Plan, model_arg: str | None, draft_arg: str | None) -> tuple[list[str], list[str]]:
    s = plan.settings
    flag, model, notes = _gguf_target(plan.model, model_arg)
    # -c is the context of all slots together: -np N slots of n_ctx each (llama-context.cpp n_ctx_seq)
    cmd = ["llama-server", flag, model, "-c", str(s.n_ctx * s.n_seq), "-ngl", str(s.n_gpu_layers),
           "-ub", str(s.n_ubatch), "-fa", "on" if s.flash_attn else "off", "--cache-type-k", s.type_k,
           "--cache-type-v", s.type_v]
    if len(s.layer_split) > 1:
        cmd += ["--tensor-split", ",".join(str(n) for n in s.layer_split)]
    cmd += rpc_flags(plan)  # other machines' GPUs: first in llama.cpp's device order, as in the split
    cmd += _family_flags(plan)
    d = plan.draft
    if d is not None and d.kind == "mtp":
        # the target's own MTP layers: no draft file (common/common.cpp loads them with load_mtp)
        cmd += ["--spec-draft-n-max", str(s.draft_depth), "--spec-type", "draft-mtp"]
    elif d is not None:
        path, more = _gguf_draft(d, draft_arg, plan.model)
        notes += more
        cmd += ["--spec-draft-model", path, "--spec-draft-ngl", "99" if plan.machine.gpus else "0",
                "--spec-draft-n-max", str(s.draft_depth),
                "--spec-type", "draft-simple" if d.kind == "model" else "draft-eagle3"]
    return cmd, notes


def _family_flags(plan: Plan) -> list[str]:
    """--n-cpu-moe / --cpu-moe for experts kept in RAM, --swa-full, -np for several sequences."""
    s, m = plan.settings, plan.model
    out: list[str] = []
    k = s.n_cpu_moe or 0
    if m.is_moe and k and plan.machine.gpus:
        out += ["--cpu-moe"] if k >= m.n_layer else ["--n-cpu-moe", str(k)]
    if s.swa_full and m.swa_layers:
        out.append("--swa-full")
    if s.n_seq > 1:
        out += ["-np", str(s.n_seq)]
    return out


def _is_exl2(m: ModelSpec) -> bool:
    return m.format == "exl2" or (m.quant or "").upper().startswith("EXL2")


def _gguf_target(m: ModelSpec, model_arg: str | None) -> tuple[str, str, list[str]]:
    """(-m or --model-url, the GGUF, notes) for llama-server; EXL2 weights are refused."""
    if _is_exl2(m):
        again = f"`homespec plan --model {m.family}-q4 --emit llama-server`" if m.family else \
            "`homespec plan --model FILE.gguf --emit llama-server` with a GGUF of this model"
        raise UsageError(f"llama-server cannot run {m.name}: it loads GGUF files, not EXL2 weights",
                         hint=f"plan a GGUF quant instead, e.g. {again}")
    if m.format == "gguf":
        if (hf := _hub_repo_tag(model_arg, m.source)) is not None:
            return "-hf", hf, []
        src = _as_given(model_arg, m.source)
        return ("--model-url" if "://" in src else "-m"), src, []
    file, note = _gguf_to_get(m)
    return "-m", file, [note]


def _hub_repo_tag(arg: str | None, resolved: str) -> str | None:
    """`org/repo:TAG` for llama-server's -hf when --model named a hub repo (not one file): homespec
    picks the file by llama.cpp's own rule (homespec.sources.pick), so -hf fetches the file planned."""
    ref = parse(arg) if arg and existing(arg) is None else None
    if not isinstance(ref, HubRef) or ref.file is not None or ref.revision != "main":
        return None
    info = split_info(resolved.rsplit("/", 1)[-1])
    tag = ref.tag or (info.tag if info is not None else "")
    return f"{ref.repo}:{tag.upper()}" if tag else ref.repo


def _as_given(arg: str | None, resolved: str) -> str:
    """The user's spelling of a path when it names the very file or directory that was read (a relative
    path stays relative); else the resolved one (a directory's one GGUF; `~`, which a quoted word keeps)."""
    if arg and not arg.startswith("~") and Path(arg).exists() and Path(arg).resolve() == Path(resolved).resolve():
        return arg
    return resolved


def _gguf_to_get(m: ModelSpec) -> tuple[str, str]:
    """A placeholder GGUF name for a catalogue or Hugging Face model, and what makes that file."""
    quant = m.quant or "F16"
    if m.format == "hf":
        folder = str(Path(m.source).parent if m.source.endswith(".json") else Path(m.source))
        file = f"{Path(folder).name}-{quant}.gguf"
        return file, (f"{file} is not made yet: convert {folder} with llama.cpp's convert_hf_to_gguf.py"
                      + ("" if quant in UNQUANTISED else f", then llama-quantize it to {quant}"))
    file = f"{m.family or m.name}-{quant}.gguf"
    repo = _hf_repo(m.source)
    return file, f"{file} is a placeholder: download a {quant} GGUF of {repo or m.name} and pass its path"


def _gguf_draft(d: DraftSpec, draft_arg: str | None, target: ModelSpec) -> tuple[str, list[str]]:
    """The draft GGUF for --spec-draft-model, and what must happen first when there is none yet."""
    if d.kind == "model":
        if d.model is not None and _is_exl2(d.model):
            raise UsageError(f"llama-server cannot run the draft {d.name}: it is EXL2, not GGUF",
                             hint="pass a GGUF draft model with --draft FILE.gguf")
        if d.model is not None and d.model.format != "gguf":
            file, note = _gguf_to_get(d.model)
            return file, ["draft: " + note]
        return _as_given(draft_arg, d.source), []
    if _is_gguf(d.source):
        if "://" in d.source:
            name = Path(d.source.split("?")[0]).name
            return name, [f"download the draft head {d.source} to {name} first (llama-server reads the draft from a file)"]
        return _as_given(draft_arg, d.source), []
    file = f"{d.name}.gguf"
    where = d.source if Path(d.source).is_dir() else (_head_repo(d.source) or "")
    tgt = target.source if target.format == "gguf" and "://" not in target.source else "TARGET.gguf"
    if where:
        get = "" if Path(where).is_dir() else "download it and "
        head_dir = where if Path(where).is_dir() else "HEAD_DIR"
        export = f"`homespec draft export {head_dir} --format gguf --target {tgt} --out {file}`"
        if d.kind == "eagle3":
            return file, [f"{file} is not made yet: llama-server needs the EAGLE-3 head {where} as a GGUF; {get}"
                          f"export it with {export}"]
        return file, [f"{file} is not made yet: llama-server needs the {d.kind} head {where} as a GGUF; {get}export "
                      f"it with {export}; it runs in the llama-server scripts/build_llamacpp_tools.sh builds "
                      "(homespec's EAGLE-3.1 patch), another llama-server needs its twin (add --eagle3-twin)"]
    return file, [f"{file} does not exist: llama-server needs a trained head for {target.name} as a GGUF (arch "
                  f"eagle3); `homespec draft train` trains one and `homespec draft export HEAD --format gguf` writes it"]


def _is_gguf(source: str) -> bool:
    return source.split("?")[0].lower().endswith(".gguf") or (Path(source).is_file() and _gguf_magic(source))


def _gguf_magic(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _hf_repo(source: str) -> str | None:
    """A model's repo: "https://huggingface.co/org/repo/blob/main/config.json" or "org/repo — ..." -> "org/repo"."""
    m = re.search(r"huggingface\.co/([\w.-]+/[\w.-]+)", source)
    return m.group(1) if m else _head_repo(source)


def _head_repo(source: str) -> str | None:
    """A catalogue head's own repo, which leads its source ("org/repo — https://..."); a URL further on
    may name the target's repo instead."""
    m = re.match(r"([\w.-]+/[\w.-]+)(\s|$)", source)
    return m.group(1) if m and not Path(source).exists() else None


# --- vLLM --------------------------------------------------------------------------------------

def _vllm(plan: Plan, model_arg: str | None, draft_arg: str | None) -> tuple[list[str], list[str]]:
    s = plan.settings
    model, extra, notes = _vllm_target(plan.model, model_arg)
    cmd = ["vllm", "serve", model, *extra, "--max-model-len", str(s.n_ctx)]
    if remotes(plan):
        flags, more = vllm_parallel_flags(plan)
        cmd += flags
        notes += more
    elif len(plan.machine.gpus) > 1:
        cmd += ["--tensor-parallel-size", str(len(plan.machine.gpus))]
        if plan.model.is_moe:
            cmd.append("--enable-expert-parallel")  # experts spread over the GPUs, attention tensor-parallel
    if s.n_seq > 1:
        cmd += ["--max-num-seqs", str(s.n_seq)]
    if plan.model.is_moe and s.n_cpu_moe:
        notes.append("vLLM keeps every expert on the GPUs: this plan's experts in RAM (--n-cpu-moe) have no "
                     "vLLM equivalent, so it needs more GPU memory than planned")
    if s.type_k not in ("f16", "bf16", "f32"):
        # vLLM's KV cache is 16-bit or fp8: a 4/5-bit llama.cpp cache has no equal there
        cmd += ["--kv-cache-dtype", "fp8"]
        if s.type_k != "q8_0":
            notes.append(f"vLLM has no {s.type_k} KV cache; fp8 takes more memory than this plan's KV items")
    d = plan.draft
    if d is not None and d.kind == "mtp":
        spec = {"method": "mtp", "num_speculative_tokens": s.draft_depth}
        cmd += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    elif d is not None:
        head, more = _vllm_draft(d, draft_arg, plan.model)
        notes += more
        spec = {"method": "draft_model" if d.kind == "model" else "eagle3", "model": head,
                "num_speculative_tokens": s.draft_depth}
        cmd += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return cmd, notes


def _vllm_target(m: ModelSpec, model_arg: str | None) -> tuple[str, list[str], list[str]]:
    """(the model vLLM serves, extra flags, notes): the unquantised repo or directory, or a GGUF with the
    plan's own quantisation (vLLM has no on-the-fly quantisation to llama.cpp's types)."""
    if _is_exl2(m):
        again = f"--model {m.family}-q4 (GGUF) or --model {m.family}-f16" if m.family else "a GGUF or F16 model"
        raise UsageError(f"vLLM cannot run {m.name}: it has no loader for EXL2 weights",
                         hint=f"plan {again} and emit that")
    quant = (m.quant or "F16").upper()
    repo = _hf_repo(m.source)
    if m.format == "gguf":
        src = _as_given(model_arg, m.source)
        note = GGUF_PLUGIN + "; pass --tokenizer with the base model's Hugging Face repo (vLLM's own GGUF tokenizer " \
                             "conversion is slow)"
        return src, [], [note]
    if quant in UNQUANTISED:
        if m.format == "hf":
            return str(Path(m.source).parent if m.source.endswith(".json") else m.source), [], []
        return repo or m.name, [], ([] if repo else [f"{m.name}: no Hugging Face repo is known; pass its path"])
    file, note = _gguf_to_get(m)
    tok = str(Path(m.source).parent) if m.format == "hf" else repo
    return file, (["--tokenizer", tok] if tok else []), [note, GGUF_PLUGIN]


def _vllm_draft(d: DraftSpec, draft_arg: str | None, target: ModelSpec) -> tuple[str, list[str]]:
    if d.kind == "model":
        if d.model is not None and d.model.format == "catalogue":
            quant = (d.model.quant or "F16").upper()
            lost = [] if quant in UNQUANTISED else [
                f"the draft model is served from its unquantised repo (the plan counted {quant} weights)"]
            return _hf_repo(d.model.source) or d.name, lost
        return _as_given(draft_arg, d.source), []
    if Path(d.source).is_dir():
        return _as_given(draft_arg, d.source), []
    if _is_gguf(d.source):
        return d.source, ["vLLM reads EAGLE-3 heads in their checkpoint layout (config.json + safetensors), "
                          "not GGUF: pass the head's directory"]
    repo = _head_repo(d.source)
    if repo:
        return repo, []
    out = f"./{d.name}"
    return out, [f"{out} does not exist: pass a trained head for {target.name} with --draft DIR, or train one "
                 f"with `homespec draft train --out {out}`"]
