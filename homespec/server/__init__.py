"""`homespec serve`: OpenAI's and Anthropic's HTTP APIs over an engine (homespec.engine): each API a
parser and a renderer around one chat request and one stream of the engine's responses.

    schemas.py   the request bodies (pydantic), checked as OpenAI checks them
    errors.py    ApiError and OpenAI's error shape; the handlers that render every failure in it
    guard.py     ASGI middleware: the API key, the body size limit, per-status request counts
    answers.py   a request's EngineRequest, the handle's responses as one body or SSE chunks
    shapes.py    the response bodies (chat.completion, text_completion, chunks, usage, timings)
    metrics.py   GET /metrics: the engine's counters in Prometheus text
    responses_*  /v1/responses: the routes (_api), the request read as chat (_in), the answer (_out)
    store.py     stored responses: a bounded LRU per API key
    messages_*   Anthropic's /v1/messages: the routes (_api), the request read as chat (_in), the answer (_out)
    app.py       create_app: the routes
    run.py       bind, serve with uvicorn, shut down on SIGINT / SIGTERM

The API, its fields, errors and metrics: docs/server.md.

FastAPI, uvicorn and prometheus-client are imported here only: `homespec plan` never loads them.
"""
