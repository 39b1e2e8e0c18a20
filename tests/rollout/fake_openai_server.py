"""A real HTTP server (stdlib, in a thread) that answers like vLLM's OpenAI-compatible server, with
failures on demand, for the OpenAI engine's tests.

Tokenisation is one token per character (`id = ord(c)`), and a completion that ends naturally
ends with EOS_ID, as vLLM's `token_ids` do. `plan[path]` is a queue of behaviours for the next
requests to that path: "ok", "hang", "drop" (close the connection), "empty" (no choices) or an
HTTP status ("503"). Every request is kept in `state.seen`; `chat_messages()` gives the messages
of each chat request (content parts as sent: text and image_url parts).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EOS_ID = 3


@dataclass
class Seen:
    path: str
    body: dict[str, Any]


@dataclass
class ServerState:
    respond: Callable[[dict[str, Any]], str] = lambda _body: "Hello there"
    return_token_ids: bool = True  # honour return_token_ids (vLLM >= 0.10.2)
    tokens_as_ids: bool = False  # logprob tokens as "token_id:N" (--return-tokens-as-token-ids)
    delay_s: float = 0.0
    plan: dict[str, list[str]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)  # ends hangs


class FakeOpenAIServer:
    def __init__(self) -> None:
        self.state = ServerState()
        state = self.state

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with state.lock:
                    state.seen.append(Seen(self.path, body))
                    queue = state.plan.get(self.path) or []
                    behaviour = queue.pop(0) if queue else "ok"
                    state.in_flight += 1
                    state.max_in_flight = max(state.max_in_flight, state.in_flight)
                try:
                    if state.delay_s:
                        state.release.wait(state.delay_s)
                    self._serve(behaviour, body)
                finally:
                    with state.lock:
                        state.in_flight -= 1

            def _serve(self, behaviour: str, body: dict[str, Any]) -> None:
                if behaviour == "hang":
                    state.release.wait(30)
                    return
                if behaviour == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if behaviour == "empty":
                    self._send(200, {"id": "x", "object": "chat.completion", "choices": []})
                    return
                if behaviour != "ok":
                    status = int(behaviour)
                    error = {"object": "error", "message": f"injected failure {status}"}
                    self._send(status, {"error": error, "message": error["message"]})
                    return
                if self.path == "/v1/chat/completions":
                    self._send(200, chat_reply(state, body))
                elif self.path == "/v1/completions":
                    self._send(200, completion_reply(state, body))
                elif self.path in ("/v1/load_lora_adapter", "/reload_weights"):
                    self._send_text(200, "Success: loaded")
                else:
                    self._send(404, {"message": f"no route {self.path}"})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_text(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def chat_messages(self) -> list[list[dict[str, Any]]]:
        """The messages of each chat completion request received, in order."""
        with self.state.lock:
            seen = list(self.state.seen)
        return [s.body["messages"] for s in seen if s.path == "/v1/chat/completions"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.state.release.set()
        self._server.shutdown()
        self._server.server_close()


def _generate(state: ServerState, body: dict[str, Any]) -> tuple[str, list[int], str]:
    """(text, token ids, finish reason) with max_tokens and stop applied like vLLM."""
    text = state.respond(body)
    finish = "stop"
    for stop in body.get("stop") or []:
        if stop in text:
            cut = text.index(stop) + (len(stop) if body.get("include_stop_str_in_output") else 0)
            text = text[:cut]
            ids = [ord(c) for c in text]
            break
    else:
        ids = [*(ord(c) for c in text), EOS_ID]
    limit = body.get("max_tokens") or 10**9
    if len(ids) > limit:
        ids, finish = ids[:limit], "length"
        text = "".join(chr(i) for i in ids)
    return text, ids, finish


def _token(state: ServerState, token_id: int) -> str:
    if state.tokens_as_ids:
        return f"token_id:{token_id}"
    return "" if token_id == EOS_ID else chr(token_id)


def _logprob(i: int) -> float:
    return -0.1 * (i % 5) - 0.01


def chat_reply(state: ServerState, body: dict[str, Any]) -> dict[str, Any]:
    text, ids, finish = _generate(state, body)
    message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
    if body.get("tools"):
        try:
            spec = json.loads(text)
        except ValueError:
            spec = None
        if isinstance(spec, dict) and "name" in spec:
            arguments = json.dumps(spec.get("arguments", {}))
            call = {"name": spec["name"], "arguments": arguments}
            message["content"] = None
            message["tool_calls"] = [
                {"id": "chatcmpl-tool-1", "type": "function", "function": call}
            ]
            finish = "tool_calls"
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    if body.get("logprobs"):
        content: list[dict[str, Any]] = [
            {"token": _token(state, t), "logprob": _logprob(i), "bytes": None, "top_logprobs": []}
            for i, t in enumerate(ids)
        ]
        choice["logprobs"] = {"content": content}
    prompt_ids = [i for m in body["messages"] for i in _content_ids(m.get("content"))]
    reply: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt_ids) + len(ids),
        },
    }
    if state.return_token_ids and body.get("return_token_ids"):
        choice["token_ids"] = ids
        reply["prompt_token_ids"] = prompt_ids
    return reply


def _content_ids(content: Any) -> list[int]:
    """A message's prompt tokens: one per character of its text, one per image part."""
    if isinstance(content, list):  # content parts
        ids: list[int] = []
        for part in content:
            if part.get("type") == "text":
                ids += [ord(c) for c in part.get("text", "")]
            else:
                ids.append(0)
        return ids
    return [ord(c) for c in str(content or "")]


def completion_reply(state: ServerState, body: dict[str, Any]) -> dict[str, Any]:
    prompt = body["prompt"]
    assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt), prompt
    text, ids, finish = _generate(state, body)
    choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
    if body.get("logprobs") is not None:
        tokens = [_token(state, t) for t in ids]
        choice["logprobs"] = {
            "text_offset": list(range(len(ids))),
            "token_logprobs": [_logprob(i) for i in range(len(ids))],
            "tokens": tokens,
            "top_logprobs": [{tok: _logprob(i)} for i, tok in enumerate(tokens)],
        }
    if state.return_token_ids and body.get("return_token_ids"):
        choice["token_ids"] = ids
        choice["prompt_token_ids"] = prompt
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": body["model"],
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt) + len(ids),
        },
    }
