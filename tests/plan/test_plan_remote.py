"""Plans over several machines (`plan --remote GPU@HOST`): llama.cpp's RPC backend and vLLM over Ray.

The split of layers over devices is checked against llama.cpp's own rule (src/llama-model.cpp, load_tensors,
`get_layer_buft_list`: device of layer il = upper_bound(cumulative float split, (il - i_gpu_start) / n_gpu_layers)),
the flags against the pinned sources, and the network term by hand on the worked example of docs/planner.md.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from homespec.errors import UsageError
from homespec.plan.api import PlanRequest, make_plan
from homespec.plan.devices import HOST, devices_for
from homespec.plan.emit import emit
from homespec.plan.lines import LineKind
from homespec.plan.place.ledger import assign_layers
from homespec.plan.settings import Settings
from homespec.types import ModelSpec

RPC_FLAGS_FILE = Path(__file__).parents[1] / "data" / "rpc_server_flags.txt"


def llamacpp_layer_devices(split: list[int], n_layer: int, ngl: int) -> list[int]:
    """llama.cpp's device of each layer (index n_layer: the output layer), -1 for the CPU, with --tensor-split
    `split` and -ngl `ngl`, in float32 as the C++ computes it."""
    cum = np.cumsum(np.array(split, dtype=np.float32), dtype=np.float32)
    splits = (cum / cum[-1]).astype(np.float32)
    start = max(n_layer + 1 - ngl, 0)
    act = min(ngl, n_layer + 1)
    out = []
    for il in range(n_layer + 1):
        if il < start or il - start >= act:
            out.append(-1)
            continue
        x = np.float32(il - start) / np.float32(act)
        out.append(int(np.searchsorted(splits, x, side="right")))  # std::upper_bound
    return out


@hsettings(max_examples=200, deadline=None)
@given(n_layer=st.integers(2, 126), split=st.lists(st.integers(0, 60), min_size=2, max_size=6),
       extra=st.integers(0, 1))
def test_the_split_is_llamacpps_device_split(n_layer, split, extra):
    """homespec gives layer_split[i] consecutive layers to device i; llama.cpp reads the same numbers as
    --tensor-split proportions and lands every layer on the same device."""
    ngl = min(sum(split), n_layer + extra)
    if ngl == 0:
        return
    # the split the solver prints always sums to the GPU layers (place/llamacpp.py split_layers)
    counts, left = [], ngl
    for n in split[:-1]:
        counts.append(min(n, left))
        left -= counts[-1]
    counts.append(left)
    if counts.count(0) == len(counts) - 1 and counts[-1] == 0:
        return
    spec = ModelSpec(name="m", arch="llama", n_layer=n_layer, n_embd=64, n_head=4, n_head_kv=4, head_dim=16,
                     n_ff=128, n_vocab=1000, n_ctx_train=4096)
    gpus = [type("G", (), {"id": i})() for i in range(len(counts))]
    ours = assign_layers(spec, Settings(n_gpu_layers=ngl, layer_split=tuple(counts)), gpus)
    theirs = llamacpp_layer_devices(counts, n_layer, ngl)
    assert ours == theirs  # a device id is llama.cpp's: the GPU's index, -1 for the CPU


def test_remote_gpus_come_first_and_the_output_stays_here():
    p = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=64, remote=("3090@host2",)))
    devs = devices_for(p.machine)
    assert devs[0].remote == "host2:50052" and devs[1].remote == "" and devs[-1].id == HOST
    assert p.settings.n_gpu_layers == 81 and len(p.settings.layer_split) == 2
    drafts = {i.device for i in p.items if i.kind in (LineKind.DRAFT_WEIGHTS, LineKind.DRAFT_KV)}
    assert drafts == {1}  # the draft head with the output layer, on the main machine
    assert p.network is not None and [h.remote for h in p.network.hops] == ["host2:50052"]


def test_network_term_by_hand():
    """docs/planner.md, "Several machines": Llama-3.1-70B Q4_K_M on an RTX 4090 here and one on host2 over
    1 GbE. A token's hidden state is 8192 f32 = 32,768 bytes, out and back: 65,536 bytes per token; 1 GbE
    carries 1e9 x 1460 / 1538 / 8 = 118,660,598 bytes/s of TCP payload; two round trips of 0.2 ms."""
    rate = 1e9 * 1460 / 1538 / 8
    want_1 = 2 * 0.0002 + 65536 / rate  # 0.952 ms
    want_48 = 2 * 0.0002 + 48 * 65536 / rate  # 26.91 ms
    here = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090,4090", ram=64))
    there = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=64, remote=("4090@host2",)))
    net = there.network
    assert net.bytes_per_token() == 65536
    assert net.seconds(1) == pytest.approx(want_1) and net.seconds(48) == pytest.approx(want_48)
    assert round(want_1 * 1e3, 2) == 0.95 and round(want_48 * 1e3, 2) == 26.91
    # the same two cards, one of them elsewhere: the estimate pays exactly the network, per forward
    assert there.settings.layer_split == here.settings.layer_split
    assert there.estimate.plain_ms - here.estimate.plain_ms == pytest.approx(want_1 * 1e3)
    assert there.estimate.verify_ms - here.estimate.verify_ms == pytest.approx(want_48 * 1e3)
    assert any("network: 1 remote machine(s) over 1 GbE" in n for n in there.notes)


def test_faster_links_cost_less():
    slow = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=64, remote=("4090@host2",), link="1gbe"))
    fast = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090", ram=64, remote=("4090@host2",), link="10gbe"))
    assert fast.estimate.plain_tokens_per_s > slow.estimate.plain_tokens_per_s
    assert fast.network.seconds(48) < slow.network.seconds(48) / 5


def test_a_remote_mac_is_its_own_pool():
    p = make_plan(PlanRequest(model="llama-3.1-70b-q8", gpu="4090", ram=64, remote=("m3-ultra-96@mac",), draft="none"))
    mac = next(u for u in p.devices if u.device.remote)
    assert mac.device.capacity_bytes == int(96 * 2**30 * 0.75) and not p.unified
    host = next(u for u in p.devices if not u.device.is_gpu)
    assert host.shared_bytes == 0  # this machine's RAM does not carry the Mac's share


@pytest.mark.parametrize("spec", ["3090", "3090@", "@host2", "3090@host 2", "3090@host2:0", "auto@host2"])
def test_bad_remote_is_a_usage_error(spec):
    with pytest.raises(UsageError):
        make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, remote=(spec,)))


def test_link_without_remote_and_bad_link_are_usage_errors():
    with pytest.raises(UsageError):
        make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, link="10gbe"))
    with pytest.raises(UsageError):
        make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, remote=("3090@host2",), link="carrier-pigeon"))
    with pytest.raises(UsageError):
        make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, remote=("3090@host2", "3090@host2")))


def _flags(command: str) -> list[str]:
    return [w for w in shlex.split(command) if w.startswith("-")]


def test_llama_server_and_rpc_server_lines_use_the_pinned_flags():
    from test_plan_emit import server_flags

    accepted, _ = server_flags()
    rpc_accepted = {line for line in RPC_FLAGS_FILE.read_text().splitlines() if line.startswith("-")}
    p = make_plan(PlanRequest(model="llama-3.1-70b-q8", gpu="4090", ram=64, remote=("3090@host2", "m3-ultra-96@mac:50053")))
    e = emit(p, "llama-server")
    words = shlex.split(e.command)
    assert words[words.index("--rpc") + 1] == "host2:50052,mac:50053"
    assert words[words.index("--tensor-split") + 1] == ",".join(map(str, p.settings.layer_split))
    assert all(f in accepted for f in _flags(e.command))
    assert [m for m, _ in e.remote_commands] == ["host2:50052", "mac:50053"]
    for _, cmd in e.remote_commands:
        words = shlex.split(cmd)
        assert words[0] == "ggml-rpc-server" and set(_flags(cmd)) <= rpc_accepted
    assert "--port 50053" in e.remote_commands[1][1]
    assert "# on host2:50052:" in e.text() and e.text().endswith(e.command)


def test_vllm_over_machines_is_ray_and_pipeline_stages():
    p = make_plan(PlanRequest(model="llama-3.1-70b-q4", gpu="4090,4090", ram=64, remote=("4090,4090@host2",), draft="none"))
    e = emit(p, "vllm")
    words = shlex.split(e.command)
    assert words[words.index("--pipeline-parallel-size") + 1] == "2"
    assert words[words.index("--tensor-parallel-size") + 1] == "2"
    assert [c.split()[:3] for _, c in e.remote_commands] == [["ray", "start", "--head"], ["ray", "start", "--address"]]
    mac = make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, remote=("m3-ultra-96@mac",), draft="none"))
    with pytest.raises(UsageError):
        emit(mac, "vllm")


def test_the_cli_plans_and_emits_several_machines(capsys):
    from homespec.cli import main

    rc = main(["plan", "--gpu", "4090", "--remote", "3090@host2", "--link", "2.5gbe", "--model", "llama-3.1-70b-q4",
               "--ram", "64", "--json", "--emit", "llama-server"])
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, None) and out["emit"]["remote_commands"][0]["machine"] == "host2:50052"
    assert out["network"]["link"] == "2.5 GbE" and out["network"]["hops"][0]["remote"] == "host2:50052"
