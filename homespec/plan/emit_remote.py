"""The commands of a plan that spans machines: what each other machine runs first, then the main command.

llama.cpp: every other machine runs `ggml-rpc-server` (tools/rpc/rpc-server.cpp: `-H/--host`, `-p/--port`,
`-c/--cache`; it serves all its GPUs) and llama-server joins them with `--rpc host:port,...`, whose devices
come first in its device order, so `--tensor-split` lists the remote GPUs first (src/llama.cpp).
vLLM: a Ray cluster (`ray start --head` on the main machine, `ray start --address` on the others) and one
`vllm serve` with `--pipeline-parallel-size` = the machines and `--tensor-parallel-size` = the GPUs of each
(`--distributed-executor-backend ray`; vLLM's multi-node serving docs).
"""

from __future__ import annotations

import shlex

from homespec.errors import UsageError
from homespec.plan.fit import Plan

# ggml-rpc-server's flags as the pinned llama.cpp parses them (tests/plan/test_plan_emit.py checks them against
# tests/data/rpc_server_flags.txt, written from tools/rpc/rpc-server.cpp by scripts/rpc_server_flags.py).
RPC_SERVER_FLAGS = ("--host", "--port", "--cache")
RAY_PORT = 6379  # Ray's default GCS port (`ray start --head --port`)


def remotes(plan: Plan) -> list[str]:
    """The other machines ("host:port"), in the order of their GPUs in the plan (llama.cpp's --rpc order)."""
    return list(dict.fromkeys(g.remote for g in plan.machine.gpus if g.remote))


def rpc_server_commands(plan: Plan) -> tuple[tuple[str, str], ...]:
    """(machine, command) for every other machine: its ggml-rpc-server, listening on the planned port."""
    out = []
    for address in remotes(plan):
        port = address.rpartition(":")[2]
        out.append((address, shlex.join(["ggml-rpc-server", "--host", "0.0.0.0", "--port", port, "--cache"])))
    return tuple(out)


def rpc_flags(plan: Plan) -> list[str]:
    return ["--rpc", ",".join(remotes(plan))] if remotes(plan) else []


def rpc_notes(plan: Plan) -> list[str]:
    """What each ggml-rpc-server must match: it serves every GPU of its machine, and --tensor-split counts them."""
    out = []
    for a in remotes(plan):
        gpus = [g for g in plan.machine.gpus if g.remote == a]
        hide = " (hide any other with CUDA_VISIBLE_DEVICES or --device)" if gpus[0].vendor != "apple" else ""
        out.append(f"{a} must serve exactly {', '.join(g.name for g in gpus)}{hide}: --tensor-split counts its "
                   "devices; ggml-rpc-server listens unauthenticated, so keep it on a trusted network")
    return out


def ray_commands(plan: Plan) -> tuple[tuple[str, str], ...]:
    """`ray start` for the main machine (the head) and each other machine."""
    head = ("this machine", shlex.join(["ray", "start", "--head", "--port", str(RAY_PORT)]))
    return (head, *((a.rpartition(":")[0], shlex.join(["ray", "start", "--address", f"MAIN_HOST:{RAY_PORT}"]))
                    for a in remotes(plan)))


def vllm_parallel_flags(plan: Plan) -> tuple[list[str], list[str]]:
    """(--tensor-parallel-size / --pipeline-parallel-size flags, notes) for vLLM over several machines:
    one pipeline stage per machine with GPUs, its GPUs tensor-parallel."""
    gpus = plan.machine.gpus
    if any(g.vendor == "apple" for g in gpus):
        raise UsageError("vLLM cannot serve on a Mac (it has no Metal backend), and one machine of this plan is one",
                         hint="emit it for llama.cpp instead: --emit llama-server")
    counts = [sum(1 for g in gpus if g.remote == a) for a in remotes(plan)]
    local = sum(1 for g in gpus if not g.remote)
    nodes = [c for c in [local, *counts] if c]
    notes = ["vLLM over several machines: start Ray first (the `ray start` lines; MAIN_HOST is this machine's "
             "address), then run `vllm serve` here"]
    if len(set(nodes)) > 1:
        notes.append(f"vLLM gives every pipeline stage the same number of GPUs; these machines have {nodes}: "
                     f"it uses {min(nodes)} per machine")
    flags = ["--tensor-parallel-size", str(min(nodes)), "--pipeline-parallel-size", str(len(nodes)),
             "--distributed-executor-backend", "ray"]
    return flags, notes
