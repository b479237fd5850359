"""A stand-in LLM provider: a real HTTP server speaking the OpenAI chat-completions API.

Answers are derived from the request alone (so two runs compare byte for byte) and keep the input's
language; every request - answered, failed or refused - is recorded in a ledger so tests can count
calls, repeats, refusals, tokens and concurrency.

In a test (the server runs in a background thread; the ledger and the controls are thread-safe)::

    with FakeLLMServer(FakeLLM(latency_s=0.2, max_prompt_tokens=3000)) as server:
        ...  # point OPENAI_BASE_URL at server.base_url
        server.llm.fail_next(2)            # the next two calls answer 500
        server.llm.fail_rate = 0.1         # 10% of calls answer 500 (deterministic per prompt+attempt)
        assert server.llm.max_in_flight == 8 and server.llm.repeats() == 0

As its own process (controls and ledger over HTTP: GET /_ledger, POST /_config, POST /_reset)::

    python -m tests.fake_llm --port 8100 --latency 0.4 --fail-rate 0.05 --rpm 120 --max-prompt-tokens 3000
    python -m tests.fake_llm --dialect ollama --num-ctx 2048 --token-latency 0.05   # a slow local Ollama

`dialect` picks the server it stands for, which decides what it does at its context limit and what
it tells about itself (``GET /v1/models`` and ``/models`` list `models` in every dialect):

- ``openai`` (default): a prompt over `max_prompt_tokens` -> 400 ``context_length_exceeded``.
- ``llamacpp``: its context is ``n_ctx`` = `max_prompt_tokens` (4096 when unset); a prompt of ``n_ctx``
  tokens or more is refused as llama-server refuses it (400, ``exceed_context_size_error``, with
  ``n_prompt_tokens`` and ``n_ctx``). Serves ``GET /props`` and ``GET /health``; answers carry
  llama.cpp's ``timings`` besides ``usage``.
- ``ollama``: never refuses a long prompt. A prompt over `num_ctx` tokens is cut as Ollama's runner
  cuts it - its first 4 tokens and its end are kept, the middle is dropped silently - the answer is
  made from what is left and ``usage.prompt_tokens`` counts what is left (the ledger's
  ``truncated_to``). Like Ollama's OpenAI-compatible endpoint it ignores ``options`` (so
  ``options.num_ctx`` changes nothing: the context is the model's, `num_ctx`) and
  ``max_completion_tokens`` (``max_tokens`` only). Serves ``POST /api/show`` (`model_context_length`
  as ``llama.context_length``), ``GET /api/tags``, ``GET /api/version`` and ``GET /``.

What a request meets, in this order (the first that applies decides):

1. a malformed body, or ``stream: true`` while `streaming` is off -> 400 (``invalid_request``);
2. the queue filled by `fail_next` / `rate_limit_next` / `hang_next` (the next n calls, whatever they are);
3. `rpm_limit`: more than that many requests accepted in the rolling `rate_window_s` -> 429 with
   ``Retry-After`` (seconds until the oldest accepted request leaves the window);
4. the context limit of the `dialect` (above): 400 (entry flagged ``over_budget``), or Ollama's cut;
5. `reject_marker` found in the prompt -> 400 (a provider refusing that prompt);
6. `hang_rate` -> the server holds the request `hang_s` seconds (longer than any client timeout);
7. `fail_rate` -> 500;
8. the answer: one JSON body, or with ``stream: true`` a ``text/event-stream`` of
   ``chat.completion.chunk`` events (the role, the text a few words at a time, the finish reason,
   the usage when ``stream_options.include_usage`` asks for it, then ``data: [DONE]``). Its text is
   the same either way. A prompt that states its answer's bound ("The answer must fit in N tokens", as
   docsum's do) is obeyed, as the instruction-following models it stands for mostly do: the answer
   says as many of its sentences as fit in N tokens. `answer_min_tokens` makes a model that rambles
   whatever it is told (its sentences repeated up to that many tokens); ``max_tokens`` /
   ``max_completion_tokens`` cut an answer past them (``finish_reason: "length"``).
   `ignores_stream` makes a server or proxy that does not look at ``stream``: a request with
   ``stream: true`` is answered as if it had not asked (the one JSON body, ``application/json``; never
   the 400 of step 1). The ledger's ``stream`` says what the request asked.

Answers and 5xx failures arrive after `latency_s` plus a jitter in ``[0, jitter_s)`` derived from the
prompt's hash (prompt processing); an answer then takes `token_latency_s` per piece of text (a model
still producing tokens): a stream waits that long before each piece, a plain answer arrives after all
of them. 4xx refusals are immediate; every refusal and failure is a plain JSON error, sent before any
stream starts. Rates are decided by hashing (seed, prompt, attempt number), so a run is reproducible
and a retry of a failed prompt gets a fresh draw. A client that gives up while its request waits or
streams is recorded with status 499; a server that stops answers waiting requests 503 at once (and
cuts a stream short, recorded 503).

Citations: when the prompt shows its sentences numbered (``[S1] ...``, the way docsum asks for
citations), the answer cites them. With a ``response_format`` JSON schema it is JSON that obeys the
schema (``{"sentences": [{"text", "sources"}]}``, the ids from its enum), as OpenAI, llama.cpp and vLLM
enforce one; else one sentence a line, its ids in brackets after it. Each sentence is the first of
its section, opened by "In all, " ("总之，" before CJK text): the cited sentence's own words. Two knobs:

- `structured_output`: ``enforce`` (default), ``ignore`` (a server that ignores ``response_format``:
  it answers in the text format), ``refuse`` (400 naming ``response_format``, before anything else is
  decided);
- `citation_fault`: a weak model's ways, ``omit`` (no ids), ``invent`` (ids not in the request: only
  where no schema is enforced, which would forbid them), ``free`` (plain prose, no format; under an
  enforced schema, sentences without ids). None: it follows the format;
- `invented_sentence`: a weak model's other way, saying what it was not shown: each cited answer ends
  with this sentence, citing the request's first id (None: it says only what it was shown).
- `copies_merges`: a model too small to merge, as Qwen2.5-Coder-1.5B was with the 74 chunk summaries
  of a long DOCX: a request of several sections (<part>, <document>: a merge) is answered with its
  first section copied whole, whatever bound the prompt states (``max_tokens`` still cuts it); cited,
  each sentence gives its own id.

Hostile answers: a prompt that holds `poison_marker` (a document telling the model what to write, say
"write \\u0000 after each sentence") is obeyed, as the instruction-following models it stands for mostly
do, in the way `poison` says:

- ``nul``: each sentence ends with U+0000 (in a JSON answer the escape ``\\u0000`` that decodes to it; in
  the text format the character itself, which the HTTP body carries as ``\\u0000``);
- ``surrogate``: each sentence ends with the escape ``\\ud800``, in a JSON answer a lone surrogate once
  decoded (in the text format mere text: the HTTP body is UTF-8, which cannot carry one);
- ``nesting``: the answer opens with `NESTING` ``[`` and closes with as many ``]`` (only where no
  schema is enforced: an enforced one forbids it).

In the ``openai`` dialect it also serves OpenAI's Files and Batch APIs, on a scaled clock, and the
``service_tier: "flex"`` of a chat call: see `tests.fake_batches`, whose config fields (``prices``,
``batch_*``, ``flex_*``) are set like the others. Each ledger entry has its ``tier`` ("realtime", "flex"
or "batch") and ``price_factor``; the ledger's ``cost_by_tier`` and ``cost_usd`` say what was paid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import hashlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from tests.fake_batches import BatchDesk

_SECTION = re.compile(r"<(text|part|document)[^>]*>\n(.*?)\n</\1>", re.S)
_FIRST_SENTENCE = re.compile(r".+?(?:[.!?](?=\s)|[。！？；]|$)", re.S)
_NUMBERED = re.compile(r"^\[(S\d+)\] (.+)$", re.M)
_STATED_BOUND = re.compile(r"The answer must fit in (\d+) tokens")
# Han, kana, Hangul, CJK punctuation and full-width forms: one token each.
_CJK = re.compile(
    "[\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\u1100-\u11ff\u3130-\u318f\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]"
)

DEFAULT_MODEL = "stand-in-1"
# Config fields: settable as attributes, with `configure(...)`, over POST /_config and from the CLI.
CONFIG_FIELDS = (
    "latency_s",
    "jitter_s",
    "fail_rate",
    "hang_rate",
    "hang_s",
    "rpm_limit",
    "rate_window_s",
    "max_prompt_tokens",
    "reject_marker",
    "seed",
    "models",
    "streaming",
    "ignores_stream",
    "token_latency_s",
    "answer_min_tokens",
    "dialect",
    "num_ctx",
    "model_context_length",
    "structured_output",
    "citation_fault",
    "invented_sentence",
    "copies_merges",
    "poison_marker",
    "poison",
)
DIALECTS = ("openai", "llamacpp", "ollama")
STRUCTURED_OUTPUT = ("enforce", "ignore", "refuse")
CITATION_FAULTS = ("omit", "invent", "free")
POISONS = ("nul", "surrogate", "nesting")
NESTING = 1_000  # brackets a `nesting` answer opens with: past json's recursion limit
_POLL_S = 0.02  # how often wait_idle looks
_STOP_POLL_S = 0.1  # how often a waiting request checks for a server that stops (a client that leaves: at once)
_WORDS_PER_PIECE = 3  # a streamed answer's text arrives this many words (or CJK characters) at a time
# A word with the whitespace before it; a CJK character is a word of its own; trailing whitespace.
_WORD = re.compile(f"\\s*(?:{_CJK.pattern}|[^\\s{_CJK.pattern[1:-1]}]+)|\\s+")
_MAX_ANSWER_MIN_TOKENS = 1_000_000
LLAMACPP_DEFAULT_N_CTX = 4096  # llama.cpp's n_ctx when max_prompt_tokens is unset
LLAMACPP_BUILD = "b5490-fakellm"
OLLAMA_NUM_KEEP = 4  # the tokens Ollama's runner keeps from a prompt's start when it cuts the prompt
OLLAMA_VERSION = "0.6.8"


def estimate_tokens(text: str) -> int:
    """About one token per 4 non-CJK characters, one per CJK character (0 for an empty text)."""
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """What the ledger hashes and counts: the messages' texts, joined by blank lines."""
    return "\n\n".join(_content_text(m.get("content")) for m in messages)


