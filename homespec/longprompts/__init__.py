"""Long-context prompts (`homespec bench --long`): documents, code bases, data dumps and meeting
transcripts of a requested size with questions about them, composed at run time from the shipped
material in homespec/data/prompts/long_material.json (written by tools/promptgen; docs/prompts.md)."""

from homespec.longprompts.compose import approx_tokens, long_prompts

__all__ = ["approx_tokens", "long_prompts"]
