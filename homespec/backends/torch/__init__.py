"""homespec's own torch backend: `backend.TorchBackend` over `homespec.nets`. Importing this package loads
nothing heavy."""
