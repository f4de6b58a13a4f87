"""Every failure as OpenAI's error body, {"error": {"message", "type", "param", "code"}} (on
Anthropic's routes Anthropic's, {"type": "error", "error": {"type", "message"}}), with one log
line; the server keeps serving."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger("homespec.server")

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
          503: "server_error", 500: "server_error"}


class ApiError(Exception):
    """A request the server refuses or could not answer: its status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}


# Anthropic's error types by status (its API reference, "Errors"); a full queue and a shutdown are
# its `overloaded_error`, the one its clients retry as such
_ANTHROPIC = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
              404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
              429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}
ANTHROPIC_PATHS = "/v1/messages"


def error_response(request_line: str, err: ApiError) -> JSONResponse:
    """The error's body, logged as one line: `POST /v1/chat/completions -> 400: messages: ...`.
    OpenAI's shape, or Anthropic's on Anthropic's routes (/v1/messages...)."""
    log.warning("%s -> %d: %s", request_line, err.status, err.message)
    if request_line.partition(" ")[2].startswith(ANTHROPIC_PATHS):
        return JSONResponse(anthropic_error(err), status_code=err.status, headers=err.headers)
    body = {"error": {"message": err.message, "type": _TYPES.get(err.status, "invalid_request_error"),
                      "param": err.param, "code": err.code}}
    return JSONResponse(body, status_code=err.status, headers=err.headers)


def anthropic_error(err: ApiError) -> dict:
    """Anthropic's error body: {"type": "error", "error": {"type", "message"}}."""
    kind = _ANTHROPIC.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def _line(request: Request) -> str:
    return f"{request.method} {request.url.path}"


# pydantic names the member of a union it tried after the field: what each member means to a user
_KINDS = {"float": "a number", "int": "an integer", "str": "a string", "bool": "true or false",
          "list[str]": "a list of strings", "list[int]": "a list of token ids", "list[constrained-int]": "a list of token ids",
          "list[TextPart]": "a list of text parts"}


def _split(loc: tuple) -> tuple[list[str], str | None]:
    """(the field's path, the union member tried) from an error's location."""
    parts = [str(p) for p in loc if p != "body"]
    for i, p in enumerate(parts):
        if p in _KINDS or "[" in p:
            return parts[:i], p
    return parts, None


def _union_error(errs: list[dict]) -> ApiError | None:
    """A value that fits no member of a union: one line naming what it may be."""
    loc, member = _split(errs[0].get("loc", ()))
    if member is None:
        return None
    kinds = []
    for e in errs:
        at, m = _split(e.get("loc", ()))
        if at == loc and m is not None and _KINDS.get(m, m) not in kinds:
            kinds.append(_KINDS.get(m, m))
    kinds = ["a number"] if set(kinds) == {"a number", "an integer"} else kinds
    param = ".".join(loc)
    return ApiError(400, f"{param}: should be {' or '.join(kinds)}", param=param, code="invalid_value")


# complaints that say more than "should be a string or ...": a value of the right type whose
# content is wrong (a lone surrogate, NaN) is named for what it is, not for the union it is in
_SPECIFIC = ("invalid_text", "missing_content", "finite_number", "too_many_stops")


def validation_error(exc: RequestValidationError) -> ApiError:
    """pydantic's first complaint as one sentence naming the field."""
    errs = list(exc.errors())
    first = errs[0] if errs else {"msg": "invalid body", "loc": ()}
    specific = next((e for e in errs if e.get("type") in _SPECIFIC), None)
    if specific is not None:
        param = ".".join(_split(specific.get("loc", ()))[0]) or None
        return ApiError(400, f"{param}: {specific['msg']}", param=param, code="invalid_value")
    if (union := _union_error(errs)) is not None and first.get("type") != "json_invalid":
        return union
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return ApiError(400, f"the body is not valid JSON ({first.get('ctx', {}).get('error', first['msg'])})",
                        code="invalid_json")
    if not loc and first.get("type") in ("missing", "model_attributes_type", "dict_type"):
        return ApiError(400, "the body must be a JSON object with the request's fields", code="invalid_body")
    param = ".".join(loc) or None
    if first.get("type") == "too_short" and param:
        return ApiError(400, f"{param} is empty: send at least one", param=param, code="invalid_value")
    return ApiError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param, code="invalid_value")


def _unreadable_body(exc: HTTPException) -> ApiError | None:
    """FastAPI's 400 for a body its JSON reader raised on with something other than a syntax error
    (bytes that are not UTF-8, an array nested deeper than the reader recurses): malformed JSON,
    said as such."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, UnicodeDecodeError):
        why = f"byte {cause.start} is not UTF-8"
    elif isinstance(cause, RecursionError):
        why = "it is nested too deeply"
    elif isinstance(cause, ValueError):
        why = " ".join(str(cause).split())
    else:
        return None
    return ApiError(400, f"the body is not valid JSON ({why})", code="invalid_json")


def install(app: FastAPI) -> None:
    """Render FastAPI's and Starlette's own failures (bad body, unknown route, wrong method) and
    any unexpected exception in OpenAI's shape."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(_line(request), exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(_line(request), validation_error(exc))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        if (unreadable := _unreadable_body(exc)) is not None:
            return error_response(_line(request), unreadable)
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return error_response(_line(request), ApiError(exc.status_code, message.get(exc.status_code, str(exc.detail)),
                                                       headers=dict(exc.headers or {})))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s failed", _line(request), exc_info=exc)
        return error_response(_line(request), ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))
