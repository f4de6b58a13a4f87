"""The session layer: one lane of the engine (homespec.engine), opened once (Session.from_setup, or Session.open) and
answering as a stream of typed responses (Session.stream). chat, generate and bench consume it.

    core.py       Session: open, stream, memory, close
    encode.py     a prompt's token ids (plain or chat template), and whether it fits
    lockstep.py   several sessions a step each in turn

RunOptions, the responses and `final` are the engine's (engine/options.py, engine/responses.py),
named here for the commands.
"""

from homespec.session.core import Session
from homespec.engine.options import RunOptions
from homespec.engine.responses import Finish, Response, StepFigures, TextDelta, final

__all__ = ["Finish", "Response", "RunOptions", "Session", "StepFigures", "TextDelta", "final"]
