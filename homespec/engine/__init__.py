"""The engine: one scheduler that owns the target and serves many sequences: lanes, scheduling,
prefix reuse and the step's order. What to draft, how deep, and the tree a drafter grows are the
drafting policy's (homespec.speculative: methods.py, guard.py, choice.py, tree.py).

    options.py   RunOptions and every check that needs no weights
    setup.py     set_up(opt) -> RunSetup: a run's one set-up pass (check, resolve, one plan, the lanes)
    assemble.py  prepare(setup) -> RunParts: the target as lanes, a drafter per lane, the guard
    core.py      Engine: lanes, the waiting queue, step(), its own thread for serve
    running.py   one request in a lane: prefill chunks, draft, verification, commit, its responses
    api.py       EngineRequest, Handle (a request's stream of responses), EngineStats, QueueFull

chat is a Session with one lane; `homespec serve` puts an engine behind its HTTP layer.
"""
