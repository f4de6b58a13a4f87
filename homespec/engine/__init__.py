"""The engine: one scheduler that owns the target and serves many sequences.

    options.py   RunOptions and every check that needs no weights
    setup.py     set_up(opt) -> RunSetup: a run's one set-up pass (check, resolve, one plan, the lanes)
    assemble.py  prepare(setup) -> RunParts: the target as lanes, a drafter per lane, the guard
    core.py      Engine: lanes, the waiting queue, step(), its own thread for serve
    running.py   one request in a lane: prefill chunks, draft, verification, commit, its responses
    api.py       EngineRequest, Handle (a request's stream of responses), EngineStats, QueueFull
    guard.py     BatchGuard: the draft depth per step from costs measured by batch rows

chat is a Session with one sequence; `homespec serve` puts an engine behind its HTTP layer.
"""
