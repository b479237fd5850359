"""Every prompt docsum sends to an LLM: chunk summaries, document merges and task merges.

Changing a prompt's wording changes what the model returns, so raise PROMPT_VERSION with it: the
version is part of the result cache's key, and a stored answer to an old prompt is not reused.

Unless citations are off, the texts are shown a sentence a line after their ids, and the model is
asked to say which ids each of its sentences rests on (see llm_citations.py).
"""

from __future__ import annotations

from openai.types.chat import ChatCompletionMessageParam

from .base import SummaryKind, SummaryRequest
from .llm_citations import CitationMode, Numbered, numbered

PROMPT_VERSION = "2026-12-02.1"

_SYSTEM = (
    "You summarize documents faithfully. State only what the text says; no preamble, no mention of "
    "'this chunk' or 'the summaries'."
)
_SAME_LANGUAGE = "Write in the same language as the text you are given (a Chinese text gets a Chinese summary)."
_LENGTH = {
    "brief": "Be brief: two or three sentences at most.",
    "": "Keep it concise.",
    "detailed": "Be detailed: cover every main point, with the key facts and figures.",
}
_STYLE = {"": "Write prose.", "bullets": "Write a bulleted list, one point per line starting with '- '."}


def _system(request: SummaryRequest) -> str:
    language = f"Write in {request.language}." if request.language else _SAME_LANGUAGE
    parts = [_SYSTEM, language, _LENGTH.get(request.length, _LENGTH[""]), _STYLE.get(request.style, "")]
    if request.max_tokens:
        # About 0.75 words a token in English; a CJK character is about a token.
        parts.append(f"The answer must fit in {request.max_tokens} tokens (about {request.max_tokens * 3 // 4} words).")
    if request.shorter:
        parts.append("Your previous answer was too long and was cut off: answer again, much shorter.")
    return " ".join(p for p in parts if p)


_EXAMPLE = "Kafka stores events in topics."
_CITE_TEXT = (
    "Each sentence of the {what} starts with its id in brackets, like [S1]. Write each sentence of your "
    "summary on a line of its own and end it with the ids of the sentences it is based on, in brackets, "
    "like this:\n{example} [S2][S5]\nUse only the ids shown above."
)
_CITE_JSON = (
    "Each sentence of the {what} starts with its id in brackets, like [S1]. Answer in JSON: "
    '{{"sentences": [{{"text": "{example}", "sources": ["S2", "S5"]}}]}}, each sentence of your summary '
    "with the ids of the sentences it is based on."
)


def build_messages(request: SummaryRequest, citations: CitationMode = "text") -> list[ChatCompletionMessageParam]:
    """The messages of `request`, asking for the citations `citations` says (the default, the text
    format, is also what the token budget counts)."""
    numbers = numbered(request) if citations != "off" else None
    texts = [_shown(request, numbers, i) for i in range(len(request.texts))]
    if request.kind is SummaryKind.CHUNK:
        parts = []
        if request.context_before:
            parts.append(f"<previous_context>\n{request.context_before}\n</previous_context>")
        parts.append(f"<text>\n{texts[0]}\n</text>")
        if request.context_after:
            parts.append(f"<following_context>\n{request.context_after}\n</following_context>")
        user = (
            "Summarize the text between <text> tags in a few sentences. The surrounding context is only "
            "there to resolve references; do not summarize it.\n\n" + "\n\n".join(parts)
        )
    elif request.kind is SummaryKind.DOCUMENT:
        sections = "\n\n".join(f"<part n={i + 1}>\n{t}\n</part>" for i, t in enumerate(texts))
        user = (
            f"These are summaries of consecutive parts of one document{_titled(request)}. "
            "Merge them into one coherent summary of the whole document, in order, without repetition.\n\n" + sections
        )
    else:
        labels = request.labels or tuple(f"document {i + 1}" for i in range(len(request.texts)))
        sections = "\n\n".join(
            f'<document name="{label}">\n{t}\n</document>' for label, t in zip(labels, texts, strict=True)
        )
        user = (
            f"These are summaries of the documents of one batch{_titled(request)}. Write an overall "
            "summary of the batch: the main themes first, then what each document adds.\n\n" + sections
        )
    if numbers is not None:
        what = "text" if request.kind is SummaryKind.CHUNK else "summaries"
        example = f"- {_EXAMPLE}" if request.style == "bullets" and citations == "text" else _EXAMPLE
        user += "\n\n" + (_CITE_JSON if citations == "json_schema" else _CITE_TEXT).format(what=what, example=example)
    return [{"role": "system", "content": _system(request)}, {"role": "user", "content": user}]


def _shown(request: SummaryRequest, numbers: Numbered | None, index: int) -> str:
    return request.texts[index] if numbers is None else numbers.shown(index)


def _titled(request: SummaryRequest) -> str:
    return f' titled "{request.title}"' if request.title else ""
