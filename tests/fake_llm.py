"""A stand-in LLM provider: a real HTTP server speaking the OpenAI chat-completions API.

Answers are derived from the request alone (so two runs compare byte for byte) and keep the input's
language; every request is recorded in a ledger so tests can count calls and repeats.
"""

from __future__ import annotations

import hashlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request

_SECTION = re.compile(r"<(text|part|document)[^>]*>\n(.*?)\n</\1>", re.S)
_FIRST_SENTENCE = re.compile(r".+?(?:[.!?](?=\s)|[。！？；]|$)", re.S)


@dataclass
class LedgerEntry:
    at: float
    model: str
    prompt_sha256: str
    prompt_chars: int
    prompt_tokens: int
    completion_tokens: int


@dataclass
class FakeLLM:
    latency_s: float = 0.0
    ledger: list[LedgerEntry] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, messages: list[dict[str, Any]]) -> str:
        user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        sections = [body for _, body in _SECTION.findall(user)] or [user]
        firsts = []
        for body in sections:
            match = _FIRST_SENTENCE.search(body.strip())
            firsts.append((match.group(0) if match else body)[:300].strip())
        digest = hashlib.sha256(user.encode()).hexdigest()[:8]
        return f"[{digest}] " + " ".join(f for f in firsts if f)

    def count(self) -> int:
        with self._lock:
            return len(self.ledger)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> dict[str, Any]:
            body = await request.json()
            if self.latency_s:
                import asyncio

                await asyncio.sleep(self.latency_s)
            prompt = "".join(m.get("content", "") for m in body["messages"])
            text = self.answer(body["messages"])
            usage = {"prompt_tokens": max(1, len(prompt) // 4), "completion_tokens": max(1, len(text) // 4)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            with self._lock:
                self.ledger.append(
                    LedgerEntry(
                        time.time(),
                        body["model"],
                        hashlib.sha256(prompt.encode()).hexdigest(),
                        len(prompt),
                        usage["prompt_tokens"],
                        usage["completion_tokens"],
                    )
                )
            return {
                "id": f"chatcmpl-{len(self.ledger)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": usage,
            }

        return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeLLMServer:
    """Runs a FakeLLM on 127.0.0.1 in a background thread."""

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        self.port = free_port()
        self._server = uvicorn.Server(
            uvicorn.Config(llm.app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the stand-in LLM server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
