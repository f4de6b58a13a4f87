"""Log-probabilities in OpenAI's two shapes, from the engine's per-token records
(homespec.speculative.logprobs: the target's own distribution at each emitted position, drafted
tokens included).

    chat:    {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
              "refusal": null}
    legacy:  {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}], "text_offset": [...]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from homespec.contracts.backend import Tokenizer
    from homespec.speculative.logprobs import TokenLogprob


class Pieces:
    """Each token's bytes and text, cached (a vocabulary's tokens repeat)."""

    def __init__(self, tok: "Tokenizer") -> None:
        self.tok = tok
        self._cache: dict[int, bytes] = {}

    def bytes(self, token: int) -> bytes:
        if token not in self._cache:
            reader = getattr(self.tok, "token_bytes", None)
            self._cache[token] = reader(token) if reader is not None else self.tok.decode([token]).encode("utf-8")
        return self._cache[token]

    def text(self, token: int) -> str:
        return self.bytes(token).decode("utf-8", errors="replace")


def chat(pieces: Pieces, scores: Sequence["TokenLogprob"]) -> dict[str, Any]:
    def one(token: int, logprob: float) -> dict[str, Any]:
        return {"token": pieces.text(token), "logprob": logprob, "bytes": list(pieces.bytes(token))}

    return {"content": [{**one(s.token, s.logprob), "top_logprobs": [one(t, lp) for t, lp in s.top]} for s in scores],
            "refusal": None}


def legacy(pieces: Pieces, scores: Sequence["TokenLogprob"], offset: int = 0, echoed: Sequence[int] = (),
           top: bool = True) -> dict[str, Any]:
    """The legacy shape; `echoed`: prompt tokens written before the answer (their log-probabilities
    null: the prompt's pass keeps only its last row's logits); `offset`: where the text starts."""
    tokens, values, tops, offsets = [], [], [], []
    for token, score in [(t, None) for t in echoed] + [(s.token, s) for s in scores]:
        text = pieces.text(token)
        tokens.append(text)
        values.append(score.logprob if score is not None else None)
        tops.append({pieces.text(t): lp for t, lp in score.top} if score is not None else None)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops if top else None, "text_offset": offsets}
