"""EAGLE-3 heads leaving homespec: llama.cpp's `eagle3` GGUF, vLLM's speculators layout, and the
EAGLE-3 twin of an EAGLE-3.1 head for engines whose graph lacks 3.1's features (docs/interop.md).

Imported lazily (by `homespec draft export` and the bench against llama-server): it needs torch."""
