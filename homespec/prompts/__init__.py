"""homespec's own prompt sets: training data for draft heads, and dev / held-out test sets for tuning
and benchmarking. Written by a seeded generator (homespec.prompts.build), never copied from public
benchmarks; docs/prompts.md describes the design and the split rule."""

from homespec.prompts.items import SPLITS, PromptItem, load_prompts, read_prompts_file
from homespec.prompts.long import long_prompts

__all__ = ["SPLITS", "PromptItem", "load_prompts", "long_prompts", "read_prompts_file"]
