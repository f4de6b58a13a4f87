"""GET /metrics: the engine's counters and gauges in Prometheus text, read at scrape time.

Speculation counters follow vLLM's names under homespec's prefix (`homespec:spec_decode_num_drafts`,
`..._num_draft_tokens`, `..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos{position}`;
Prometheus adds `_total` to counters), so dashboards built for vLLM read them with one rename. The
same three counts per drafter (`..._by_drafter{drafter}`) say who drafted what under `--method auto`.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from homespec.engine.core import Engine

P = "homespec:"


class EngineCollector:
    """One engine.stats() per scrape, as metric families labelled with the served model."""

    def __init__(self, engine: "Engine", model_name: str) -> None:
        self.engine, self.model_name = engine, model_name

    def collect(self) -> Iterator[Metric]:
        s = self.engine.stats()
        gauges = (
            ("num_requests_running", "Requests being decoded now.", s.active),
            ("num_requests_waiting", "Requests waiting in the queue for a slot.", s.queued),
            ("num_slots", "Sequences the engine decodes at once (--parallel).", s.slots),
            ("live_sequences", "Slots holding a request (0 when idle).", s.live_sequences),
            ("cached_tokens", "Tokens kept in the slots' caches for the next requests.", s.cached_tokens),
            ("host_cache_bytes", "Bytes of idle conversations' states held in host RAM (--cache-ram).",
             s.host_cache_bytes),
            ("host_cache_entries", "Idle conversations held in host RAM (--cache-ram).", s.host_cache_entries),
            ("generation_tokens_per_second", "Generated tokens per second over the last seconds.", s.tokens_per_s),
        )
        for name, doc, value in gauges:
            yield self._one(GaugeMetricFamily(P + name, doc, labels=["model_name"]), value)
        counters = (
            ("requests", "Requests the engine took.", s.requests_total),
            ("request_success", "Requests answered to their end.", s.requests_finished),
            ("request_cancelled", "Requests cancelled (client gone, or shutdown).", s.requests_cancelled),
            ("prompt_tokens", "Prompt tokens of the requests taken.", s.prompt_tokens_total),
            ("prompt_tokens_reused", "Prompt tokens found in a slot's cache, not processed again.",
             s.prompt_tokens_reused_total),
            ("prompt_tokens_processed", "Prompt tokens the target processed (prefilled).",
             s.prompt_tokens_prefilled_total),
            ("host_cache_saves", "Slot states saved to host RAM (--cache-ram).", s.host_cache_saves),
            ("host_cache_loads", "Slot states loaded back from host RAM (--cache-ram).", s.host_cache_loads),
            ("generation_tokens", "Tokens generated.", s.generation_tokens_total),
            ("target_passes", "Target forward passes.", s.target_passes_total),
            ("spec_decode_num_drafts", "Sequence-steps that verified a draft.", s.spec_num_drafts),
            ("spec_decode_num_draft_tokens", "Draft tokens proposed.", s.spec_num_draft_tokens),
            ("spec_decode_num_accepted_tokens", "Draft tokens accepted.", s.spec_num_accepted_tokens),
        )
        for name, doc, value in counters:
            yield self._one(CounterMetricFamily(P + name, doc, labels=["model_name"]), value)
        per_pos = CounterMetricFamily(P + "spec_decode_num_accepted_tokens_per_pos",
                                      "Draft tokens accepted at each position of the draft (0 = first).",
                                      labels=["model_name", "position"])
        for pos, n in enumerate(s.spec_accepted_per_pos):
            per_pos.add_metric([self.model_name, str(pos)], n)
        yield per_pos
        yield from self._by_drafter(s.spec_by_drafter)

    def _by_drafter(self, by: dict[str, list[int]]) -> Iterator[Metric]:
        """Drafts, draft tokens and accepted tokens per drafter (prompt lookup, suffix, EAGLE head)."""
        for i, (name, doc) in enumerate((("num_drafts", "Sequence-steps that verified a draft, by drafter."),
                                         ("num_draft_tokens", "Draft tokens proposed, by drafter."),
                                         ("num_accepted_tokens", "Draft tokens accepted, by drafter."))):
            family = CounterMetricFamily(P + f"spec_decode_{name}_by_drafter", doc, labels=["model_name", "drafter"])
            for drafter, counts in sorted(by.items()):
                family.add_metric([self.model_name, drafter], counts[i])
            yield family

    def _one(self, family, value) -> Metric:
        family.add_metric([self.model_name], value)
        return family


class HttpCounts:
    """HTTP answers by route and status (a plain counter family: no `_created` series beside it)."""

    def __init__(self) -> None:
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, route: str, status: int) -> None:
        with self._lock:
            self._counts[route, str(status)] += 1

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(P + "http_requests", "HTTP requests answered, by route and status.",
                                     labels=["route", "status"])
        with self._lock:
            for (route, status), n in sorted(self._counts.items()):
                family.add_metric([route, status], n)
        yield family


def registry(engine: "Engine", model_name: str) -> tuple[CollectorRegistry, HttpCounts]:
    """The server's registry: the engine's figures and the HTTP answers by route and status."""
    reg = CollectorRegistry()
    reg.register(EngineCollector(engine, model_name))  # type: ignore[arg-type]
    http = HttpCounts()
    reg.register(http)  # type: ignore[arg-type]
    return reg, http
