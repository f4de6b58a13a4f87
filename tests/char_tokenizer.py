"""A tokenizer as the server's outputs read one (homespec.server.outputs.ChatOutput): ids are the
characters' code points, so a test can hand an answer's text to an output piece by piece."""

from __future__ import annotations


class CharTokenizer:
    eos_ids = frozenset({0})
    bos_id = None

    def encode(self, text, add_bos=True, special=False):
        return [ord(c) for c in text]

    def decode(self, ids, special=False):
        return "".join(chr(i) for i in ids)
