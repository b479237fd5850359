"""Every prompt docsum sends to an LLM: chunk summaries, document merges and task merges.

Changing a prompt's wording changes what the model returns, so raise PROMPT_VERSION with it: the
version is part of the result cache's key, and a stored answer to an old prompt is not reused.

Unless citations are off, the texts are shown a sentence a line after their ids, and the model is
asked to say which ids each of its sentences rests on (see citations.py). The format is shown with
placeholders, never with an example sentence: a small model copies whatever sentence a prompt shows into
its summaries (Qwen2.5-Coder-1.5B put the example "Kafka stores events in topics." into the summary of
every document it was given, none of which mentioned Kafka). A sentence of an answer that repeats the
instructions or their placeholders is no summary sentence (`echoes_instructions`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from openai.types.chat import ChatCompletionMessageParam

from docsum_shared.text import cjk_count, cjk_ratio, sentence_spans

from ..base import SummaryKind, SummaryRequest
from .citations import CitationMode, Numbered, numbered

PROMPT_VERSION = "2026-12-05.2"

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
# A text's own language, named when the submitter asked for none and its script tells it: a small model
# told in English to write "in the same language as the text" answers in English (Qwen2.5-Coder-1.5B
# summarized a Chinese essay in English); told the language by name, and last, it writes in it.
_KANA_RE = re.compile(r"[\u3040-\u30ff]")
_HANGUL_RE = re.compile(r"[\u1100-\u11ff\uac00-\ud7af]")


@functools.lru_cache(maxsize=256)
def text_language(texts: tuple[str, ...]) -> str:
    """The language of `texts` when most of their letters are CJK: Korean (mostly Hangul), Japanese (some
    kana) or Chinese; "" otherwise (any other language is left to the model to tell). Kept for the
    requests in hand: their prompt, its budget and every sentence's echo check ask."""
    text = "\n".join(texts)
    if cjk_ratio(text) < 0.5:
        return ""
    cjk = cjk_count(text)
    if len(_HANGUL_RE.findall(text)) * 2 >= cjk:
        return "Korean"
    return "Japanese" if len(_KANA_RE.findall(text)) * 10 >= cjk else "Chinese"


def _named(request: SummaryRequest) -> SummaryRequest:
    """`request` with its texts' language named when none was asked for and their script tells it."""
    return request if request.language else replace(request, language=text_language(request.texts))


def _system(request: SummaryRequest) -> str:
    language = f"Write in {request.language}." if request.language else _SAME_LANGUAGE
    parts = [_SYSTEM, language, _LENGTH.get(request.length, _LENGTH[""]), _STYLE.get(request.style, "")]
    if request.max_tokens:
        # About 0.75 words a token in English; a CJK character is about a token.
        parts.append(f"The answer must fit in {request.max_tokens} tokens (about {request.max_tokens * 3 // 4} words).")
    if request.shorter:
        parts.append("Your previous answer was too long and was cut off: answer again, much shorter.")
    return " ".join(p for p in parts if p)


# The citation format's placeholders: nothing a summary sentence could be.
_SENTENCE = "<sentence>"
_ID = "S<id>"
_CITE_TEXT = (
    "Each sentence of the {what} starts with its id in brackets, like [S1]. Write each sentence of your "
    "summary on a line of its own and end it with the ids of the sentences it is based on, in brackets, "
    f"in this format:\n{{line}} [{_ID}][{_ID}]\nUse only the ids shown above."
)
_CITE_JSON = (
    "Each sentence of the {what} starts with its id in brackets, like [S1]. Answer in JSON: "
    f'{{{{"sentences": [{{{{"text": "{_SENTENCE}", "sources": ["{_ID}", "{_ID}"]}}}}]}}}}, each sentence of '
    "your summary with the ids of the sentences it is based on."
)
# Below this many letters and digits, an answer's sentence is taken for a repetition of the instructions
# only when it is one of their sentences whole: a short sentence may be part of them by chance ("The
# text says."); nor is a short instruction ("Write prose.") looked for inside an answer's sentence.
_ECHO_MIN_CHARS = 20
# An id ("S12", "S<id>") or the sentence placeholder.
_MARKS_RE = re.compile(r"\bS(?:\d+|<id>)|<sentence>", re.I)
# The tags the prompt puts around the texts it shows (`build_messages`).
_TAGS_RE = re.compile(r"</?(?:text|previous_context|following_context|part|document)\b[^<>]*>", re.I)


