"""homespec's own torch backend: `backend.TorchBackend` over `homespec.models`. Importing this package loads
nothing heavy."""
