"""Older names for what homespec.session holds, still imported by homespec.bench."""

from __future__ import annotations

from homespec.session.core import Session
from homespec.session.options import METHODS, RunOptions, check_options

__all__ = ["METHODS", "RunOptions", "Session", "check_options", "open_session"]


def open_session(opt: RunOptions, **kw) -> Session:
    return Session.open(opt, **kw)
