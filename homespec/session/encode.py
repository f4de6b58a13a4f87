"""A prompt's token ids: plain text or the model's chat template, measured before the weights load."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from homespec.backends.tokenizer import load_tokenizer
from homespec.errors import UsageError
from homespec.limits import surely_longer

if TYPE_CHECKING:
    from homespec.contracts.backend import Tokenizer
    from homespec.engine.setup import RunSetup
    from homespec.session.core import Session


def prompt_tokens(session: "Session", turns: Sequence[str] | Sequence[dict[str, str]], chat: bool,
                  system: str | None = None) -> list[int]:
    return encode_prompt(session.backend.tokenizer, turns, chat, system)


def encode_prompt(tok: "Tokenizer", turns: Sequence[str] | Sequence[dict[str, str]], chat: bool,
                  system: str | None = None) -> list[int]:
    """The prompt's token ids: the last turn as plain text, or every turn in the chat template.
    Needs only the tokenizer, so a prompt can be measured before the model loads."""
    if not chat:
        text = turns[-1] if isinstance(turns[-1], str) else turns[-1]["content"]
        return tok.encode(text, add_bos=True)
    messages = [m if isinstance(m, dict) else {"role": "user", "content": m} for m in turns]
    if system:
        messages = [{"role": "system", "content": system}, *messages]
    return tok.encode(tok.chat_prompt(messages, add_generation_prompt=True), add_bos=False, special=True)


def encode_prompts(model_path: str, prompts: Sequence[Sequence[str]], chat: bool,
                   system: str | None = None, *, prefer: str = "llamacpp") -> list[list[int]]:
    """Every prompt's token ids from the model's tokenizer alone: measured before the weights load.
    `prefer`: a GGUF's tokenizer from llama.cpp or rebuilt with `tokenizers` (homespec.backends.tokenizer)."""
    tok = load_tokenizer(model_path, prefer=prefer)
    try:
        return [encode_prompt(tok, turns, chat, system) for turns in prompts]
    finally:
        tok.close()


def check_fits(ids: Sequence[int], ctx: int, max_tokens: int, what: str = "the prompt") -> None:
    """A prompt must leave the context room for at least one generated token (homespec.speculative.steps.decode)."""
    if len(ids) >= ctx:
        suggest = -(-(len(ids) + max_tokens) // 256) * 256
        raise UsageError(f"{what} has {len(ids)} tokens; --ctx {ctx} must hold it and the answer",
                         hint=f"raise --ctx (e.g. --ctx {suggest}) or shorten the prompt")


def checked_prompts(setup: "RunSetup", prompts: Sequence[Sequence[str]], chat: bool, system: str | None,
                    max_tokens: int, source: str | None = None) -> list[list[int]]:
    """Each prompt's length in tokens (the tokenizer alone), checked before the weights load against
    the context the set-up checked (homespec.engine.setup). `source`: the prompts file, for the message."""
    ctx = setup.lane_ctx
    for n, turns in enumerate(prompts, 1):  # one far beyond the context is never tokenized
        text = turns[-1] if isinstance(turns[-1], str) else turns[-1]["content"]
        if surely_longer(text, ctx):
            what = "the prompt" if source is None else f"prompt {n} of {source}"
            raise UsageError(f"{what} is more than --ctx {ctx} tokens long ({len(text):,} characters)",
                             hint="shorten the prompt, or raise --ctx")
    # the tokenizer the backend will use: the torch backend's is the rebuilt one (no llama.cpp beside torch)
    prefer = "llamacpp" if setup.options.backend == "llamacpp" else "tokenizers"
    token_items = encode_prompts(setup.model_path, prompts, chat, system, prefer=prefer)
    for n, ids in enumerate(token_items, 1):
        check_fits(ids, ctx, max_tokens, what="the prompt" if source is None else f"prompt {n} of {source}")
    return token_items
