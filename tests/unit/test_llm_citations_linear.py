"""Reading an answer takes time linear in its length, whatever its shape, and reads every ordinary
answer as the reading before did.

The reading before searched its patterns again from every character of a run: 32 KB of one line took
seconds to minutes (spaces between two words 27 s, a fenced one 70 s, "S1, S1, ..." 6 s). The answers
below are 8 to 32 times that long: read as before, each would take from minutes to hours (and fail on
the suite's timeout); read now, each takes milliseconds to a second. No clock is read here: the shapes
are read to their results (`make bench` is where time is measured).
"""

from __future__ import annotations

import json
import random
import re

import pytest

from docsum_llm.openai.citations import Claim, _decoded, _fields, _ids, _is_preamble, claims
from docsum_shared.text import sentence_spans

N = 256 * 1024  # characters of each hostile answer
# Shapes the reading before took quadratic time on with a smaller factor (joining a sentence's parts
# again at each of its ids; looking for a "]" to the answer's end at each sentence): longer still.
LONG = 1024 * 1024

HOSTILE: dict[str, tuple[str, list[Claim]]] = {
    "spaces between two words": ("a" + " " * N + "b", [("a b", ())]),
    "spaces and tabs before an id": ("a" + " \t" * (N // 2) + "S1 x", [("a S1 x", ())]),
    "a fenced answer with spaces inside": ("```\na" + " " * N + "b\n```", [("a b", ())]),
    "ids and commas, not at the end": ("S1, " * (N // 4) + "x", [(" ".join(["S1,"] * (N // 4)) + " x", ())]),
    "a word, then ids and commas": ("a S1" + ", S1" * (N // 4) + " b", [("a S1" + ", S1" * (N // 4) + " b", ())]),
    "bracketed ids inside one sentence": ("a [S1] " * (LONG // 7), [(" ".join(["a"] * (LONG // 7)), ("S1",))]),
    "bracketed ids with no space": ("a[S1]" * (LONG // 5), [(" ".join(["a"] * (LONG // 5)), ("S1",))]),
    "ids with no closing bracket": ("a " + "[S1, 2" * (N // 6), [("a " + "[S1, 2" * (N // 6), ())]),
    "ids ending the line": ("S1 " * (N // 3), [(" ".join(["S1"] * (N // 3 - 1)), ("S1",))]),
}


@pytest.mark.parametrize(("answer", "read"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_long_hostile_line_is_read_in_linear_time(answer: str, read: list[Claim]) -> None:
    assert claims(answer) == read


def test_a_json_answer_cut_with_no_closing_bracket_left_is_read_in_linear_time() -> None:
    # Each sentence's "sources" list was read up to the answer's end, looking for its "]".
    sentence = '{"text":"Kafka stores events.","sources":["S1"'
    answer = '{"sentences":[' + ",".join([sentence] * (LONG // len(sentence)))
    assert claims(answer) == [("Kafka stores events.", ())] * (LONG // len(sentence))


# --- the reading before, to check the new one against ---------------------------------------------------

_FENCE_BEFORE = re.compile(r"^```[\w-]*\s*(.*?)\s*(?:```)?$", re.S)
_JSON_TEXT_BEFORE = re.compile(r'"text"\s*:\s*"((?:[^"\\]|\\.)*)("?)(?:\s*,\s*"sources"\s*:\s*\[([^\]]*)\])?')
_GROUP_BEFORE = re.compile(r"[ \t]*(?:[\[(【]\s*S\d+(?:\s*[,;，、]\s*S?\d+)*\s*[\])】][ \t]*)+", re.I)
_BARE_TAIL_BEFORE = re.compile(r"[ \t]+(S\d+(?:\s*[,;]\s*S\d+)*)[ \t]*([.。]?)[ \t]*$", re.I)
_MARK_BEFORE = re.compile(r"^\s*(?:[-*•·]|\d{1,3}[.)])\s+")
_LINE_END_BEFORE = re.compile(r"[.!?。！？]*[ \t]*$")


def claims_before(answer: str) -> list[Claim]:
    structured = _json_claims_before(answer)
    if structured is not None:
        return structured
    out: list[Claim] = []
    for raw in answer.splitlines():
        line = _MARK_BEFORE.sub("", raw).strip()
        if not line or line.startswith("```") or (_is_preamble(line.strip("* ")) and not _GROUP_BEFORE.search(line)):
            continue
        for text, ids in _line_claims_before(line):
            if ids:
                out.append((text, ids))
                continue
            out.extend((text[start:end], ()) for start, end in sentence_spans(text))
    return out


def _line_claims_before(line: str) -> list[Claim]:
    out: list[Claim] = []
    parts: list[str] = []
    ids: list[str] = []

    def close() -> None:
        text = " ".join("".join(parts).split())
        if text:
            out.append((text, tuple(dict.fromkeys(ids))))
        parts.clear()
        ids.clear()

    pos = 0
    for match in _GROUP_BEFORE.finditer(line):
        parts.append(line[pos : match.start()])
        ids.extend(_ids(match.group()))
        pos = match.end()
        tail = _LINE_END_BEFORE.fullmatch(line, pos)
        if tail is not None:
            parts.append(tail.group().strip())
            pos = len(line)
            close()
        elif "".join(parts).rstrip()[-1:] in ".!?。！？；":
            close()
        else:
            parts.append(" ")
    rest = line[pos:]
    bare = _BARE_TAIL_BEFORE.search(rest)
    if bare is not None and (parts or rest[: bare.start()].strip()):
        parts.append(rest[: bare.start()] + bare.group(2))
        ids.extend(_ids(bare.group(1)))
    else:
        parts.append(rest)
    close()
    return out


def _json_claims_before(answer: str) -> list[Claim] | None:
    body = answer.strip()
    if fenced := _FENCE_BEFORE.match(body):
        body = fenced.group(1)
    if not body.startswith(("{", "[")):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return _salvaged_before(body)
    items = data.get("sentences") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return None
    out: list[Claim] = []
    for item in items:
        text, sources = (item, []) if isinstance(item, str) else _fields(item)
        if said := _decoded(text):
            written = [sources] if isinstance(sources, str) else sources if isinstance(sources, list) else []
            found = [sid for s in written if isinstance(s, str | int) for sid in _ids(str(s))]
            out.append((said, tuple(dict.fromkeys(found))))
    return out


def _salvaged_before(body: str) -> list[Claim]:
    out: list[Claim] = []
    cut: Claim | None = None
    for match in _JSON_TEXT_BEFORE.finditer(body):
        escaped = match.group(1).rstrip("\\")
        try:
            text = json.loads(f'"{escaped}"')
        except ValueError:
            continue
        if said := _decoded(text):
            claim = (said, tuple(dict.fromkeys(_ids(match.group(3) or ""))))
            if match.group(2):
                out.append(claim)
            else:
                cut = claim
    return out or ([cut] if cut is not None else [])


# --- answers as models write them, and their corners -----------------------------------------------------

_WORDS = ["Kafka", "stores", "events", "in", "topics", "brokers", "S", "s1", "12", "e.g.", "No.", "中文", "句子"]
_IDS = ["[S2]", "[S2][S5]", "[S2, S5]", "[s2; 5]", "(S3)", "【S4】", "[S2，S3、4]", "[S2", "S2", "S2, S5", "S7;S8"]
_IDS += ["[S1 ]", "S1 .", "S12 S3"]
_GAPS = ["", " ", "  ", "\t", " \t "]
_ENDS = ["", ".", "。", "!", "?", "...", "；", "!?"]
_OPENERS = ["", "- ", "* ", "1. ", "12) ", "• ", "## Summary", "Here is the summary:", "**Summary:**", "```", "```json"]
# What the patterns turn on, for answers of any shape.
_SOUP = list(' \t\n.。!?；,;，、[](){}【】"\\:`Ss0123456789-*#x中') + ["S1", "[S1]", "```", '"text"', '"sources"']


def _sentence(rng: random.Random) -> str:
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6)))
    if rng.random() < 0.3:  # ids inside the sentence
        words += rng.choice(_GAPS) + rng.choice(_IDS) + rng.choice(_GAPS) + rng.choice(_WORDS)
    return words + rng.choice(_ENDS)


def _text_answer(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(1, 5)):
        line = rng.choice(_OPENERS) if rng.random() < 0.3 else ""
        for _ in range(rng.randint(1, 3)):
            line += rng.choice(_GAPS) + _sentence(rng)
            if rng.random() < 0.7:
                line += rng.choice(_GAPS) + rng.choice(_IDS) + rng.choice(_GAPS) + rng.choice(_ENDS)
        lines.append(line)
    return "\n".join(lines)


def _json_answer(rng: random.Random) -> str:
    sentences = [
        {"text": _sentence(rng), "sources": rng.sample(["S1", "S2", "s3", "4"], rng.randint(0, 2))}
        for _ in range(rng.randint(1, 4))
    ]
    body = json.dumps({"sentences": sentences}, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2]))
    if rng.random() < 0.5:
        body = body[: rng.randint(1, len(body))]  # cut at its bound
    if rng.random() < 0.3:
        opening, closing = rng.choice(["```", "```json"]), rng.choice(["", "\n```", "```"])
        body = opening + rng.choice([*_GAPS, "\n"]) + body + closing
    return rng.choice(_GAPS) + body


def _soup(rng: random.Random) -> str:
    return "".join(rng.choice(_SOUP) for _ in range(rng.randint(0, 40)))


@pytest.mark.parametrize("make", [_text_answer, _json_answer, _soup])
def test_an_ordinary_answer_is_read_as_before(make: object) -> None:
    rng = random.Random(f"linear-{getattr(make, '__name__', make)}")
    for _ in range(3_000):
        answer = make(rng)  # type: ignore[operator]
        assert claims(answer) == claims_before(answer), answer
