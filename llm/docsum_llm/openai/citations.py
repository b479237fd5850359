"""How an LLM says where its summary's sentences come from, and how docsum reads and checks it.

The request's sentences are shown to the model numbered, S1, S2, ... over all of its texts (a chunk's
sentences for a chunk; the summaries' sentences for a merge), and it is asked to answer with the ids
each of its sentences comes from:

- `json_schema`: `{"sentences": [{"text": ..., "sources": ["S2", "S5"]}]}`, the ids an enum of this
  request's (`response_format`, which OpenAI, llama.cpp's server and vLLM enforce);
- `text`: one sentence a line, its ids after it in brackets: `<sentence> [S2][S5]`
  (what a 1.5B model follows best);
- `off`: nothing is asked; the prompt is the plain one.

Whatever was asked, the answer is read leniently (`claims`): JSON, or lines with ids in any of the
usual shapes, or plain prose. Then each sentence is labelled (`cited_sentences`): an id not in this
request is dropped; a sentence that the text of its remaining ids supports (`lexically_supported`) is
"cited"; else it is matched to the request's best sentence, or best two ("aligned"); else, when the
request's sentences support it together (its content words, at least `LEXICAL_SUPPORT` of them, are
found across them), it is a "synthesis" of the fewest that do, picked greedily; else it is
"unsupported": most of its content words are in nothing the model was shown, and it has no source.
An answer is never refused for its citations.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from docsum_shared.text import sentence_spans, storable

from ..base import Span, SummaryRequest, SummarySentence
from ..citations import LEXICAL_SUPPORT, code_names, content_words, lexically_supported
from ..extractive import join_sentences

CitationMode = Literal["json_schema", "text", "off"]
CITATION_MODES: tuple[CitationMode, ...] = ("json_schema", "text", "off")
SCHEMA_NAME = "cited_summary"

# A claim: a sentence of the answer and the ids it gives (as written, upper-cased).
Claim = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Numbered:
    """A request's sentences under their ids: where each is (`spans`), what it says (`texts`), and, per
    text of the request, its sentences' ids in order with the whitespace before each."""

    spans: Mapping[str, Span]
    texts: Mapping[str, str]
    lines: tuple[tuple[tuple[str, str], ...], ...]  # per request text: (id, the gap before it)
    # What `shown` made, per text: the budget's estimate and the prompt both ask for it.
    _shown: dict[int, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ids(self) -> list[str]:
        return list(self.spans)

    def shown(self, index: int) -> str:
        """Text `index` of the request as the model sees it: a sentence a line, after its id; a
        paragraph break kept as a blank line."""
        if (made := self._shown.get(index)) is None:
            made = self._shown[index] = self._show(index)
        return made

    def _show(self, index: int) -> str:
        out: list[str] = []
        for sid, gap in self.lines[index]:
            if out and "\n\n" in gap.replace("\r", "").replace(" ", "").replace("\t", ""):
                out.append("")
            out.append(f"[{sid}] {' '.join(self.texts[sid].split())}")
        return "\n".join(out)


@functools.lru_cache(maxsize=256)
def numbered(request: SummaryRequest) -> Numbered:
    """The sentences of every text of `request`, numbered from S1 in order (kept for the requests in hand:
    the prompt, its schema, its budget and the answer's reading all ask; read-only)."""
    spans: dict[str, Span] = {}
    texts: dict[str, str] = {}
    lines: list[tuple[tuple[str, str], ...]] = []
    for index, text in enumerate(request.texts):
        here: list[tuple[str, str]] = []
        previous_end = 0
        for start, end in sentence_spans(text):
            sid = f"S{len(spans) + 1}"
            spans[sid], texts[sid] = Span(index, start, end), text[start:end]
            here.append((sid, text[previous_end:start]))
            previous_end = end
        lines.append(tuple(here))
    return Numbered(spans, texts, tuple(lines))


def response_format(ids: list[str]) -> dict[str, Any]:
    """The `response_format` that holds an answer to sentences citing only `ids` (at least one)."""
    sentence = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "sources": {"type": "array", "items": {"type": "string", "enum": ids}},
        },
        "required": ["text", "sources"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"sentences": {"type": "array", "items": sentence}},
        "required": ["sentences"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": schema}}


# --- reading an answer -------------------------------------------------------------------------------

# An answer is the model's: any length, any shape. So every pattern here reads it in linear time: no
# quantifier gives back what the next part could take too (possessive ones, `*+`, where it could), and
# no search starts a scan again from every character of a run (the one that would is anchored, or
# bounded by a lookbehind).
# A fenced answer's opening: "```json" and what space follows it (the closing fence: `_unfenced`).
_FENCE_RE = re.compile(r"```[\w-]*+\s*+")
# A complete or cut sentence object of a JSON answer, for an answer cut at its bound; its "sources" list
# after it (read up to its "]" by `_salvaged`).
_JSON_TEXT_RE = re.compile(r'"text"\s*+:\s*+"((?:[^"\\]|\\.)*+)("?)')
_SOURCES_RE = re.compile(r'\s*+,\s*+"sources"\s*+:\s*+\[')
# Ids in brackets after (or inside) a sentence: "[S2]", "[S2][S5]", "[S2, S5]", "(s2)", "【S2】"; with the
# spaces before them (a match starts where a run of spaces does, not again at each of its spaces).
_GROUP_RE = re.compile(r"(?<![ \t])[ \t]*+(?:[\[(【]\s*+S\d++(?:\s*+[,;，、]\s*+S?\d++)*+\s*+[\])】][ \t]*+)+", re.I)
# Ids without brackets, at the very end of a line: "... topics. S2" or "... topics S2, S5.". Matched on
# the line reversed, from its end: one anchored match, where a search would try the ids again from
# every space of the line. Its groups: the full stop, and the ids (reversed).
_BARE_TAIL_REVERSED_RE = re.compile(r"[ \t]*+([.。]?)[ \t]*+(\d++S(?:\s*+[,;]\s*+\d++S)*)[ \t]++", re.I)
_ID_RE = re.compile(r"S?(\d+)", re.I)
_MARK_RE = re.compile(r"^\s*+(?:[-*•·]|\d{1,3}[.)])\s+")
_LINE_END_RE = re.compile(r"[.!?。！？]*+[ \t]*+")
_SENTENCE_END = ".!?。！？；"


def claims(answer: str) -> list[Claim]:
    """The sentences of an answer and the ids each gives: a JSON answer (whole, or cut at its bound),
    else lines in the text format, read leniently; a sentence that gives no id is split from the rest
    as prose is (a model that ignored the format gave none at all)."""
    structured = _json_claims(answer)
    if structured is not None:
        return structured
    out: list[Claim] = []
    for raw in answer.splitlines():
        line = _MARK_RE.sub("", raw).strip()
        if not line or line.startswith("```") or (_is_preamble(line.strip("* ")) and not _GROUP_RE.search(line)):
            continue
        for text, ids in _line_claims(line):
            if ids:
                out.append((text, ids))
                continue
            out.extend((text[start:end], ()) for start, end in sentence_spans(text))
    return out


def _is_preamble(line: str) -> bool:
    """ "Here is the summary:", "Summary:", "## Summary": what a model says before its answer."""
    return line.endswith((":", "：")) or line.startswith("#")


def _line_claims(line: str) -> list[Claim]:
    """The sentences of one line, each with the ids after it."""
    out: list[Claim] = []
    parts: list[str] = []
    ids: list[str] = []

    def close() -> None:
        text = " ".join("".join(parts).split())
        if text:
            out.append((text, tuple(dict.fromkeys(ids))))
        parts.clear()
        ids.clear()

    last = ""  # the sentence's last character but spaces so far: kept, not joined again at each group
    pos = 0
    for match in _GROUP_RE.finditer(line):
        before = line[pos : match.start()]
        parts.append(before)
        last = before.rstrip()[-1:] or last
        ids.extend(_ids(match.group()))
        pos = match.end()
        tail = _LINE_END_RE.fullmatch(line, pos)
        if tail is not None:  # the ids end the line, maybe before the sentence's full stop
            parts.append(tail.group().strip())
            pos = len(line)
            close()
            last = ""
        elif last in _SENTENCE_END:  # (or nothing came before them: "" is in any string)
            close()
            last = ""
        else:  # ids inside a sentence count for it; the sentence goes on
            parts.append(" ")
    rest = line[pos:]
    bare = _bare_tail(rest)
    if bare is not None and (parts or rest[: bare[0]].strip()):
        parts.append(rest[: bare[0]] + bare[2])
        ids.extend(_ids(bare[1]))
    else:
        parts.append(rest)
    close()
    return out


def _bare_tail(rest: str) -> tuple[int, str, str] | None:
    """The ids `rest` ends with, unbracketed: where they start (the spaces before them), the ids, and
    the full stop after them; None when it ends with none."""
    tail = _BARE_TAIL_REVERSED_RE.match(rest[::-1])
    if tail is None:
        return None
    return len(rest) - tail.end(), tail.group(2)[::-1], tail.group(1)


def _ids(written: str) -> list[str]:
    return [f"S{int(number)}" for number in _ID_RE.findall(written)]


def _json_claims(answer: str) -> list[Claim] | None:
    """The claims of a JSON answer; None when the answer is no JSON."""
    body = _unfenced(answer.strip())
    if not body.startswith(("{", "[")):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # nested deeper than json reads: salvaged as a cut answer is
        return _salvaged(body)
    items = data.get("sentences") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return None
    out: list[Claim] = []
    for item in items:
        text, sources = (item, []) if isinstance(item, str) else _fields(item)
        if said := _decoded(text):
            written = [sources] if isinstance(sources, str) else sources if isinstance(sources, list) else []
            ids = [sid for s in written if isinstance(s, str | int) for sid in _ids(str(s))]
            out.append((said, tuple(dict.fromkeys(ids))))
    return out


def _decoded(text: str) -> str:
    """A sentence's text as its JSON string decodes, storable: "\\u0000" in the answer decodes to a NUL."""
    return " ".join(storable(text).split())


def _unfenced(body: str) -> str:
    """A fenced answer's body ("```json ... ```", the closing fence missing when it was cut), else the
    answer; `body` has no space around it."""
    fence = _FENCE_RE.match(body)
    if fence is None:
        return body
    inside = body[fence.end() :]
    return inside[:-3].rstrip() if inside.endswith("```") else inside


def _fields(item: object) -> tuple[str, object]:
    if not isinstance(item, dict):
        return "", []
    text = item.get("text")
    return (text if isinstance(text, str) else ""), item.get("sources", item.get("ids", []))


def _salvaged(body: str) -> list[Claim]:
    """The sentences of a JSON answer cut short, with their ids if they came: each one whose text was
    written whole, and the one cut inside its text only when it is all there is (a half sentence is not
    shown beside whole ones)."""
    out: list[Claim] = []
    cut: Claim | None = None
    # The first "]" after the last "sources" list that opened (-1: there is none): found again only once
    # passed, so that a cut answer with no "]" left is not scanned to its end once per sentence.
    closing: int | None = None
    pos = 0
    while (match := _JSON_TEXT_RE.search(body, pos)) is not None:
        pos, sources = match.end(), ""
        if (listed := _SOURCES_RE.match(body, pos)) is not None:
            if closing is None or 0 <= closing < listed.end():
                closing = body.find("]", listed.end())
            if closing != -1:
                pos, sources = closing + 1, body[listed.end() : closing]
        escaped = match.group(1).rstrip("\\")
        try:
            text = json.loads(f'"{escaped}"')
        except ValueError:
            continue
        if said := _decoded(text):
            claim = (said, tuple(dict.fromkeys(_ids(sources))))
            if match.group(2):
                out.append(claim)
            else:
                cut = claim
    return out or ([cut] if cut is not None else [])


# --- labelling ---------------------------------------------------------------------------------------


def cited_sentences(found: list[Claim], numbers: Numbered) -> tuple[SummarySentence, ...]:
    """Each claim as a summary sentence: cited by its ids (those of this request) when their text
    supports it, else aligned to the request's best sentence or two, else a synthesis of several that
    support it together, else unsupported."""
    words: dict[str, set[str]] = {}  # the request's sentences' content words, once one is aligned
    out: list[SummarySentence] = []
    for text, given in found:
        known = [sid for sid in given if sid in numbers.spans]
        if known and lexically_supported("\n".join(numbers.texts[sid] for sid in known), text):
            out.append(SummarySentence(text, tuple(numbers.spans[sid] for sid in known), "cited"))
            continue
        if not words:
            words.update((sid, content_words(said)) for sid, said in numbers.texts.items())
        best = _aligned(text, numbers, words)
        if best:
            out.append(SummarySentence(text, tuple(numbers.spans[sid] for sid in best), "aligned"))
        elif several := _together(text, numbers, words):
            out.append(SummarySentence(text, tuple(numbers.spans[sid] for sid in several), "synthesis"))
        else:
            out.append(SummarySentence(text, (), "unsupported"))
    return tuple(out)


def _together(text: str, numbers: Numbered, words: Mapping[str, set[str]]) -> list[str]:
    """The request's sentences that support `text` together, in the request's order: each next one the
    one that adds most of its content words not yet found, until `LEXICAL_SUPPORT` of them are, and then
    for each name of code it uses (`code_names`) not yet among them, the first that has it; none when all
    of the request's sentences together do not."""
    wanted = content_words(text)
    found: set[str] = set()
    chosen: list[str] = []
    while wanted and len(found) < LEXICAL_SUPPORT * len(wanted):
        best = max(numbers.texts, key=lambda sid: len((words[sid] & wanted) - found), default=None)
        if best is None or not (words[best] & wanted) - found:
            return []
        found |= words[best] & wanted
        chosen.append(best)
    if wanted_names := code_names(text):
        names = {sid: code_names(said) for sid, said in numbers.texts.items()}  # once, only when it names any
        for name in sorted(wanted_names - set().union(*(names[sid] for sid in chosen))):
            having = next((sid for sid in numbers.ids if name in names.get(sid, ())), None)
            if having is None:
                return []  # a name no sentence shown has: made up, not put together
            if having not in chosen:
                chosen.append(having)
    return sorted(chosen, key=numbers.ids.index)


def _aligned(text: str, numbers: Numbered, words: Mapping[str, set[str]]) -> list[str]:
    """The request's sentence that supports `text` (the one sharing most content words with it), or
    the two that do together, in the request's order; none when neither does."""
    wanted = content_words(text)
    ranked = sorted((sid for sid in numbers.texts if words[sid] & wanted), key=lambda s: -len(words[s] & wanted))
    for take in (1, 2):
        best = sorted(ranked[:take], key=numbers.ids.index)
        if len(best) == take and lexically_supported("\n".join(numbers.texts[s] for s in best), text):
            return best
    return []


def summary_text(sentences: tuple[SummarySentence, ...], style: str) -> str:
    """The summary the sentences make, in the style asked: "- " lines for bullets, else prose."""
    texts = [s.text for s in sentences]
    return "\n".join(f"- {t}" for t in texts) if style == "bullets" else join_sentences(texts)
