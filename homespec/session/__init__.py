"""The session layer: what a run needs, opened once (Session.open), answering as a stream of
typed responses (Session.stream). chat, generate and bench are thin consumers of it.

    options.py    RunOptions and every check that needs no weights
    load.py       the target (from its plan), the drafter, the guard
    core.py       Session: open, stream, memory, close
    detok.py      incremental text with stop strings
    responses.py  StepFigures, TextDelta, Finish
    prompts.py    prompt token ids (plain or chat template)
    lockstep.py   several sessions a step each in turn
"""

from homespec.session.core import Session
from homespec.engine.options import RunOptions
from homespec.engine.responses import Finish, Response, StepFigures, TextDelta, final

__all__ = ["Finish", "Response", "RunOptions", "Session", "StepFigures", "TextDelta", "final"]
