"""Where models come from: local paths, Hugging Face repos (huggingface_hub), Ollama's store,
LM Studio's folder and the Hugging Face cache.

The rest of homespec names a model through one function, homespec.sources.resolve.resolve
(spelling, role, purpose); the spellings are parsed in names.py, found in find.py (stores.py,
hub.py, a repo's GGUF chosen by pick.py). The import contracts in pyproject.toml keep find, hub
and stores to this package (and the `homespec models` listing, which walks the stores).
"""
