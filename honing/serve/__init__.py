"""Serving: a model directory (an `honing export` output, or any Hugging Face causal LM with a
chat template) behind an OpenAI-compatible HTTP API, for any OpenAI client and for honing's own
`openai` engine (token mode, weight reloads, LoRA hot-load).

    serve("exports/q1", port=8000)                         # blocking: `honing serve DIR`
    async with running_server("exports/q1", port=0) as running: ...   # in process

Modules: `server` (the app, its endpoints and lifecycles), `protocol` (request records, OpenAI
errors), `chat` (messages rendered to the agent's exact token ids), `lora` (peft adapters merged
into the served weights). Reads model and adapter directories, never run directories.

Not covered: producing a model directory from a run (honing.export); authentication, n > 1,
several adapters at once, embeddings (docs/serving.md lists the rest).
"""

from honing.errors import ServeError
from honing.serve.server import (
    ModelServer,
    RunningServer,
    background_server,
    running_server,
    serve,
)

__all__ = [
    "ModelServer",
    "RunningServer",
    "ServeError",
    "background_server",
    "running_server",
    "serve",
]
