"""The engine: one scheduler that owns the target and serves many sequences: lanes, scheduling,
prefix reuse and the step's order. What to draft, how deep, and the tree a drafter grows are the
drafting policy's (homespec.speculative: methods.py, guard.py, choice.py, tree.py).

    api.py       EngineRequest, Handle (a request's stream of responses), EngineStats, QueueFull
    assemble.py  prepare(opt): plan once, the target as lanes, a drafter per lane, the guard
    core.py      Engine: the lanes, the waiting queue, step(), its own thread for serve
    step.py      run_step: draft, one target pass, verify, commit, resync, in that order
    running.py   one request in a lane: prefill chunks, draft, verification, commit, its responses

chat is a Session with one lane; `homespec serve` puts an engine behind its HTTP layer.
"""
