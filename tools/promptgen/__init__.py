"""The seeded generator of homespec's prompt sets (draft-head training data, dev and held-out test
sets, and the material of long-context prompts). A build-time tool: benchmarks/suites/build_prompts.py runs it
and writes homespec/data/prompts/, which the runtime reads (homespec.promptsets, homespec.longprompts).
Never copied from public benchmarks; docs/prompts.md describes the design and the split rule."""
