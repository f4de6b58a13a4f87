"""The llama.cpp backend (llama-cpp-python): `backend.LlamaCppBackend`; loading, tree batches and feature capture in
their own modules. Importing this package loads nothing heavy."""
