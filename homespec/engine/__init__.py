"""The engine: one scheduler that owns the target and serves many sequences.

    api.py       EngineRequest, Handle (a request's stream of responses), EngineStats, QueueFull,
                 the Engine protocol every scheduler implements
    batched.py   BatchedEngine: continuous batching over one llama.cpp target (one llama_decode per step)
    running.py   one request in a slot: prefill chunks, draft, verification, commit, its responses
    guard.py     BatchGuard: the draft depth per step from costs measured by batch rows
    load.py      the target for N sequences, a drafter per slot, the guard (docs/server.md, "Engine")

chat is a Session with one sequence; `homespec serve` puts an engine behind its HTTP layer.
"""
