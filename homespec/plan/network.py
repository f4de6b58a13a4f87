"""What a plan over several machines pays the network per token (llama.cpp's RPC backend).

llama-server puts the RPC servers' devices first, then its own GPUs (src/llama.cpp, "add RPC servers at the
front of the list to minimize network transfers"), and gives each device a run of consecutive layers
(src/llama-model.cpp, load_tensors: `upper_bound` over the cumulative --tensor-split). One forward then
crosses the network twice per remote machine: the hidden state of its first layer goes out, the hidden state
after its last layer comes back (ggml's scheduler copies a split's inputs to its backend; the RPC backend has
no server-to-server path, so two remote machines in a row exchange through the main host). Each crossing
carries T tokens x n_embd f32 values (T = 1 plain, T = the tree's nodes when verifying a draft); a remote
machine holding the output layer sends back T rows of n_vocab f32 logits instead. On top of the bytes come
the round trips of the RPC commands a remote graph needs (its compute, and fetching its result).
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.errors import UsageError
from homespec.plan.devices import device_label

F32 = 4


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    gbps: float  # TCP payload rate, Gbit/s
    rtt_s: float  # one round trip between the machines

    @property
    def bytes_per_s(self) -> float:
        return self.gbps * 1e9 / 8


# Ethernet: the line rate times 1460 / 1538, the TCP payload of a 1500-byte frame with its Ethernet, IP and
# TCP headers, preamble and gap (IEEE 802.3 framing); a home LAN through one switch answers a round trip in
# ~0.2 ms at 1 / 2.5 GbE and ~0.1 ms at 10 GbE (assumed: `ping` the other machine to know yours).
# Thunderbolt: IP over Thunderbolt reaches about half the link's 40 (TB4) / 80 (TB5) Gbit/s between two Macs
# (assumed from published iperf3 runs); round trip ~0.1 ms.
_ETH = 1460 / 1538
LINKS = {
    "1gbe": Link("1 GbE", 1.0 * _ETH, 0.0002),
    "2.5gbe": Link("2.5 GbE", 2.5 * _ETH, 0.0002),
    "5gbe": Link("5 GbE", 5.0 * _ETH, 0.00015),
    "10gbe": Link("10 GbE", 10.0 * _ETH, 0.0001),
    "25gbe": Link("25 GbE", 25.0 * _ETH, 0.0001),
    "tb4": Link("Thunderbolt 4 (IP over Thunderbolt)", 20.0, 0.0001),
    "tb5": Link("Thunderbolt 5 (IP over Thunderbolt)", 40.0, 0.0001),
}
DEFAULT_LINK = "1gbe"
# RPC commands that wait for an answer per remote graph: its compute, and reading its result back.
ROUND_TRIPS = 2


def link_from_arg(arg: str) -> Link:
    """`--link 1gbe|2.5gbe|5gbe|10gbe|25gbe|tb4|tb5`, or an Ethernet line rate in Gbit/s (`--link 40`)."""
    key = arg.strip().lower().replace(" ", "")
    if key in LINKS:
        return LINKS[key]
    try:
        rate = float(key.removesuffix("gbe").removesuffix("gbit"))
    except ValueError:
        rate = 0.0
    if not 0.01 <= rate <= 800:
        raise UsageError(f"--link '{arg}' is not a link homespec knows",
                         hint=f"use one of {', '.join(LINKS)}, or a line rate in Gbit/s (e.g. --link 40)")
    return Link(f"{rate:g} Gbit/s Ethernet", rate * _ETH, 0.0001)


@dataclass(frozen=True, slots=True)
class Hop:
    """One remote machine's run of layers: out to it, back from it."""

    remote: str  # "host:port"
    devices: tuple[int, ...]  # its devices' ids in the plan (GPU indices)
    layers: int
    back_bytes: int  # bytes per token coming back (the hidden state, or logits when it holds the output)


@dataclass(frozen=True, slots=True)
class Network:
    link: Link
    n_embd: int
    hops: tuple[Hop, ...]

    def out_bytes(self) -> int:
        return self.n_embd * F32

    def bytes_per_token(self) -> int:
        return sum(self.out_bytes() + h.back_bytes for h in self.hops)

    def seconds(self, tokens: int) -> float:
        """The network's share of one forward over `tokens` tokens."""
        return len(self.hops) * ROUND_TRIPS * self.link.rtt_s + tokens * self.bytes_per_token() / self.link.bytes_per_s

    def hop_seconds(self, hop: Hop, tokens: int) -> float:
        return ROUND_TRIPS * self.link.rtt_s + tokens * (self.out_bytes() + hop.back_bytes) / self.link.bytes_per_s

    def as_json(self) -> dict:
        return {"link": self.link.name, "gbps": round(self.link.gbps, 3), "rtt_ms": self.link.rtt_s * 1e3,
                "bytes_per_token": self.bytes_per_token(), "ms_per_token": round(self.seconds(1) * 1e3, 3),
                "hops": [{"remote": h.remote, "devices": [device_label(d) for d in h.devices], "layers": h.layers,
                          "back_bytes_per_token": h.back_bytes} for h in self.hops]}


def hops(placement: list[int], remote_of: dict[int, str], n_embd: int, n_vocab: int) -> tuple[Hop, ...]:
    """The remote runs of a layer placement (`placement[n_layer]` is the output layer's device)."""
    out: list[Hop] = []
    run: list[int] = []

    def close() -> None:
        if run:
            devs = tuple(dict.fromkeys(placement[i] for i in run))
            holds_output = run[-1] == len(placement) - 1
            out.append(Hop(remote_of[placement[run[0]]], devs, len(run) - holds_output,
                           (n_vocab if holds_output else n_embd) * F32))
            run.clear()

    for i, dev in enumerate(placement):
        here = remote_of.get(dev, "")
        if run and remote_of[placement[run[-1]]] != here:
            close()
        if here:
            run.append(i)
    close()
    return tuple(out)
