"""The engine: one scheduler that owns the target and serves many sequences.

    api.py       EngineRequest, Handle (a request's stream of responses), EngineStats, QueueFull,
                 the Engine protocol every scheduler implements

chat is a Session with one sequence; `homespec serve` puts an engine behind its HTTP layer.
"""