def build_messages(request: SummaryRequest, citations: CitationMode = "text") -> list[ChatCompletionMessageParam]:
    """The messages of `request`, asking for the citations `citations` says (the default, the text
    format, is also what the token budget counts)."""
    request = _named(request)
    numbers = numbered(request) if citations != "off" else None
    texts = [_shown(request, numbers, i) for i in range(len(request.texts))]
    if request.kind is SummaryKind.CHUNK:
        parts = []
        if request.context_before:
            parts.append(f"<previous_context>\n{request.context_before}\n</previous_context>")
        parts.append(f"<text>\n{texts[0]}\n</text>")
        if request.context_after:
            parts.append(f"<following_context>\n{request.context_after}\n</following_context>")
        shown = "\n\n".join(parts)
    elif request.kind is SummaryKind.DOCUMENT:
        shown = "\n\n".join(f"<part n={i + 1}>\n{t}\n</part>" for i, t in enumerate(texts))
    else:
        labels = request.labels or tuple(f"document {i + 1}" for i in range(len(request.texts)))
        shown = "\n\n".join(
            f'<document name="{label}">\n{t}\n</document>' for label, t in zip(labels, texts, strict=True)
        )
    user = f"{_ask(request)}\n\n{shown}"
    if numbers is not None:
        user += "\n\n" + _cite(request, citations)
    if request.language:
        user += "\n\n" + _written_in(request)
    return [{"role": "system", "content": _system(request)}, {"role": "user", "content": user}]


def _written_in(request: SummaryRequest) -> str:
    """The last line of a request that names its language: what a small model reads last, it follows."""
    return f"Write your summary in {request.language}." if request.language else ""


def _ask(request: SummaryRequest) -> str:
    """What the user message asks, before the texts it shows."""
    if request.kind is SummaryKind.CHUNK:
        return (
            "Summarize the text between <text> tags in a few sentences. The surrounding context is only "
            "there to resolve references; do not summarize it."
        )
    if request.kind is SummaryKind.DOCUMENT:
        return (
            f"These are summaries of consecutive parts of one document{_titled(request)}. "
            "Merge them into one coherent summary of the whole document, in order, without repetition."
        )
    return (
        f"These are summaries of the documents of one batch{_titled(request)}. Write an overall "
        "summary of the batch: the main themes first, then what each document adds."
    )


def _cite(request: SummaryRequest, citations: CitationMode) -> str:
    """How to cite, in the format `citations` asks for (text or JSON)."""
    what = "text" if request.kind is SummaryKind.CHUNK else "summaries"
    if citations == "json_schema":
        return _CITE_JSON.format(what=what)
    line = f"- {_SENTENCE}" if request.style == "bullets" else _SENTENCE
    return _CITE_TEXT.format(what=what, line=line)


def echoes_instructions(sentence: str, request: SummaryRequest) -> bool:
    """Whether `sentence`, of an answer to `request`, repeats the prompt instead of summarizing: it holds
    a placeholder of the citation format, it is only tags the prompt puts around its texts, it is one of
    the instructions' sentences or a long enough part of them, or it holds a long enough one whole. The
    texts the prompt shows are not instructions (a summary may quote them)."""
    if _SENTENCE in sentence or _ID.lower() in sentence.lower():
        return True
    # A tag of the prompt with nothing else ("<text>", SmolLM2-135M's whole answer to a one-chunk PDF):
    # too short for the checks below, and its one word may be in the source it is then aligned to.
    if _TAGS_RE.search(sentence) and not _squash(_TAGS_RE.sub(" ", sentence)):
        return True
    said = _squash(sentence)
    # What the prompt tells depends on the request's kind and options, not on the texts it shows.
    told = _instructions(replace(_named(request), texts=(), context_before="", context_after="", labels=(), title=""))
    if said in told.sentences:
        return True
    return len(said) >= _ECHO_MIN_CHARS and (said in told.whole or any(s in said for s in told.long))


@dataclass(frozen=True)
class _Told:
    whole: str  # all the prompt tells, squashed
    sentences: frozenset[str]  # each of its sentences, squashed
    long: tuple[str, ...]  # those long enough to be looked for inside another sentence


@functools.lru_cache(maxsize=64)
def _instructions(request: SummaryRequest) -> _Told:
    """Everything the prompt of `request` tells the model, in every citation format (`request` carries
    no texts)."""
    parts = [
        _system(request),
        _ask(request),
        _cite(request, "text"),
        _cite(request, "json_schema"),
        _written_in(request),
    ]
    text = "\n".join(parts)
    sentences = frozenset(_squash(line[a:b]) for line in text.splitlines() for a, b in sentence_spans(line)) - {""}
    return _Told(_squash(text), sentences, tuple(s for s in sentences if len(s) >= _ECHO_MIN_CHARS))


def _squash(text: str) -> str:
    """Letters and digits only, lower-cased, without ids and placeholders: a repetition is found whatever
    its spacing and punctuation, and whatever ids a reader took out of it."""
    return re.sub(r"\W+", "", _MARKS_RE.sub(" ", text).lower())


def _shown(request: SummaryRequest, numbers: Numbered | None, index: int) -> str:
    return request.texts[index] if numbers is None else numbers.shown(index)


def _titled(request: SummaryRequest) -> str:
    return f' titled "{request.title}"' if request.title else ""