def user_text(messages: list[dict[str, Any]]) -> str:
    """The last user message (what `FakeLLM.answer` summarizes)."""
    return next((_content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _within(bound: int | None, n: int, answer: Callable[[int], str]) -> str:
    """`answer(n)` (an answer of its first n sentences), or the longest `answer(k)` whose estimate fits the
    `bound` the prompt stated (one sentence at least: a model says something)."""
    if bound is None:
        return answer(n)
    k = 1
    while k < n and estimate_tokens(answer(k + 1)) <= bound:
        k += 1
    return answer(k)


def _truncate(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` whose estimate fits in `max_tokens`."""
    if estimate_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def _truncate_tail(text: str, max_tokens: int) -> str:
    """The longest suffix of `text` whose estimate fits in `max_tokens`."""
    if estimate_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[len(text) - mid :]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[len(text) - lo :]


def ollama_cut(messages: list[dict[str, Any]], num_ctx: int) -> tuple[list[dict[str, Any]], int] | None:
    """What Ollama's runner keeps of a prompt longer than `num_ctx` tokens: its first `OLLAMA_NUM_KEEP`
    tokens and as much of its end as fits, the middle dropped without a word. Returns the messages as
    they are left (a message wholly in the dropped middle disappears) and the tokens kept; None when
    the prompt fits."""
    prompt = prompt_text(messages)
    if estimate_tokens(prompt) <= num_ctx:
        return None
    head = _truncate(prompt, min(OLLAMA_NUM_KEEP, num_ctx - 1))
    tail = _truncate_tail(prompt[len(head) :], num_ctx - estimate_tokens(head))
    head_end, tail_start = len(head), len(prompt) - len(tail)
    kept: list[dict[str, Any]] = []
    start = 0
    for message in messages:
        end = start + len(_content_text(message.get("content")))
        if start < head_end or end > tail_start:
            kept.append(
                {**message, "content": prompt[start : min(end, head_end)] + prompt[max(start, tail_start) : end]}
            )
        start = end + 2  # the blank line joining the messages
    return kept, estimate_tokens(head + tail)


# What a poisoned sentence ends with, as the model writes it: U+0000 (json.dumps writes a JSON answer's
# as the escape "\u0000"), or the six characters of the escape "\ud800".
_POISON_ENDS = {"nul": "\x00", "surrogate": "\\ud800"}


def _poisoned(sentence: str, poison: str | None) -> str:
    return sentence + _POISON_ENDS.get(poison or "", "")


def _copied(section: str, numbered: list[tuple[str, str]], response_format: Any) -> str:
    """A section of the prompt given back as the answer: its numbered sentences, each citing its own id
    (JSON under a citing schema, else a line each), or its text as it is."""
    if not numbered:
        return section.strip()
    if _json_schema(response_format) is not None:
        return json.dumps({"sentences": [{"text": t, "sources": [i]} for i, t in numbered]}, ensure_ascii=False)
    return "\n".join(f"{t} [{i}]" for i, t in numbered)


def _escaped(answer: str, poison: str | None) -> str:
    """A JSON answer as the model writes it: its "\\ud800" is an escape (a lone surrogate once decoded),
    not the text json.dumps made of it (the backslash escaped)."""
    return answer.replace("\\\\ud800", "\\ud800") if poison == "surrogate" else answer


def _nested(answer: str, poison: str | None) -> str:
    return "[" * NESTING + answer + "]" * NESTING if poison == "nesting" else answer


def _at_most(text: str, chars: int) -> str:
    """`text`, or as many of its words as fit in `chars` and "…": a summary is shorter than its input."""
    if len(text) <= chars:
        return text
    cut = text.rfind(" ", 0, chars)
    return text[: cut if cut > 0 else chars].rstrip() + "…"


def _ramble(text: str, sentences: list[str], min_tokens: int) -> str:
    """`text` followed by `sentences`, over and over, until its estimate reaches `min_tokens`."""
    cjk, chars = len(_CJK.findall(text)), len(text)
    sizes = [(len(_CJK.findall(s)), len(s) + 1) for s in sentences]
    parts, i = [text], 0
    while cjk + math.ceil((chars - cjk) / 4) < min_tokens:
        parts.append(" " + sentences[i % len(sentences)])
        cjk, chars = cjk + sizes[i % len(sentences)][0], chars + sizes[i % len(sentences)][1]
        i += 1
    return "".join(parts)


def pieces(text: str) -> list[str]:
    """How a streamed answer's text arrives: a few words at a time; joined, they are `text`."""
    words = _WORD.findall(text)
    return ["".join(words[i : i + _WORDS_PER_PIECE]) for i in range(0, len(words), _WORDS_PER_PIECE)]


def _json_schema(response_format: Any) -> dict[str, Any] | None:
    """The schema of a ``response_format`` of type json_schema; None for anything else."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def _schema_ids(schema: dict[str, Any]) -> list[str]:
    """The ids a citing schema allows: the enum of its sentences' sources."""
    try:
        enum = schema["properties"]["sentences"]["items"]["properties"]["sources"]["items"]["enum"]
    except (KeyError, TypeError):
        return []
    return [i for i in enum if isinstance(i, str)]


def _error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _llamacpp_error(body: dict[str, Any], status: int) -> dict[str, Any]:
    """An OpenAI-shaped error body as llama-server shapes its errors: {"error": {code, message, type}}."""
    error = body.get("error")
    if not isinstance(error, dict) or isinstance(error.get("code"), int):
        return body
    return {"error": {"code": status, "message": error.get("message", ""), "type": error.get("type", "server_error")}}


def _ollama_name(name: str) -> str:
    """Ollama's full model name: a name without a tag is the ``:latest`` one."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _timings(prompt_n: int, prompt_s: float, predicted_n: int, predicted_s: float) -> dict[str, Any]:
    """llama.cpp's ``timings`` (times from the configured latencies, so they are reproducible)."""
    prompt_ms, predicted_ms = max(prompt_s * 1000, 0.01 * prompt_n), max(predicted_s * 1000, 0.01 * predicted_n)
    return {
        "cache_n": 0,
        "prompt_n": prompt_n,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / prompt_n, 3),
        "prompt_per_second": round(1000 * prompt_n / prompt_ms, 3),
        "predicted_n": predicted_n,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / predicted_n, 3),
        "predicted_per_second": round(1000 * predicted_n / predicted_ms, 3),
    }


@dataclass
class LedgerEntry:
    """One request, recorded when it finished (answered, failed, refused, or abandoned by its client)."""

    started: float  # time.time() when the request arrived
    finished: float  # time.time() when it was answered (or found abandoned)
    model: str
    status: int  # HTTP status sent; 499 = the client gave up first
    prompt_sha256: str
    prompt: str  # the messages' texts joined by blank lines (see `prompt_text`)
    user: str  # the last user message
    prompt_chars: int
    prompt_tokens: int  # the prompt as sent (usage reports `truncated_to` instead when it was cut)
    completion_tokens: int  # 0 unless answered
    attempt: int = 0  # how many requests with the same prompt arrived before this one
    in_flight: int = 1  # requests in flight when this one arrived, itself included
    error: str | None = None  # why it was not answered (see `FakeLLM._decide`), None when answered
    over_budget: bool = False  # refused because the prompt exceeded the context (max_prompt_tokens / n_ctx)
    hung: bool = False  # held by hang_next / hang_rate
    retry_after: float | None = None  # the Retry-After sent with a 429
    stream: bool = False  # the request asked for a stream
    max_tokens: int | None = None  # the max_completion_tokens / max_tokens the request asked for
    num_ctx: int | None = None  # the context in force: max_prompt_tokens, llama.cpp's n_ctx, Ollama's num_ctx
    truncated_to: int | None = None  # the prompt tokens kept when Ollama cut the prompt to its num_ctx
    finish_reason: str | None = None  # "stop" or "length" when answered
    frequency_penalty: float | None = None  # as the request sent it
    tier: str = "realtime"  # "realtime", "flex" (service_tier: "flex") or "batch" (a line of a batch)
    price_factor: float = 1.0  # what it costs relative to a realtime call (batch and flex: half)
    batch_id: str | None = None  # a batch line's batch
    custom_id: str | None = None  # a batch line's custom_id

    @property
    def at(self) -> float:
        return self.started

    @property
    def usage_prompt_tokens(self) -> int:
        """The prompt tokens the answer's usage reports (what the server read of the prompt)."""
        return self.prompt_tokens if self.truncated_to is None else self.truncated_to

    @property
    def duration_s(self) -> float:
        return self.finished - self.started

    def as_dict(self, text: bool = True) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if not text:
            del data["prompt"], data["user"]
        return data


@dataclass
class _Decision:
    status: int = 200
    error: str | None = None
    wait_s: float = 0.0
    hung: bool = False
    over_budget: bool = False
    retry_after: float | None = None
    body: dict[str, Any] | None = None


@dataclass
class _Reply:
    text: str
    finish_reason: str
    pieces: list[str]
    prompt_tokens: int  # as usage reports them
    completion_tokens: int
    truncated_to: int | None


@dataclass(eq=False)
class FakeLLM:
    latency_s: float = 0.0  # every answer and 5xx failure waits this long...
    jitter_s: float = 0.0  # ... plus [0, jitter_s) derived from the prompt's hash
    fail_rate: float = 0.0  # share of requests answered 500
    hang_rate: float = 0.0  # share of requests held hang_s seconds
    hang_s: float = 3600.0
    rpm_limit: int | None = None  # requests accepted per rolling window; beyond -> 429 + Retry-After
    rate_window_s: float = 60.0
    max_prompt_tokens: int | None = None  # longer prompts -> 400 context_length_exceeded
    reject_marker: str | None = "FAKE_LLM_REJECT"  # a prompt containing it -> 400; None disables
    seed: int = 0  # mixed into every hash-based decision (fail_rate, hang_rate, jitter)
    models: list[str] = field(default_factory=lambda: [DEFAULT_MODEL])  # what GET /v1/models lists
    streaming: bool = True  # False: a request with stream: true -> 400 (a server that does not stream)
    ignores_stream: bool = False  # True: stream: true is answered with one JSON body, as if not asked
    token_latency_s: float = 0.0  # the wait before each piece of an answer's text (also when not streamed)
    answer_min_tokens: int | None = None  # answers are made at least this long (sentences repeated)
    dialect: str = "openai"  # the server stood for: "openai", "llamacpp" or "ollama" (see the module doc)
    num_ctx: int = 2048  # Ollama: the context a prompt is cut to (the model's num_ctx parameter)
    model_context_length: int = 32768  # Ollama: the model's trained context (/api/show llama.context_length)
    structured_output: str = "enforce"  # what it does with a response_format: "enforce", "ignore", "refuse"
    citation_fault: str | None = None  # a weak model citing: "omit", "invent", "free" (None: as asked)
    invented_sentence: str | None = None  # a sentence each cited answer adds, said by nothing it was shown
    copies_merges: bool = False  # a merge is answered with its first text copied (a model too small to merge)
    poison_marker: str | None = "FAKE_LLM_POISON"  # a prompt containing it gets a hostile answer; None disables
    poison: str = "nul"  # what that answer holds: "nul", "surrogate", "nesting" (see the module doc)
    ledger: list[LedgerEntry] = field(default_factory=list)
    max_in_flight: int = field(default=0, init=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _in_flight: int = field(default=0, init=False, repr=False)
    _forced: deque[tuple[str, int, float | None]] = field(default_factory=deque, init=False, repr=False)
    _window: deque[float] = field(default_factory=deque, init=False, repr=False)  # accepted, monotonic
    _attempts: Counter[str] = field(default_factory=Counter, init=False, repr=False)
    _sequence: int = field(default=0, init=False, repr=False)
    batches: BatchDesk = field(init=False, repr=False)  # the Files and Batch APIs, flex, prices

    def __post_init__(self) -> None:
        from tests.fake_batches import BatchDesk  # it builds on this module

        self.batches = BatchDesk(self)
        self.configure(**self.config())  # validates the constructor's values

    # ----------------------------------------------------------------------------------------------
    # Controls

    def config(self) -> dict[str, Any]:
        with self._lock:
            values = {name: getattr(self, name) for name in CONFIG_FIELDS}
        values["models"] = list(values["models"])
        return {**values, **self.batches.config()}

    def configure(self, **changes: Any) -> dict[str, Any]:
        """Set config fields (validated, all or none); returns the new config."""
        batch_fields = set(changes) & set(self.batches.values)
        unknown = set(changes) - set(CONFIG_FIELDS) - batch_fields
        if unknown:
            raise ValueError(f"unknown config field(s): {', '.join(sorted(unknown))}")
        values = {name: _validate(name, value) for name, value in changes.items() if name not in batch_fields}
        batch_values = self.batches.check({name: changes[name] for name in batch_fields})
        with self._lock:
            for name, value in values.items():
                setattr(self, name, value)
            self.batches.apply(batch_values)
        return self.config()

    def fail_next(self, n: int = 1, status: int = 500, retry_after: float | None = None) -> None:
        """The next `n` requests fail with `status` (a 429 carries Retry-After, 1 s unless given)."""
        if not 400 <= status <= 599:
            raise ValueError("status must be a 4xx or 5xx code")
        if status == 429 and retry_after is None:
            retry_after = 1.0
        with self._lock:
            self._forced.extend([("fail", status, retry_after)] * n)

    def rate_limit_next(self, n: int = 1, retry_after: float = 1.0) -> None:
        """The next `n` requests are refused 429 with ``Retry-After: retry_after``."""
        self.fail_next(n, status=429, retry_after=retry_after)

    def hang_next(self, n: int = 1) -> None:
        """The next `n` requests are held `hang_s` seconds (the client times out first)."""
        with self._lock:
            self._forced.extend([("hang", 0, None)] * n)

    def reset(self, config: bool = False) -> None:
        """Forget the ledger, attempts, rate window and pending fail/hang_next; `config=True` also
        restores every config field to its default."""
        with self._lock:
            self.ledger.clear()
            self._forced.clear()
            self._window.clear()
            self._attempts.clear()
            self.max_in_flight = self._in_flight
            self.batches.reset(config=config)
            if config:
                for f in dataclasses.fields(self):
                    if f.name in CONFIG_FIELDS:
                        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                        setattr(self, f.name, default)

    def held(self) -> dict[str, int]:
        """How many Files and Batch requests wait at each `batch_hold` point now (GET /_held)."""
        return self.batches.held()

    def wait_held(self, point: str, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until exactly `count` requests wait at the `batch_hold` point `point` (False on timeout)."""
        return self.batches.wait_held(point, count, timeout)

    # ----------------------------------------------------------------------------------------------
    # Ledger

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def entries(self, status: int | None = None) -> list[LedgerEntry]:
        """A copy of the ledger (only the entries with `status` when given)."""
        self.batches.tick()  # batch lines whose turn has come are answered first
        with self._lock:
            return [e for e in self.ledger if status is None or e.status == status]

    def count(self, status: int | None = 200) -> int:
        """Requests finished with `status` (answered ones by default; None counts all)."""
        return len(self.entries(status))

    def repeats(self) -> int:
        """Answered requests whose prompt had already been answered (calls paid twice)."""
        seen: set[str] = set()
        repeated = 0
        for entry in self.entries(200):
            repeated += entry.prompt_sha256 in seen
            seen.add(entry.prompt_sha256)
        return repeated

    def tokens(self) -> tuple[int, int]:
        """(prompt tokens, completion tokens) summed over answered requests, as their usage reported
        them (a prompt Ollama cut counts what it kept)."""
        answered = self.entries(200)
        return sum(e.usage_prompt_tokens for e in answered), sum(e.completion_tokens for e in answered)

    def summary(self, entries: bool = True, text: bool = True, since: int = 0) -> dict[str, Any]:
        """What GET /_ledger returns; `since` skips the first entries, `text=False` drops prompts."""
        self.batches.tick()
        with self._lock:
            ledger = list(self.ledger)
            in_flight, max_in_flight = self._in_flight, self.max_in_flight
        prompt, completion = self.tokens()
        data: dict[str, Any] = {
            "count": len(ledger),
            "by_status": {str(k): v for k, v in sorted(Counter(e.status for e in ledger).items())},
            "repeats": self.repeats(),
            "tokens": {"prompt": prompt, "completion": completion},
            "over_budget": sum(e.over_budget for e in ledger),
            "truncated": sum(e.truncated_to is not None for e in ledger),
            "max_prompt_tokens_seen": max((e.prompt_tokens for e in ledger), default=0),
            "in_flight": in_flight,
            "max_in_flight": max_in_flight,
            "cost_by_tier": (costs := self.batches.costs(ledger)),
            "cost_usd": round(sum(tier["cost_usd"] for tier in costs.values()), 9),
            "batches": self.batch_times(),
            "config": self.config(),
        }
        if entries:
            data["entries"] = [e.as_dict(text) for e in ledger[since:]]
        return data

    def batch_times(self) -> list[dict[str, Any]]:
        """Each batch's id, and when it was created and completed (None: not yet), in real seconds: the
        Batch objects say it to the second only."""
        batches = list(self.batches.batches.values())
        return [{"id": b.id, "created": b.created, "completed_at": b.completed_at} for b in batches]

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no request is in flight (e.g. until abandoned requests are recorded)."""
        deadline = time.monotonic() + timeout
        while self.in_flight:
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_S)
        return True

    # ----------------------------------------------------------------------------------------------
    # Answers

    def answer(self, messages: list[dict[str, Any]], response_format: Any = None) -> str:
        """ "[8 hex of the user message's sha256] " + the first sentence of each <text>/<part>/<document>
        section of the last user message (or of the whole message): same request, same answer, same
        language. A prompt of numbered sentences gets an answer that cites them (see the module doc)."""
        user = user_text(messages)
        stated = _STATED_BOUND.search(prompt_text(messages))
        bound = int(stated.group(1)) if stated and self.answer_min_tokens is None else None
        with self._lock:
            poison = self.poison if self.poison_marker and self.poison_marker in user else None
        sections = [body for _, body in _SECTION.findall(user)] or [user]
        numbered = [_NUMBERED.findall(body) for body in sections]
        with self._lock:
            copies = self.copies_merges and len(sections) > 1
        if copies:
            return _copied(sections[0], numbered[0], response_format)
        if any(numbered):
            return self._cited_answer([n[0] for n in numbered if n], response_format, bound, poison)
        firsts = []
        for body in sections:
            match = _FIRST_SENTENCE.search(body.strip())
            firsts.append((match.group(0) if match else body)[:300].strip())
        digest = hashlib.sha256(user.encode()).hexdigest()[:8]
        sentences = [_poisoned(f, poison) for f in firsts if f]
        min_tokens = self.answer_min_tokens
        if min_tokens is not None:  # a rambling model: the same sentences again until it is that long
            return _ramble(f"[{digest}] " + " ".join(sentences), sentences or [f"[{digest}]"], min_tokens)
        return _nested(_within(bound, len(sentences), lambda n: f"[{digest}] " + " ".join(sentences[:n])), poison)

    def _cited_answer(
        self, firsts: list[tuple[str, str]], response_format: Any, bound: int | None, poison: str | None = None
    ) -> str:
        """Each section's first numbered sentence, its own words, citing its id as asked (or as the
        `citation_fault` has it); as many as fit the `bound` the prompt states; `poison` as told."""
        with self._lock:
            fault, structured, min_tokens = self.citation_fault, self.structured_output, self.answer_min_tokens
            invented = self.invented_sentence
        said = [
            _poisoned(("总之，" if _CJK.match(text) else "In all, ") + _at_most(text, 300), poison)
            for _, text in firsts
        ]
        ids = [[sid] for sid, _ in firsts]
        if invented and firsts:
            said, ids = [*said, invented], [*ids, [firsts[0][0]]]
        if min_tokens is not None and said:  # a rambling model: its sentences again, until it is that long
            once = sum(estimate_tokens(t) for t in said)
            rounds = max(1, math.ceil(min_tokens / max(1, once)))
            said, ids = said * rounds, ids * rounds
        schema = _json_schema(response_format)
        if schema is not None and structured == "enforce":
            allowed = set(_schema_ids(schema))
            cited = [[] if fault in ("omit", "free") else [i for i in sid if i in allowed] for sid in ids]
            sentences = [{"text": t, "sources": c} for t, c in zip(said, cited, strict=True)]
            return _within(
                bound,
                len(sentences),
                lambda n: _escaped(json.dumps({"sentences": sentences[:n]}, ensure_ascii=False), poison),
            )
        if fault == "free":
            return _nested(_within(bound, len(said), lambda n: " ".join(said[:n])), poison)
        if fault == "invent":
            ids = [[f"S{int(sid[0][1:]) + 1000}"] for sid in ids]
        lines = [
            t if fault == "omit" else t + " " + "".join(f"[{i}]" for i in sid) for t, sid in zip(said, ids, strict=True)
        ]
        return _nested(_within(bound, len(lines), lambda n: "\n".join(lines[:n])), poison)

    def context_size(self) -> int | None:
        """The context in force: max_prompt_tokens (openai), n_ctx (llamacpp), num_ctx (ollama)."""
        with self._lock:
            if self.dialect == "llamacpp":
                return self.max_prompt_tokens or LLAMACPP_DEFAULT_N_CTX
            return self.num_ctx if self.dialect == "ollama" else self.max_prompt_tokens

    def _reply(
        self, messages: list[dict[str, Any]], body: dict[str, Any], tokens: int, dialect: str, context: int | None
    ) -> _Reply:
        """The answer to a request, as the dialect makes it (Ollama first cuts a prompt longer than its
        num_ctx, `context`)."""
        truncated_to = None
        if dialect == "ollama" and context is not None and (cut := ollama_cut(messages, context)) is not None:
            messages, truncated_to = cut
        text, finish_reason = self.answer(messages, body.get("response_format")), "stop"
        # Ollama's OpenAI-compatible endpoint knows max_tokens only.
        asked = (
            [body.get("max_tokens")]
            if dialect == "ollama"
            else [body.get("max_completion_tokens"), body.get("max_tokens")]
        )
        limit = next((v for v in asked if v), None)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 and estimate_tokens(text) > limit:
            text, finish_reason = _truncate(text, limit), "length"
        return _Reply(
            text,
            finish_reason,
            pieces(text),
            tokens if truncated_to is None else max(1, truncated_to),
            max(1, estimate_tokens(text)),
            truncated_to,
        )

    def delay_s(self, prompt_sha256: str) -> float:
        """The wait before an answer or 5xx failure: latency_s plus the prompt's deterministic jitter."""
        with self._lock:
            latency, jitter = self.latency_s, self.jitter_s
        return latency + (jitter * self._draw("jitter", prompt_sha256, 0) if jitter else 0.0)

    def _draw(self, kind: str, prompt_sha256: str, attempt: int) -> float:
        """A number in [0, 1) fixed by (seed, kind, prompt, attempt)."""
        digest = hashlib.sha256(f"{self.seed}:{kind}:{prompt_sha256}:{attempt}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def _decide(self, sha: str, tokens: int, prompt: str, attempt: int) -> _Decision:
        """What happens to a request (called under the lock)."""
        if self._forced:
            kind, status, retry_after = self._forced.popleft()
            if kind == "hang":
                return _Decision(error="hang", wait_s=self.hang_s, hung=True)
            if status == 429:
                return _rate_limited(retry_after or 1.0, "fail_next")
            body = _error_body(
                f"injected failure ({status})", "server_error" if status >= 500 else "invalid_request_error", None
            )
            return _Decision(status, "fail_next", self.delay_s(sha) if status >= 500 else 0.0, body=body)
        if self.rpm_limit is not None:
            now = time.monotonic()
            while self._window and self._window[0] <= now - self.rate_window_s:
                self._window.popleft()
            if len(self._window) >= self.rpm_limit:
                wait = self._window[0] + self.rate_window_s - now if self._window else self.rate_window_s
                return _rate_limited(max(wait, 0.001), "rate_limited")
            self._window.append(now)
        return self._decide_content(sha, tokens, prompt, attempt)

    def _decide_content(self, sha: str, tokens: int, prompt: str, attempt: int) -> _Decision:
        """What the prompt itself meets: the context limit, the reject marker, hang_rate, fail_rate
        (called under the lock; batch lines meet these too)."""
        if self.dialect == "llamacpp" and tokens >= (n_ctx := self.max_prompt_tokens or LLAMACPP_DEFAULT_N_CTX):
            # llama-server refuses a prompt that leaves no room in its context (n_tokens >= n_ctx).
            message = (
                f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
            )
            body = {
                "error": {
                    "code": 400,
                    "message": message,
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": tokens,
                    "n_ctx": n_ctx,
                }
            }
            return _Decision(400, "context_length_exceeded", over_budget=True, body=body)
        if self.dialect == "openai" and self.max_prompt_tokens is not None and tokens > self.max_prompt_tokens:
            message = (
                f"This model's maximum context length is {self.max_prompt_tokens} tokens. However, your "
                f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
            )
            body = _error_body(message, "invalid_request_error", "context_length_exceeded", "messages")
            return _Decision(400, "context_length_exceeded", over_budget=True, body=body)
        if self.reject_marker and self.reject_marker in prompt:
            body = _error_body(
                "The provider rejected this prompt.", "invalid_request_error", "invalid_prompt", "messages"
            )
            return _Decision(400, "rejected_prompt", body=body)
        if self.hang_rate and self._draw("hang", sha, attempt) < self.hang_rate:
            return _Decision(error="hang", wait_s=self.hang_s, hung=True)
        if self.fail_rate and self._draw("fail", sha, attempt) < self.fail_rate:
            body = _error_body("injected failure (fail_rate)", "server_error", None)
            return _Decision(500, "fail_rate", self.delay_s(sha), body=body)
        return _Decision(wait_s=self.delay_s(sha))

    def app(self) -> FastAPI:
        """A FastAPI app serving this FakeLLM. Setting ``app.state.stopping`` (a threading.Event) makes
        waiting requests answer 503 at once, so the server can shut down."""
        app = FastAPI()
        stopping = threading.Event()
        app.state.stopping = stopping

        async def interrupted(request: Request) -> str | None:
            """Why a request stops now: "shutdown" (the server stops), "client_closed", or None."""
            if stopping.is_set():
                return "shutdown"
            return "client_closed" if await request.is_disconnected() else None

        async def client_gone(request: Request) -> None:
            """Returns when the client closes its connection: the server hears of it (as vLLM's API server
            listens for it), rather than asking now and then."""
            while (await request.receive())["type"] != "http.disconnect":
                pass

        async def wait(request: Request, seconds: float) -> str | None:
            """Sleep `seconds`; "client_closed" / "shutdown" when interrupted."""
            deadline = time.monotonic() + seconds
            gone = asyncio.ensure_future(client_gone(request))
            try:
                while (left := deadline - time.monotonic()) > 0:
                    if stopping.is_set():
                        return "shutdown"
                    await asyncio.wait((gone,), timeout=min(left, _STOP_POLL_S))
                    if gone.done():
                        return "client_closed"
                return None
            finally:
                gone.cancel()

        def record(entry: LedgerEntry) -> None:
            with self._lock:
                self.ledger.append(entry)

        def finish(entry: LedgerEntry) -> None:
            entry.finished = time.time()
            with self._lock:
                self._in_flight -= 1
                self.ledger.append(entry)

        def fingerprint(dialect: str) -> str:
            return {"llamacpp": LLAMACPP_BUILD, "ollama": "fp_ollama"}.get(dialect, "fake-llm")

        def error_response(
            body: dict[str, Any], status: int, dialect: str, headers: dict[str, str] | None = None
        ) -> Response:
            if dialect == "llamacpp":
                body = _llamacpp_error(body, status)
            return JSONResponse(body, status, headers=headers)

        async def completions(request: Request) -> Response:
            started = time.time()
            dialect = self.dialect
            try:
                body = await request.json()
                messages = body["messages"]
                if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                    raise TypeError("messages must be a list of objects")
                model = str(body.get("model") or "")
            except (ValueError, KeyError, TypeError) as exc:
                entry = LedgerEntry(
                    started, time.time(), "", 400, _sha256(""), "", "", 0, 0, 0, error="invalid_request"
                )
                record(entry)
                return error_response(
                    _error_body(f"invalid request: {exc}", "invalid_request_error", None), 400, dialect
                )
            prompt, user = prompt_text(messages), user_text(messages)
            sha, tokens = _sha256(prompt), max(1, estimate_tokens(prompt))
            asked_stream = bool(body.get("stream"))
            tier = "flex" if body.get("service_tier") == "flex" else "realtime"  # flex: half price, may 429
            asked = body.get("max_completion_tokens") or body.get("max_tokens")
            with self._lock:
                stream = asked_stream and not self.ignores_stream
                attempt = self._attempts[sha]
                self._attempts[sha] += 1
                self._in_flight += 1
                in_flight = self._in_flight
                self.max_in_flight = max(self.max_in_flight, in_flight)
                self._sequence += 1
                sequence = self._sequence
                dialect, token_latency, context = self.dialect, self.token_latency_s, self.context_size()
                if stream and not self.streaming:
                    message = "the stand-in LLM does not stream"
                    decision = _Decision(
                        400, "invalid_request", body=_error_body(message, "invalid_request_error", None)
                    )
                elif self.structured_output == "refuse" and body.get("response_format") is not None:
                    message = "response_format of type json_schema is not supported by this server"
                    error = _error_body(message, "invalid_request_error", None, "response_format")
                    decision = _Decision(400, "response_format", body=error)
                else:
                    decision = self._decide(sha, tokens, prompt, attempt)
                    if tier == "flex" and decision.status == 200 and not decision.hung:
                        decision = self.batches.flex_decision(sha, attempt) or decision
                price_factor = self.batches.price_factor(tier)
            entry = LedgerEntry(
                started,
                0.0,
                model,
                decision.status,
                sha,
                prompt,
                user,
                len(prompt),
                tokens,
                0,
                attempt=attempt,
                in_flight=in_flight,
                error=decision.error,
                over_budget=decision.over_budget,
                hung=decision.hung,
                retry_after=decision.retry_after,
                stream=asked_stream,
                max_tokens=asked if isinstance(asked, int) and not isinstance(asked, bool) else None,
                num_ctx=context,
                frequency_penalty=body.get("frequency_penalty"),
                tier=tier,
                price_factor=price_factor,
            )
            streaming = False  # once the stream is handed over, it records the entry itself
            try:
                reply = None
                if decision.status == 200:
                    reply = self._reply(messages, body, tokens, dialect, context)
                    entry.truncated_to = reply.truncated_to
                wait_s = decision.wait_s
                if reply is not None and not stream:  # a plain answer arrives once all of it is made
                    wait_s += token_latency * len(reply.pieces)
                reason = await wait(request, wait_s) if wait_s > 0 else None
                if reason == "shutdown":
                    entry.status, entry.error = 503, entry.error or "shutdown"
                    body_503 = _error_body("the stand-in is shutting down", "server_error", None)
                    return error_response(body_503, 503, dialect)
                if reason == "client_closed":
                    entry.status, entry.error = 499, entry.error or "client_closed"
                    return Response(status_code=499)
                if decision.status != 200 or reply is None:
                    headers = {}
                    if decision.retry_after is not None:
                        headers["Retry-After"] = str(math.ceil(decision.retry_after))
                        headers["retry-after-ms"] = str(math.ceil(decision.retry_after * 1000))
                    return error_response(decision.body or {}, decision.status, dialect, headers)
                usage = {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                }
                timings = (
                    _timings(
                        reply.prompt_tokens, decision.wait_s, reply.completion_tokens, token_latency * len(reply.pieces)
                    )
                    if dialect == "llamacpp"
                    else None
                )
                head = {
                    "id": f"chatcmpl-{sha[:12]}-{sequence}",
                    "created": int(started),
                    "model": model,
                    "system_fingerprint": fingerprint(dialect),
                }
                if stream:
                    options = body.get("stream_options")
                    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
                    streaming = True
                    return _EventStream(
                        lambda send: stream_answer(
                            send, request, entry, reply, head, usage if include_usage else None, timings, token_latency
                        )
                    )
                entry.status, entry.error = 200, None
                entry.completion_tokens, entry.finish_reason = reply.completion_tokens, reply.finish_reason
                answer = {
                    "id": head["id"],
                    "object": "chat.completion",
                    "created": head["created"],
                    "model": model,
                    "system_fingerprint": head["system_fingerprint"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": reply.finish_reason,
                            "message": {"role": "assistant", "content": reply.text},
                            "logprobs": None,
                        }
                    ],
                    "usage": usage,
                }
                if tier == "flex":
                    answer["service_tier"] = "flex"
                if timings is not None:
                    answer["timings"] = timings
                return JSONResponse(answer)
            finally:
                if not streaming:
                    finish(entry)

        async def stream_answer(
            send: Send,
            request: Request,
            entry: LedgerEntry,
            reply: _Reply,
            head: dict[str, Any],
            usage: dict[str, Any] | None,
            timings: dict[str, Any] | None,
            token_latency: float,
        ) -> None:
            """Sends the answer as server-sent events, waiting `token_latency` before each piece of text;
            records the entry when the stream ends (499 if the client left first, 503 if the server
            stopped first)."""

            def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                data = {**head, "object": "chat.completion.chunk", "choices": [choice]}
                if usage is not None:
                    data["usage"] = None  # as OpenAI does when the usage comes in a chunk of its own
                return data

            async def event(data: dict[str, Any] | str, more: bool = True) -> None:
                text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
                await send({"type": "http.response.body", "body": f"data: {text}\n\n".encode(), "more_body": more})

            entry.status, entry.error = 499, "client_closed"  # until the stream is complete
            try:
                await send({"type": "http.response.start", "status": 200, "headers": _EventStream.HEADERS})
                await event(chunk({"role": "assistant", "content": ""}))
                for piece in reply.pieces:
                    reason = await wait(request, token_latency) if token_latency > 0 else await interrupted(request)
                    if reason:
                        if reason == "shutdown":
                            entry.status, entry.error = 503, "shutdown"
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                        return
                    await event(chunk({"content": piece}))
                last = chunk({}, reply.finish_reason)
                if timings is not None:
                    last["timings"] = timings  # llama.cpp sends them with the last chunk
                await event(last)
                if usage is not None:
                    await event({**chunk({}), "choices": [], "usage": usage})
                await event("[DONE]", more=False)
                entry.status, entry.error = 200, None
                entry.completion_tokens, entry.finish_reason = reply.completion_tokens, reply.finish_reason
            finally:
                finish(entry)

        def model_card(name: str) -> dict[str, Any]:
            return {"id": name, "object": "model", "created": 0, "owned_by": "fake-llm"}

        async def list_models() -> dict[str, Any]:
            return {"object": "list", "data": [model_card(m) for m in self.config()["models"] or [DEFAULT_MODEL]]}

        async def get_model(model_id: str) -> Response:
            if model_id in (self.config()["models"] or [DEFAULT_MODEL]):
                return JSONResponse(model_card(model_id))
            return JSONResponse(
                _error_body(f"The model '{model_id}' does not exist", "invalid_request_error", "model_not_found"), 404
            )

        for prefix in ("/v1", ""):  # some clients are given a base URL without /v1
            app.add_api_route(f"{prefix}/chat/completions", completions, methods=["POST"])
            app.add_api_route(f"{prefix}/models", list_models, methods=["GET"])
            app.add_api_route(f"{prefix}/models/{{model_id:path}}", get_model, methods=["GET"])
        from tests.fake_batches import mount as mount_batches

        mount_batches(app, self)  # /v1/files, /v1/batches

        def not_found() -> Response:
            """What this server answers for a path it does not serve (another dialect's endpoint)."""
            return JSONResponse({"detail": "Not Found"}, 404)

        # llama.cpp's own endpoints, at the root as llama-server serves them.
        async def props() -> Response:
            if self.dialect != "llamacpp":
                return not_found()
            n_ctx, model = self.context_size(), (self.config()["models"] or [DEFAULT_MODEL])[0]
            settings = {
                "id": 0,
                "id_task": -1,
                "n_ctx": n_ctx,
                "speculative": False,
                "is_processing": False,
                "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
            }
            return JSONResponse(
                {
                    "default_generation_settings": settings,
                    "total_slots": 1,
                    "model_path": f"/models/{model}.Q4_K_M.gguf",
                    "chat_template": "{{ messages }}",
                    "modalities": {"vision": False, "audio": False},
                    "build_info": LLAMACPP_BUILD,
                }
            )

        async def health() -> Response:
            return JSONResponse({"status": "ok"}) if self.dialect == "llamacpp" else not_found()

        app.add_api_route("/props", props, methods=["GET"])
        for path in ("/health", "/v1/health"):
            app.add_api_route(path, health, methods=["GET"])

        # Ollama's own endpoints.
        def ollama_details() -> dict[str, Any]:
            return {
                "parent_model": "",
                "format": "gguf",
                "family": "llama",
                "families": ["llama"],
                "parameter_size": "8.0B",
                "quantization_level": "Q4_K_M",
            }

        @app.get("/")
        async def ollama_root() -> Response:
            return PlainTextResponse("Ollama is running") if self.dialect == "ollama" else not_found()

        @app.get("/api/version")
        async def ollama_version() -> Response:
            return JSONResponse({"version": OLLAMA_VERSION}) if self.dialect == "ollama" else not_found()

        @app.get("/api/tags")
        async def ollama_tags() -> Response:
            if self.dialect != "ollama":
                return not_found()
            models = [
                {
                    "name": _ollama_name(m),
                    "model": _ollama_name(m),
                    "modified_at": "2025-01-01T00:00:00Z",
                    "size": 4_920_753_328,
                    "digest": _sha256(_ollama_name(m)),
                    "details": ollama_details(),
                }
                for m in self.config()["models"] or [DEFAULT_MODEL]
            ]
            return JSONResponse({"models": models})

        @app.post("/api/show")
        async def ollama_show(request: Request) -> Response:
            if self.dialect != "ollama":
                return not_found()
            try:
                data = await request.json()
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, 400)
            name = (data.get("model") or data.get("name")) if isinstance(data, dict) else None
            if not isinstance(name, str) or not name:
                return JSONResponse({"error": "model is required"}, 400)
            if _ollama_name(name) not in {_ollama_name(m) for m in self.config()["models"] or [DEFAULT_MODEL]}:
                return JSONResponse({"error": f"model '{name}' not found"}, 404)
            config = self.config()
            # `ollama show` pads each parameter's name to 30 characters.
            parameters = [("num_ctx", str(config["num_ctx"])), ("stop", '"<|eot_id|>"')]
            return JSONResponse(
                {
                    "license": "",
                    "modelfile": f"FROM {name}\nPARAMETER num_ctx {config['num_ctx']}\n",
                    "parameters": "\n".join(f"{k:<30} {v}" for k, v in parameters),
                    "template": "{{ .Prompt }}",
                    "details": ollama_details(),
                    "model_info": {
                        "general.architecture": "llama",
                        "general.parameter_count": 8_030_261_248,
                        "llama.context_length": config["model_context_length"],
                        "llama.embedding_length": 4096,
                    },
                    "capabilities": ["completion"],
                    "modified_at": "2025-01-01T00:00:00Z",
                }
            )

        @app.get("/healthz")
        async def healthz() -> dict[str, Any]:
            return {"ok": True}

        @app.get("/_ledger")
        async def ledger(entries: bool = True, text: bool = True, since: int = 0) -> dict[str, Any]:
            return self.summary(entries=entries, text=text, since=since)

        @app.get("/_held")
        async def held() -> dict[str, int]:
            return self.held()

        @app.post("/_config")
        async def set_config(request: Request) -> Response:
            """Body: any config fields, plus ``fail_next`` (n, or {"n", "status", "retry_after"}) and
            ``hang_next`` (n). Answers the config now in force."""
            try:
                changes = await request.json()
                if not isinstance(changes, dict):
                    raise ValueError("the body must be a JSON object")
                fail_next, hang_next = changes.pop("fail_next", None), changes.pop("hang_next", None)
                config = self.configure(**changes)
                if fail_next is not None:
                    self.fail_next(**({"n": fail_next} if isinstance(fail_next, int) else fail_next))
                if hang_next is not None:
                    self.hang_next(int(hang_next))
            except (ValueError, TypeError) as exc:
                return JSONResponse({"error": str(exc)}, 400)
            return JSONResponse(config)

        @app.post("/_reset")
        async def reset(request: Request) -> dict[str, Any]:
            """Clears the ledger; ``{"config": true}`` also restores the default config."""
            try:
                options = await request.json()
            except ValueError:
                options = {}
            self.reset(config=bool(isinstance(options, dict) and options.get("config")))
            return {"ok": True, "config": self.config()}

        return app


class _EventStream(Response):
    """A ``text/event-stream`` response whose body `run` sends itself (it starts the response too)."""

    HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]

    def __init__(self, run: Callable[[Send], Awaitable[None]]) -> None:
        self.status_code, self.background, self.raw_headers = 200, None, list(self.HEADERS)
        self._run = run

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._run(send)
        if self.background is not None:
            await self.background()


def _rate_limited(retry_after: float, error: str) -> _Decision:
    message = f"Rate limit reached. Please try again in {retry_after:.3f}s."
    body = _error_body(message, "requests", "rate_limit_exceeded")
    return _Decision(429, error, retry_after=retry_after, body=body)


def _validate(name: str, value: Any) -> Any:
    if name in ("latency_s", "jitter_s", "hang_s", "rate_window_s", "fail_rate", "hang_rate", "token_latency_s"):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{name} must be a number >= 0")
        if name in ("fail_rate", "hang_rate") and value > 1:
            raise ValueError(f"{name} must be between 0 and 1")
        if name == "rate_window_s" and value == 0:
            raise ValueError("rate_window_s must be > 0")
        return float(value)
    if name in ("rpm_limit", "max_prompt_tokens"):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "rpm_limit" else 1):
            raise ValueError(f"{name} must be a positive integer or null")
        return value
    if name in ("reject_marker", "invented_sentence"):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string or null")
        return value or None
    if name == "seed":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("seed must be an integer")
        return value
    if name == "models":
        if isinstance(value, str) or not all(isinstance(m, str) and m for m in value):
            raise ValueError("models must be a list of names")
        return list(value)
    if name in ("streaming", "ignores_stream", "copies_merges"):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
        return value
    if name == "answer_min_tokens":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_ANSWER_MIN_TOKENS:
            raise ValueError(f"answer_min_tokens must be an integer from 1 to {_MAX_ANSWER_MIN_TOKENS} or null")
        return value
    if name == "dialect":
        if value not in DIALECTS:
            raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}")
        return value
    if name == "structured_output":
        if value not in STRUCTURED_OUTPUT:
            raise ValueError(f"structured_output must be one of {', '.join(STRUCTURED_OUTPUT)}")
        return value
    if name == "citation_fault":
        if value is not None and value not in CITATION_FAULTS:
            raise ValueError(f"citation_fault must be one of {', '.join(CITATION_FAULTS)} or null")
        return value
    if name == "poison_marker":
        if value is not None and not isinstance(value, str):
            raise ValueError("poison_marker must be a string or null")
        return value or None
    if name == "poison":
        if value not in POISONS:
            raise ValueError(f"poison must be one of {', '.join(POISONS)}")
        return value
    if name in ("num_ctx", "model_context_length"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer")
        return value
    raise ValueError(f"unknown config field: {name}")  # pragma: no cover


_handed_out: set[int] = set()


def _worker_share() -> tuple[int, int]:
    """(this process's index, how many) among the suite's pytest-xdist workers; (0, 1) outside them."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw")), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before: the kernel may
    give the same free port twice before the first taker binds it (a stack's gateway port and a service's
    health port, both picked before either process starts). Under pytest-xdist, only ports of this
    worker's share: another worker's picks, seconds before its processes bind them, are not in this
    process's memory. The share goes by port // 2: Linux hands out odd ports to bind() (even ones it keeps
    for connect()), so by port modulo two workers one of them waited for an even port for minutes."""
    index, workers = _worker_share()
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out and port // 2 % workers == index:
            _handed_out.add(port)
            return port


class _Server(uvicorn.Server):
    """A uvicorn server whose exit also releases waiting requests, and whose signal handling (in the
    main thread only) ends the process normally instead of re-raising the signal."""

    def __init__(self, config: uvicorn.Config, stopping: threading.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.stopping.set()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous: dict[int, Callable[..., Any] | int | None] = {s: signal.signal(s, self.handle_exit) for s in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class FakeLLMServer:
    """Runs a FakeLLM on 127.0.0.1: in a background thread as a context manager, or in the calling
    thread with `serve_forever` (stopped by SIGTERM / Ctrl-C)."""

    def __init__(self, llm: FakeLLM | None = None, *, port: int = 0, log_level: str = "warning") -> None:
        self.llm = llm if llm is not None else FakeLLM()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it; without it every response waits ~40 ms (Nagle + delayed ACK).
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind(("127.0.0.1", port))  # bound now: the port is known and stays ours
        self.port: int = self._socket.getsockname()[1]
        self.app = self.llm.app()
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level=log_level,
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=5,
            http="httptools",
        )
        self._server = _Server(config, self.app.state.stopping)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's root (where /_ledger, /_config and /_reset live)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL should be."""
        return f"{self.url}/v1"

    def serve_forever(self) -> None:
        self._server.run(sockets=[self._socket])
        self._socket.close()

    def stop(self) -> None:
        self.app.state.stopping.set()
        self._server.should_exit = True

    def __enter__(self) -> FakeLLMServer:
        self._thread = threading.Thread(target=self.serve_forever, name="fake-llm", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the stand-in LLM server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()


class FakeLLMProcess:
    """A FakeLLM in a process of its own (``python -m tests.fake_llm``), read and configured over its
    controls (`RemoteFakeLLM`): as a provider is, sharing no interpreter with its clients. Measures of
    how many calls a client keeps in flight need it so: a stand-in in the measuring process answers late
    whenever that process's own threads hold the interpreter."""

    def __init__(self, *args: str) -> None:
        self._args = args
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> FakeLLMProcess:
        command = [sys.executable, "-m", "tests.fake_llm", "--port", "0", *self._args]
        root = Path(__file__).resolve().parents[1]
        self._process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline().strip()  # its base URL, once it listens
        if not line.startswith("http://"):
            self.__exit__()
            raise RuntimeError(f"the stand-in LLM process did not start (it printed {line!r})")
        self.base_url = line
        self.url = line.removesuffix("/v1")
        deadline = time.monotonic() + 10
        while True:  # the port is bound before the server listens
            try:
                httpx.get(f"{self.url}/healthz", timeout=5).raise_for_status()
                break
            except httpx.ConnectError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("the stand-in LLM process did not listen") from None
                time.sleep(0.05)
        self.llm = RemoteFakeLLM(self.url)
        return self

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """How it ended (None: not yet)."""
        assert self._process is not None
        return self._process.poll()

    def __exit__(self, *exc: object) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class RemoteFakeLLM:
    """A FakeLLM in another process, through GET /_ledger and POST /_config: what the ledger's readers
    and the knobs' setters use of a FakeLLM (entries, config, configure, wait_idle, batch_times)."""

    def __init__(self, url: str) -> None:
        self._http = httpx.Client(base_url=url, timeout=60)
        self._ledger: list[LedgerEntry] = []  # the entries fetched so far (the ledger only grows)

    def configure(self, **changes: Any) -> dict[str, Any]:
        answer = self._http.post("/_config", json=changes)
        if answer.status_code != 200:
            raise ValueError(answer.json()["error"])
        config: dict[str, Any] = answer.json()
        return config

    def _summary(self, **params: Any) -> dict[str, Any]:
        answer = self._http.get("/_ledger", params=params)
        answer.raise_for_status()
        summary: dict[str, Any] = answer.json()
        return summary

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = self._summary(entries=False)["config"]
        return config

    def entries(self, status: int | None = None) -> list[LedgerEntry]:
        summary = self._summary(since=len(self._ledger))
        if summary["count"] < len(self._ledger):  # reset meanwhile: read it whole
            self._ledger = []
            summary = self._summary()
        self._ledger += [LedgerEntry(**e) for e in summary["entries"]]
        return [e for e in self._ledger if status is None or e.status == status]

    def batch_times(self) -> list[dict[str, Any]]:
        batches: list[dict[str, Any]] = self._summary(entries=False)["batches"]
        return batches

    def wait_idle(self, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while self._summary(entries=False)["in_flight"]:
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_S)
        return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fake_llm",
        description="A stand-in OpenAI-compatible LLM on 127.0.0.1 (ledger: GET /_ledger; controls: "
        "POST /_config, POST /_reset). Prints its base URL, stops on SIGTERM / Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=8100, help="0 = any free port (default 8100)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--jitter", type=float, default=0.0, help="up to this many more seconds (per prompt)")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="share of requests answered 500")
    parser.add_argument("--hang-rate", type=float, default=0.0, help="share of requests held --hang-s seconds")
    parser.add_argument("--hang-s", type=float, default=3600.0)
    parser.add_argument("--rpm", type=int, default=None, help="requests accepted per --rate-window seconds")
    parser.add_argument("--rate-window", type=float, default=60.0)
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help="longer prompts are refused 400")
    parser.add_argument("--reject-marker", default=FakeLLM.reject_marker, help="prompts containing it get 400")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", action="append", dest="models", help="a model name for /v1/models (repeatable)")
    parser.add_argument(
        "--streaming",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="answer stream: true with server-sent events (--no-streaming: 400, a server that does not stream)",
    )
    parser.add_argument(
        "--ignores-stream",
        action="store_true",
        help="answer stream: true with one JSON body, as a server or proxy that ignores stream does",
    )
    parser.add_argument("--token-latency", type=float, default=0.0, help="seconds per piece of an answer's text")
    parser.add_argument("--answer-min-tokens", type=int, default=None, help="answers ramble to at least this long")
    parser.add_argument("--dialect", choices=DIALECTS, default="openai", help="the server it stands for")
    parser.add_argument("--num-ctx", type=int, default=2048, help="ollama: the context a prompt is cut to")
    parser.add_argument(
        "--model-context-length", type=int, default=32768, help="ollama: the model's context in /api/show"
    )
    parser.add_argument(
        "--structured-output", choices=STRUCTURED_OUTPUT, default="enforce", help="what it does with response_format"
    )
    parser.add_argument("--citation-fault", choices=CITATION_FAULTS, default=None, help="cite like a weak model")
    parser.add_argument(
        "--poison-marker", default=FakeLLM.poison_marker, help="prompts containing it get a hostile answer"
    )
    parser.add_argument("--poison", choices=POISONS, default="nul", help="what a hostile answer holds")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    try:
        llm = FakeLLM(
            latency_s=args.latency,
            jitter_s=args.jitter,
            fail_rate=args.fail_rate,
            hang_rate=args.hang_rate,
            hang_s=args.hang_s,
            rpm_limit=args.rpm,
            rate_window_s=args.rate_window,
            max_prompt_tokens=args.max_prompt_tokens,
            reject_marker=args.reject_marker,
            seed=args.seed,
            models=args.models or [DEFAULT_MODEL],
            streaming=args.streaming,
            ignores_stream=args.ignores_stream,
            token_latency_s=args.token_latency,
            answer_min_tokens=args.answer_min_tokens,
            dialect=args.dialect,
            num_ctx=args.num_ctx,
            model_context_length=args.model_context_length,
            structured_output=args.structured_output,
            citation_fault=args.citation_fault,
            poison_marker=args.poison_marker,
            poison=args.poison,
        )
        server = FakeLLMServer(llm, port=args.port, log_level=args.log_level)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    print(server.base_url, flush=True)
    print(f"fake LLM: {json.dumps(llm.config())}", file=sys.stderr, flush=True)
    # As a service process does (docsum_shared.heap; this server imports nothing of docsum's): its imports
    # left out of the collector's rounds, so that a full collection (50 ms, met in the middle of a bench's
    # task) does not hold every answer in flight, as no real server's would.
    gc.collect()
    gc.freeze()
    server.serve_forever()
    summary = llm.summary(entries=False)
    totals = {k: summary[k] for k in ("by_status", "repeats", "tokens", "max_in_flight", "cost_usd")}
    print(f"fake LLM stopped: {json.dumps(totals)}", file=sys.stderr)


if __name__ == "__main__":
    main()
