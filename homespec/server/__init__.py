"""`homespec serve`: an OpenAI-compatible HTTP API over an engine (homespec.engine).

    schemas.py   the request bodies (pydantic), checked as OpenAI checks them
    errors.py    ApiError and OpenAI's error shape; the handlers that render every failure in it
    guard.py     ASGI middleware: the API key, the body size limit, per-status request counts
    answers.py   a request's EngineRequest, the handle's responses as one body or SSE chunks
    shapes.py    the response bodies (chat.completion, text_completion, chunks, usage, timings)
    metrics.py   GET /metrics: the engine's counters in Prometheus text
    app.py       create_app: the routes
    run.py       bind, serve with uvicorn, shut down on SIGINT / SIGTERM

The API, its fields, errors and metrics: docs/server.md.

FastAPI, uvicorn and prometheus-client are imported here only: `homespec plan` never loads them.
"""
