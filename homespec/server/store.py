"""Stored responses (the Responses API's `store`): what `previous_response_id` and `GET` /
`DELETE /v1/responses/{id}` read.

A bounded LRU in memory: at most `max_count` responses and `max_bytes` of them (each counted as
its JSON: the response object and the conversation it ends), the least recently stored or read
dropped first. Each response belongs to the API key that made it (a digest of the key, never the
key): another key can neither read, chain nor delete it. Without --api-key every client shares one
store. Nothing outlives the process.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_COUNT = 256  # --store-responses
DEFAULT_MIB = 64  # --store-mib


@dataclass(frozen=True)
class Stored:
    response: dict[str, Any]  # the response object, as GET returns it
    messages: tuple[dict[str, Any], ...]  # the conversation it ends, as chat messages (instructions excluded)
    size: int  # bytes, as counted against the bound


class ResponseStore:
    def __init__(self, max_count: int = DEFAULT_COUNT, max_bytes: int = DEFAULT_MIB << 20, keyed: bool = False) -> None:
        self.max_count, self.max_bytes = max_count, max_bytes
        self.keyed = keyed  # the server takes an API key: each key its own responses
        self.items: OrderedDict[tuple[str, str], Stored] = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_count > 0

    def put(self, owner: str, response: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
        """Keep `response` (False: storing is off, or it alone is over the byte bound)."""
        size = len(json.dumps(response, ensure_ascii=False)) + len(json.dumps(messages, ensure_ascii=False))
        if not self.enabled or size > self.max_bytes:
            return False
        key = (owner, response["id"])
        with self.lock:
            if (old := self.items.pop(key, None)) is not None:
                self.bytes -= old.size
            self.items[key] = Stored(response, tuple(messages), size)
            self.bytes += size
            while len(self.items) > self.max_count or self.bytes > self.max_bytes:
                _, dropped = self.items.popitem(last=False)
                self.bytes -= dropped.size
        return True

    def get(self, owner: str, response_id: str) -> Stored | None:
        with self.lock:
            found = self.items.get((owner, response_id))
            if found is not None:
                self.items.move_to_end((owner, response_id))
            return found

    def delete(self, owner: str, response_id: str) -> bool:
        with self.lock:
            found = self.items.pop((owner, response_id), None)
            if found is not None:
                self.bytes -= found.size
            return found is not None

    def __len__(self) -> int:
        return len(self.items)

    def owner(self, headers: Any) -> str:
        """Whose responses a request may see: a digest of the key it presented (`Authorization:
        Bearer KEY` or `x-api-key`, which the guard has checked), so the key itself is kept nowhere;
        "" (everyone's) on a server without a key."""
        if not self.keyed:
            return ""
        auth = headers.get("authorization") or ""
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else (headers.get("x-api-key") or "")
        return hashlib.sha256(key.encode()).hexdigest()[:32]
