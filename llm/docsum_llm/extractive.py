"""An offline, deterministic extractive summarizer: TextRank over TF-IDF, MMR selection, document order.

Works on English and Chinese (and mixed) text without any model or network. What it quotes is always
whole sentences of the input, with their original wording, in the order they had there.

1. Non-prose lines are masked first (`non_prose_line`, `mask_non_prose`): box drawing and trees
   (``│ ├─►``), source code (fenced blocks; REPL and shell prompts, definitions, imports, block
   openers, declarations, assignments, a call alone on its line, braces, markup; weaker signs such as
   ``==``, ``&&``, ``snake_case`` or ``f()`` count twice over, never in a line that reads as prose;
   an indented line right after masked ones goes with them), tab-separated table rows, formula
   fragments (see 3.), lines of symbols, lines that are mostly numbers or single letters. Such a line
   becomes a paragraph break, so the prose around it still forms sentences of its own. Page furniture
   (page numbers, "Page 3 of 9", "第 3 页", arXiv stamps, copyright and proceedings lines) is removed,
   joining the lines around it.
2. The rest is cut into sentences (`docsum_shared.text.sentence_spans`: English abbreviations and
   decimals, Chinese 。！？；), with title lines at a sentence's start split off ("1 Introduction") and
   a Chinese clause ending in "；" joined to the rest of its sentence (up to 300 characters). A bullet,
   list number or footnote mark in front ("- ", "3. ", "[2] ") and stray closing brackets are dropped
   (`strip_marks`), words hyphenated at a line end are joined, and exact repeats (after normalising
   case, spaces and punctuation) are dropped, keeping the first.
3. A sentence is a candidate (`_is_candidate`) when it ends like a sentence (. ! ? 。 ！ ？ ； …, not
   ":" - that introduces a list or code), has at least three words/characters, is not a heading
   (``# ...``) or table row, and is none of: a table-of-contents line, mostly digits and punctuation,
   code, a caption ("Table 1: ...", "图 2 ..."), a formula fragment (at least four math tokens - a
   letter standing alone, a Greek letter, a number, a math symbol - and at least twice as many as
   words, a CJK character counting half a word), or a fragment that opens with a lower-case word ("and
   the ...", "define a name ..."; not "iPhone" or "len()"), the rest of a sentence or list item.
4. Each candidate becomes a TF-IDF vector over `tokens_for_similarity` (Latin words without
   stopwords, CJK character bigrams); the graph's edge weights are the cosine similarities. PageRank
   runs on that graph (damping 0.85, power iteration until the L1 change is below 1e-6, at most 100
   rounds) with a position prior as its teleport vector: ``1 + lead_bonus / (1 + k)``, plus 0.5 for a
   sentence that opens a paragraph. ``k`` is the sentence's position in its text in a chunk that
   starts a document (no ``context_before``) - a chunk further in gets a quarter of that bonus - and,
   in a merge, ``1 + 2 * lead_bonus / (1 + text index) + 0.25 * lead_bonus / (1 + k)``: a document's
   first chunk summaries lead. The similarity matrix is never built: with ``A`` the row-normalised
   TF-IDF matrix, ``W = A Aᵀ - diag`` and every product ``W y`` is computed as ``A (Aᵀ y)`` minus the
   diagonal, O(non-zeros) per round - 2,000 sentences rank in a fraction of a second.
5. A sentence's relevance is its rank times its prior times small factors: x1.5 when it says what the
   text is about ("in this paper", "we propose", "本文", "总之"...); x(1 + 0.5 * the share of its tokens
   found in the headings and title lines of the input); x0.85 when it points elsewhere ("Table 2",
   "for example", "例如"...); x0.75 when it leans on the sentence before ("It ...", "However, ...";
   not "This paper ..."); x0.8 below eight words/characters or above 300 characters; x0.75 with three
   or more symbols of notation in it.
6. Selection is MMR (maximal marginal relevance): again and again the candidate with the best
   ``mmr_lambda * relevance / best relevance - (1 - mmr_lambda) * max cosine to those taken`` (ties:
   earlier first) that fits the budget, skipping any whose cosine to one taken reaches
   ``redundant_cosine`` or whose token Jaccard reaches ``duplicate_jaccard`` (it says the same). The
   sentences taken are returned in their original order, joined by a space (by nothing after a
   sentence ending in CJK), or as "- " bullets one a line for ``style="bullets"``.

Budgets. CHUNK: ``ceil(chunk_ratio * candidates)`` sentences clamped to [1, chunk_max_sentences], and
at most ``max(chunk_ratio * len(input), 200)`` characters (never above ``chunk_max_chars``).
DOCUMENT merges: when the candidates (near-duplicates dropped) already fit ``merge_max_sentences``
and ``merge_max_chars`` they are kept whole; otherwise the best sentences up to those limits.
``length`` scales every budget: brief x0.5, detailed x2.

TASK merges (``labels`` are the documents' names, ``texts`` their summaries, in submission order) are
organised by document: for each document, in the order given, a line with its name and under it a
short paragraph (bullets with ``style="bullets"``) taken from its summary as above, a blank line
between documents. Each paragraph has at most ``ceil(3 * scale)`` sentences and
``clamp(merge_max_chars / documents, 220, 500) * scale`` characters, and at least one sentence. A
document without a name (no labels, or not one per text) is "Document N"; an empty summary is left
out.

A non-empty input never yields an empty summary: with no usable candidate the first sentence (or the
first 300 characters) is returned, cut at a word boundary when too long.

Every sentence of a summary comes with the range of the request's text it quotes
(`SummaryResult.sentences`): masking keeps each line it keeps whole, and unwrapping only drops
hyphens at line ends and changes whitespace, so the range is exact in the original text; a cut
sentence cites the part it shows. `citations.supports` checks a sentence against its range.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from docsum_shared.options import Mode
from docsum_shared.text import (
    CJK_SENTENCE_END,
    STOPWORDS,
    cjk_ratio,
    dehyphenate,
    estimate_tokens,
    is_cjk_char,
    sentence_spans,
    tokens_for_similarity,
)

from .base import SummarizerBackend, SummaryKind, SummaryRequest, SummaryResult, SummarySentence

MODEL = "extractive-textrank-v2"

_NORMALISE_RE = re.compile(r"[\W_]+")
_CLOSERS = "\"'”’」』）)]】》"
_FALLBACK_CHARS = 300

# The `length` option scales every sentence and character budget.
_LENGTH_SCALE = {"brief": 0.5, "": 1.0, "detailed": 2.0}
# What a sentence may end with (closing quotes and brackets aside).
_SENTENCE_END = CJK_SENTENCE_END + ".!?…"
_LINE_BREAK_RE = re.compile(r"\s*\n\s*")

# A TASK summary: one paragraph per document.
_TASK_DOC_SENTENCES = 3
_TASK_DOC_MIN_CHARS = 220
_TASK_DOC_MAX_CHARS = 500


@dataclass(frozen=True)
class _Masked:
    """A text with its non-prose lines masked (`mask_non_prose`), and where each of its lines came from:
    the masked text drops and blanks whole lines, so a line's characters are the original's own."""

    original: str
    text: str
    starts: tuple[int, ...]  # where each line of `text` starts ...
    origins: tuple[int, ...]  # ... and where that line starts in `original`

    def original_offset(self, i: int) -> int:
        """Where the character at `i` of `text` is in `original` (a character of a line, not a break)."""
        line = bisect.bisect_right(self.starts, i) - 1
        return self.origins[line] + i - self.starts[line]


@dataclass(frozen=True)
class _Place:
    """Where a sentence came from: `masked.text[start:end]` of text `source`, unwrapped (`_unwrap`) or
    as it was (the fallback quotes unmasked text as it is)."""

    masked: _Masked
    source: int
    start: int
    end: int
    unwrapped: bool = True


@dataclass
class _Sentence:
    text: str
    order: int  # position among all sentences of the request
    position: int  # position within its own text
    tokens: list[str]
    source: int = 0  # index of its text in the request
    opens: bool = False  # it starts a paragraph
    heading: float = 0.0  # the share of its tokens found in the headings of the request
    place: _Place | None = None


# --------------------------------------------------------------------------------------------------
# Non-prose lines

# Box drawing and block elements (U+2500-U+259F): diagrams and trees, never prose.
_BOX_RE = re.compile("[\u2500-\u259f]")
_FENCE_RE = re.compile(r"[ \t]*(?:```|~~~)")
# Page furniture, the whole line: page numbers, "Page 3 of 9", "3 / 9", "第 3 页", arXiv stamps,
# copyright and proceedings lines.
_FURNITURE_RE = re.compile(
    r"[ \t]*(?:"
    r"[-–—]?[ \t]*\d{1,4}[ \t]*[-–—]?"
    r"|(?:page|p\.|seite|página)[ \t]*\d{1,4}(?:[ \t]*(?:of|/)[ \t]*\d{1,4})?"
    r"|\d{1,4}[ \t]*(?:/|of)[ \t]*\d{1,4}"
    r"|第[ \t]*\d{1,4}[ \t]*页(?:[ \t]*[，,/]?[ \t]*共[ \t]*\d{1,4}[ \t]*页)?"
    r"|arxiv:[ \t]*\d{4}\.\d{4,5}\S*.{0,60}"
    r"|(?:©|\(c\)|copyright\b).{0,100}"
    r"|proceedings of .{0,120}pages?[ \t]*\d+.{0,40}"
    r")[ \t]*",
    re.IGNORECASE,
)
# Code, judged on a line's start: REPL and shell prompts, definitions, imports, block openers,
# declarations, preprocessor lines, comments, lone braces, assignments, a call alone on its line,
# markup tags. Lower-case keywords only: "If the broker fails:" is prose.
_CODE_LINE_RE = re.compile(
    r"[ \t]*(?:"
    r">>>|\.\.\.[ \t]|\$[ \t]+[a-z./]|In \[\d+\]:"
    r"|(?:async[ \t]+)?(?:def|class|struct|enum|interface|impl|fn|func)[ \t]+\w+[ \t]*[(:<{]"
    r"|import[ \t]+[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*;?[ \t]*$|from[ \t]+[\w.]+[ \t]+import[ \t]"
    r"|(?:if|elif|while|for|with|switch)\b[^。！？，\n]*[=<>()\[\].][^。！？，\n]*[:{][ \t]*(?:#.*)?$"
    r"|(?:else|try|finally|do)[ \t]*[:{][ \t]*$|except\b[^\n]*:[ \t]*$|(?:}[ \t]*)?else\b[^\n]*{[ \t]*$"
    r"|(?:public|private|protected|static|final|void|int|long|char|bool|boolean|double|float|var|let"
    r"|const|function|package|return|throw|new|auto|unsigned)[ \t]+[^\n]*?"
    r"(?:[\w\]>)][ \t]*(?:=(?!=)|;[ \t]*$|\{[ \t]*$)|\w\()"
    r"|return(?:[ \t]+[\w.]+(?:\([^()\n]*\))?)?[ \t]*;?[ \t]*$|(?:break|continue|pass)[ \t]*;?[ \t]*$"
    r"|#[ \t]*(?:include|define|ifn?def|endif|pragma|undef)\b|//|/\*|\*/"
    r"|[{}()\[\]][ \t]*[;,)]*[ \t]*$|}[ \t]*(?:else|catch|while)\b"
    r"|[A-Za-z_$][\w.$]*(?:\[[^\]\n]*\])?[ \t]*(?:[-+*/%|&^]?=|:=|->|=>|::|\+\+|--)(?!=)[ \t]*[^\s=]"
    r"|[A-Za-z_$][\w.$]*\([^()\n]*(?:\([^()\n]*\)[^()\n]*)*\)[ \t]*[;{:]?[ \t]*(?:(?:#|//).*)?$"
    r"|</?[A-Za-z][\w:-]*(?:[ \t][^<>\n]*)?/?>|<!--"
    r")"
)
# Weaker signs of code anywhere in a line; two of them (one in an indented line) make it code,
# unless the line reads as prose (three or more stopwords, or CJK text).
_CODE_SIGN_RE = re.compile(
    r"==|!=|<=|>=|&&|\|\||->|=>|::|\+\+|\+=|\w\(\)|\w\.\w+\(|\b[a-z]+_[a-z0-9_]+\b|\b[a-z]+[A-Z]\w*\("
    r"|[;{}][ \t]*$|^[ \t]*[{}]|\$\{|\bnull\b|\bNone\b|\bTrue\b|\bFalse\b"
)
_WORD_TOKEN_RE = re.compile(r"[A-Za-z\u00c0-\u024f]+")
_NOT_SINGLE_LETTERS = frozenset("aAI")
_ALNUM_RE = re.compile(r"[^\W_]")
_CJK_END_RE = re.compile(f"[{CJK_SENTENCE_END}]")


_CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_MATH_SYMBOL_CLASS = "=+<>^|~±×÷·∂∇√∞\u2190-\u21ff\u2200-\u22ff\u27c0-\u27ef\u2980-\u2aff"
# Math tokens: a run of Greek letters, a letter standing alone (not "a", "A", "I" or CJK), a number, a
# math symbol. Words: Latin words of two or more letters; CJK characters count half a word each.
_MATH_RE = re.compile(
    f"[\u0370-\u03ff]+|(?<![^\\W_])(?![aAI{_CJK_CLASS}])[^\\W\\d_](?![^\\W_])|\\d+(?:[.,]\\d+)*|[{_MATH_SYMBOL_CLASS}]"
)
_SYMBOL_RE = re.compile(
    f"[\u0370-\u03ff]+|(?<![^\\W_])(?![aAI{_CJK_CLASS}])[^\\W\\d_](?![^\\W_])|[{_MATH_SYMBOL_CLASS}]"
)
_WORDS_RE = re.compile(r"[A-Za-z\u00c0-\u024f]{2,}")
_CJK_RUN_RE = re.compile(f"[{_CJK_CLASS}]+")


def _math_and_words(text: str) -> tuple[int, float]:
    """Math tokens and words (see `_MATH_RE`)."""
    cjk = sum(len(run) for run in _CJK_RUN_RE.findall(text)) if not text.isascii() else 0
    return len(_MATH_RE.findall(text)), len(_WORDS_RE.findall(text)) + cjk / 2


def _is_formula(text: str) -> bool:
    """A formula fragment: at least four math tokens, and at least twice as many as words."""
    math_tokens, words = _math_and_words(text)
    return math_tokens >= 4 and math_tokens >= 2 * words


def _reads_as_prose(line: str) -> bool:
    if cjk_ratio(line) > 0.3:
        return True
    return sum(1 for w in _WORD_TOKEN_RE.findall(line) if w.lower() in STOPWORDS) >= 3


def _is_code_line(line: str) -> bool:
    if _CODE_LINE_RE.match(line):
        return True
    signs = len(_CODE_SIGN_RE.findall(line))
    if not signs or _reads_as_prose(line):
        return False
    indented = line[:2] == "  " or line[:1] == "\t"
    return signs >= 2 or indented


def _is_symbols_or_numbers(line: str) -> bool:
    """A line of symbols ("-----", "* * *", "(3)"), or mostly numbers and single letters."""
    tokens = line.split()
    visible = sum(map(len, tokens))
    if visible >= 3 and len(_ALNUM_RE.findall(line)) < 0.4 * visible:
        return True
    if len(tokens) < 3 or cjk_ratio(line) > 0.3:
        return False
    numbers_or_letters = 0
    stopwords = 0
    for token in tokens:
        core = token.strip("()[]{},.;:%+-−–/*")
        if not core:
            numbers_or_letters += 1
        elif any(c.isdigit() for c in core) and not any(c.isalpha() for c in core.rstrip("kKmMxX%")):
            numbers_or_letters += 1
        elif len(core) == 1 and core not in _NOT_SINGLE_LETTERS:
            numbers_or_letters += 1
        elif core.lower() in STOPWORDS:
            stopwords += 1
            if stopwords > 1:
                return False
    return numbers_or_letters >= 0.7 * len(tokens)


def non_prose_line(line: str) -> str | None:
    """What a line of input is when it is not prose: "block" (code, a diagram, a table row, a formula,
    symbols or numbers: it becomes a paragraph break) or "furniture" (a page number, header or
    footer: it is removed); None for prose, a heading, a blank line."""
    s = line.strip()
    if not s or s.startswith("#"):
        return None
    if len(s) <= 120 and _FURNITURE_RE.fullmatch(s):
        return "furniture"
    if _BOX_RE.search(s) or s.count("\t") >= 2:  # a diagram, a table row of tab-separated cells
        return "block"
    if _is_code_line(line) or _is_symbols_or_numbers(s) or _is_formula(s):
        return "block"
    return None


def mask_non_prose(text: str) -> str:
    """`text` with its non-prose lines (see `non_prose_line`) replaced by blank lines, its page
    furniture removed; fenced code blocks (``` ... ```) are masked whole."""
    return _mask(text).text


def _mask(text: str) -> _Masked:
    """`mask_non_prose`, with where each line of the result starts in `text`."""
    if "\n" not in text and non_prose_line(text) is None:
        return _Masked(text, text, (0,), (0,))
    out: list[str] = []
    starts: list[int] = []
    origins: list[int] = []
    length = 0  # of the masked text so far
    position = 0  # where the line starts in `text`
    fenced = False
    in_block = False  # the last non-blank line was masked: an indented line goes on with the block
    for line in text.split("\n"):
        kept: str | None = ""
        if _FENCE_RE.match(line):
            fenced = not fenced
        else:
            kind = "block" if fenced else non_prose_line(line)
            if kind is None and in_block and line[:1] in " \t" and line.strip() and not _CJK_END_RE.search(line):
                kind = "block"
            if kind is None:
                kept = line
                in_block = in_block and not line.strip()
            elif kind == "block":
                in_block = True
            else:  # furniture: the lines around it join
                kept = None
        if kept is not None:
            length += 1 if out else 0
            starts.append(length)
            origins.append(position)
            out.append(kept)
            length += len(kept)
        position += len(line) + 1
    return _Masked(text, "\n".join(out), tuple(starts), tuple(origins))


# --------------------------------------------------------------------------------------------------
# Candidates

# Table of contents: dot leaders ("....", ". . . .", "……"), a full stop left alone at the end by dot
# leaders the splitter cut apart, a line that is a title followed by a page number ("2.1 Overview 4"),
# and a page number in front of a section number ("4 2.4 Creating ...", the previous entry's page).
_DOT_LEADERS_RE = re.compile(r"(?:\.[ \t]?){4,}|…{2,}|(?:·[ \t]?){4,}")
_LONE_FULL_STOP_RE = re.compile(r"\s\.$")
_TOC_ENTRY_RE = re.compile(r".*[^\W\d_][^\w\s]{0,2}[ \t]+(?:\d{1,4}|[ivxlc]{1,6})")
_PAGE_THEN_SECTION_RE = re.compile(r"\d{1,4}\s+\d{1,3}(?:\.\d{1,3})+\s")
# Code: characters rare in prose, typical first words, and numbered source listings ("261 \bbl@...").
_CODE_CHARS = frozenset("{}[]();=<>\\$#%")
_CODE_SHARE = 0.15
_CODE_START_RE = re.compile(
    r"(?:\\|[{}]|#\s*(?:include|define|if|ifn?def|endif|pragma|import)\b|//|/\*|<[A-Za-z/!?]"
    r"|(?:def|class|import|from|return|elif|var|let|const|function|public|private|static|void|int)\s"
    r"|\d{1,5}[ \t]*[\\{}@%#<]|[A-Za-z_][\w.]*[ \t]*(?:=|\+=|->|::)|[A-Za-z_]\w*\(.*\)[ \t]*[{;:]?$)",
    re.ASCII,
)
# A sentence cannot start with these in lower case: it is the rest of a sentence cut apart.
_CONNECTORS = frozenset(
    """and or but nor so yet which that who whom whose where when while whereas because since although
    though unless until than then as of to in on at by for from with without into onto upon the a an is
    are was were be been being has have had its their this these those also hence thus therefore however
    whether if""".split()
)
_FIRST_WORD_RE = re.compile(r"[A-Za-z]+")
# A caption: "Table 1: ...", "Figure 2. ...", "Fig. 3 ...", "图 1 ...", "表2：...".
_CAPTION_RE = re.compile(
    r"(?:table|figure|fig\.|listing|algorithm|chart|exhibit|plate|scheme)[ \t]*[\dA-Z][\w.]*[ \t]*[.:|—–-]"
    r"|[图表][ \t]*\d[\d.-]*",
    re.IGNORECASE,
)
_STRAY_CLOSERS = ")]）】》」』〕"
# A bullet, a list number or a footnote mark in front of a sentence.
_LIST_MARK_RE = re.compile(r"(?:[-*+•·▪◦●■►▶][ \t]+|\[\d{1,3}\][ \t]*|\(\d{1,2}\)[ \t]+|\d{1,2}[.)][ \t]+(?=[^\W\d_]))")


def strip_marks(sentence: str) -> str:
    """Drop what a sentence may open with but is not part of it: closing brackets (the rest of the
    previous sentence's parenthesis), a bullet, a list number, a footnote mark."""
    for _ in range(3):
        before = sentence
        if sentence[:1] in _STRAY_CLOSERS:
            sentence = sentence.lstrip(_STRAY_CLOSERS + " \t\n")
        m = _LIST_MARK_RE.match(sentence)
        if m:
            sentence = sentence[m.end() :].lstrip()
        if sentence == before:
            break
    return sentence


def _ends_like_a_sentence(sentence: str) -> bool:
    return sentence.rstrip(_CLOSERS + " \t")[-1:] in _SENTENCE_END


def _is_candidate(sentence: str, min_units: int, *, lines_masked: bool = False) -> bool:
    """Whether a sentence (its line breaks still in it) is prose worth quoting; see the module docstring.

    `lines_masked`: its non-prose lines were masked already (`mask_non_prose`), not to be checked again.
    """
    sentence = sentence.strip()
    if not sentence or sentence.startswith(("#", "|")) or not _ends_like_a_sentence(sentence):
        return False
    if estimate_tokens(sentence) < min_units:  # words, each CJK character counting as one
        return False
    if not lines_masked and any(non_prose_line(line) for line in sentence.split("\n")):
        return False
    return not (
        _is_contents(sentence)
        or _is_code_or_numbers(sentence)
        or _is_fragment(sentence)
        or _is_caption(sentence)
        or _is_formula(sentence)
    )


def _is_contents(sentence: str) -> bool:
    if _DOT_LEADERS_RE.search(sentence) or _LONE_FULL_STOP_RE.search(sentence):
        return True
    if _PAGE_THEN_SECTION_RE.match(sentence):
        return True
    lines = [line.strip() for line in sentence.split("\n") if line.strip()]
    entries = sum(1 for line in lines if _TOC_ENTRY_RE.fullmatch(line))
    # The sentence ends in a page number (no end mark), or most of its lines do.
    return bool(_TOC_ENTRY_RE.fullmatch(lines[-1])) or (entries >= 2 and entries > len(lines) / 2)


def _is_code_or_numbers(sentence: str) -> bool:
    chars = [c for c in sentence if not c.isspace()]
    if sum(1 for c in chars if c.isalpha()) < 0.5 * len(chars):
        return True  # mostly digits and punctuation: a table row, a log line, a formula
    if _CODE_START_RE.match(sentence):
        return True
    if cjk_ratio(sentence) > 0.5:  # a few ASCII brackets weigh a lot among dense CJK characters
        return False
    return sum(1 for c in chars if c in _CODE_CHARS) >= _CODE_SHARE * len(chars)


def _is_caption(sentence: str) -> bool:
    return _CAPTION_RE.match(sentence) is not None


def _is_fragment(sentence: str) -> bool:
    """The rest of a sentence cut apart, or of a list item: it opens with a lower-case word ("and
    the ...", "which ...", "define a name ..."); not "iPhone", "x86", "len() returns ..."."""
    m = _FIRST_WORD_RE.match(sentence)
    if m is None or not m.group().islower():  # "And" may open a sentence
        return False
    rest = sentence[m.end() : m.end() + 1]
    if m.group() not in _CONNECTORS and (rest.isalnum() or rest in "_(.'’-"):
        return False  # "iPhone", "x86", "snake_case", "len()", "e.g", "don't"
    return cjk_ratio(sentence) <= 0.5  # "until 命令和 while 命令等价" is a Chinese sentence about `until`


def _unwrap(sentence: str) -> str:
    """Join the lines of a wrapped sentence (PDF text keeps its line breaks): a space, none between CJK.

    A word hyphenated at a line end is joined first ("de-\\nfined" -> "defined"; see `dehyphenate`).
    """
    sentence = dehyphenate(sentence)

    def join(match: re.Match[str]) -> str:
        before = sentence[match.start() - 1 : match.start()]
        after = sentence[match.end() : match.end() + 1]
        return "" if before and after and is_cjk_char(before) and is_cjk_char(after) else " "

    return _LINE_BREAK_RE.sub(join, sentence)


def _ends_cjk(sentence: str) -> bool:
    last = sentence.rstrip(_CLOSERS)[-1:]
    return bool(last) and (last in CJK_SENTENCE_END or last in "，、：…" or is_cjk_char(last))


def join_sentences(sentences: Sequence[str]) -> str:
    """Join with a space, or with nothing after a sentence that ends in CJK text."""
    out: list[str] = []
    for i, s in enumerate(sentences):
        if i and not _ends_cjk(sentences[i - 1]):
            out.append(" ")
        out.append(s)
    return "".join(out)


def _truncate(text: str, limit: int) -> str:
    return _cut(text, limit)[0]


def _cut(text: str, limit: int) -> tuple[str, int, int]:
    """`text` stripped and, when longer than `limit`, cut at a word boundary with "…"; and where the
    part kept lies in `text`."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if end - start <= limit:
        return text[start:end], start, end
    cut = text[start : start + limit]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    kept = cut.rstrip()
    return kept + "…", start, start + len(kept)


def _align(sentence: str, raw: str) -> list[int]:
    """For each character of `sentence` (`_unwrap(raw)`), its offset in `raw`. Unwrapping only drops a
    hyphen and the line break after it and turns whitespace runs into a space or nothing, so the
    other characters match one by one, in order; a space put in maps to the whitespace it replaced."""
    at: list[int] = []
    j = 0
    for c in sentence:
        while j < len(raw) and raw[j] != c:
            if raw[j] == "-" and raw[j + 1 : j + 2] == "\n":  # a hyphenated word joined
                j += 2
            elif raw[j].isspace():
                j += 1
            elif c.isspace():
                break
            else:
                raise ValueError(f"{sentence!r} is not {raw!r} unwrapped")
        at.append(min(j, len(raw) - 1))
        if j < len(raw) and raw[j] == c:
            j += 1
    return at


def _cite(sentence: str, place: _Place, start: int = 0, end: int = -1, shown: str = "") -> SummarySentence:
    """`sentence` (taken from `place`) as a summary sentence: `shown` (default: the whole sentence),
    which shows `sentence[start:end]`, with that part's range in the original text."""
    end = len(sentence) if end < 0 else end
    raw = place.masked.text[place.start : place.end]
    at = _align(sentence, raw) if place.unwrapped else list(range(len(sentence)))
    first = place.masked.original_offset(place.start + at[start])
    last = place.masked.original_offset(place.start + at[end - 1])
    return SummarySentence.quoting(shown or sentence[start:end], place.source, first, last + 1)


def _in_text(sentence: SummarySentence, indexes: Sequence[int]) -> SummarySentence:
    """`sentence`, whose ranges are in a list of texts, with them in the request's: text i is the
    request's `indexes[i]`."""
    return replace(sentence, spans=tuple(replace(span, source=indexes[span.source]) for span in sentence.spans))


def _cite_cut(sentence: str, place: _Place, limit: int, start: int = 0, end: int = -1) -> SummarySentence:
    """`sentence[start:end]`, stripped and cut to `limit` (`_truncate`), as a summary sentence."""
    end = len(sentence) if end < 0 else end
    shown, first, last = _cut(sentence[start:end], limit)
    if first >= last:
        return SummarySentence.quoting("", place.source, 0, 0)
    return _cite(sentence, place, start + first, start + last, shown)


_PARAGRAPH_BREAK_RE = re.compile(r"\n[ \t]*\n")
_CLAUSE_END = "；;"
_JOINED_MAX_CHARS = 300


def _clauses_joined(text: str) -> list[tuple[int, int, bool]]:
    """`sentence_spans`, with a clause that ends in "；" joined to the rest of its sentence (up to
    300 characters, within a paragraph); and whether each starts a paragraph."""
    out: list[tuple[int, int, bool]] = []
    previous_end = 0
    for s, e in _title_lines_apart(text, sentence_spans(text)):
        opens = not out or _PARAGRAPH_BREAK_RE.search(text, previous_end, s) is not None
        if (
            out
            and not opens
            and text[out[-1][1] - 1] in _CLAUSE_END
            and e - out[-1][0] <= _JOINED_MAX_CHARS
            and not text[out[-1][0] : out[-1][1]].lstrip().startswith(("#", "|"))
            and not text[s:e].startswith(("#", "|"))
        ):
            out[-1] = (out[-1][0], e, out[-1][2])
        else:
            out.append((s, e, opens))
        previous_end = e
    return out


# A numbered section heading as PDF text gives it: "1 Introduction", "3.2 Results", "A.1 Proofs".
_NUMBERED_HEADING_RE = re.compile(r"(?:\d{1,2}|[A-Z](?=\.\d))(?:\.\d{1,2})*\.?[ \t]+[A-Z][^\n]{0,80}")
_TITLE_SMALL_WORDS = frozenset("a an and as at by for from in of on or the to vs via with is not all".split())


def _is_title_case(line: str) -> bool:
    words = [w for w in line.split() if w.lower() not in _TITLE_SMALL_WORDS]
    return bool(words) and sum(1 for w in words if w[:1].isupper() or w[:1].isdigit()) >= 0.8 * len(words)


def _title_lines_apart(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans with the title lines they open with split off: a Title Case line (no end mark, at most 15
    words) before a numbered heading or a line starting in upper case, and a numbered heading
    ("1 Introduction") before a line starting in upper case. `sentence_spans` splits off only a
    first line before an upper-case one."""
    out: list[tuple[int, int]] = []
    for s, e in spans:
        while True:
            newline = text.find("\n", s, e)
            if newline < 0:
                break
            first = text[s:newline].strip()
            rest = text[newline:e].lstrip()
            next_line = rest.split("\n", 1)[0]
            if (
                not first
                or not rest
                or _ends_like_a_sentence(first)
                or len(first.split()) > 15
                or not (
                    (_is_title_case(first) and (next_line[:1].isupper() or _NUMBERED_HEADING_RE.fullmatch(next_line)))
                    or (_NUMBERED_HEADING_RE.fullmatch(first) and next_line[:1].isupper())
                )
            ):
                break
            out.append((s, s + len(text[s:newline].rstrip())))
            s = e - len(rest)
        out.append((s, e))
    return out


def _is_heading(sentence: str) -> bool:
    """A heading or a title line: "# ...", or a short line without an end mark that is prose."""
    sentence = sentence.strip()
    if sentence.startswith("#"):
        return True
    return (
        "\n" not in sentence
        and not _ends_like_a_sentence(sentence)
        and estimate_tokens(sentence) <= _HEADING_MAX_UNITS
        and not sentence.endswith((":", "："))
        and non_prose_line(sentence) is None
    )


# --------------------------------------------------------------------------------------------------
# Relevance factors

# A sentence that says what the text is about.
_ABOUT_RE = re.compile(
    r"\b(?:in this (?:paper|article|work|study|document|report|chapter|section|post)|this (?:paper|article|"
    r"work|study|document|report) (?:\w+ )?(?:present|propose|describe|introduce|show|examine|investigate|"
    r"explore|discuss|argue|focus|provide)|we (?:\w+ )?(?:propose|present|introduce|describe|show|"
    r"demonstrate|find|found|argue|conclude|develop|design)|our (?:results|experiments|findings|approach|"
    r"method|model|analysis) (?:\w+ )?(?:show|suggest|indicate|demonstrate|outperform|achieve)|in summary|"
    r"in conclusion|to summari[sz]e|to conclude|overall,|the (?:main|key|central) (?:idea|point|goal|"
    r"contribution|result|finding)|the (?:goal|purpose|aim) of)\b"
    r"|本文|本研究|本章|本节|我们提出|总之|总而言之|综上所述|总的来说|简而言之|核心|主要|目的是|旨在",
    re.IGNORECASE,
)
# A sentence that points elsewhere (a figure, a table, an example, a section) ...
_ELSEWHERE_RE = re.compile(
    r"\b(?:table|tab\.|figure|fig\.|appendix|equation|eq\.|algorithm|listing|section|footnote)\s*[\dA-Z(]"
    r"|\b(?:e\.g\.|for example|for instance|see (?:also )?(?:the )?(?:below|above|section|chapter))"
    r"|例如|比如|如图|见图|见表|如表|举例",
    re.IGNORECASE,
)
# ... or leans on the sentence before it.
_LEANING_RE = re.compile(
    r"(?:it|its|this|these|those|they|them|such|he|she|here|there|however|moreover|furthermore|also|"
    r"besides|then|thus|hence|therefore|instead|otherwise|similarly|likewise|finally|second|secondly|"
    r"third|thirdly)\b",
    re.IGNORECASE,
)
# ... but "This document ...", "This paper ..." stands on its own.
_SELF_REFERENCE_RE = re.compile(
    r"(?:this|these) (?:paper|article|document|report|study|work|chapter|section|guide|book|post|tutorial|"
    r"specification|memo|module|library|package|tool|project|system|thesis|survey)s?\b",
    re.IGNORECASE,
)
_ABOUT_FACTOR = 1.5
_ELSEWHERE_FACTOR = 0.85
_LEANING_FACTOR = 0.75
_SHORT_UNITS = 8
_LONG_CHARS = 300
_SIZE_FACTOR = 0.8
_HEADING_MAX_UNITS = 15
_SYMBOLIC_TOKENS = 3
_SYMBOLIC_FACTOR = 0.75


def _relevance_factor(sentence: str) -> float:
    factor = 1.0
    if _ABOUT_RE.search(sentence):
        factor *= _ABOUT_FACTOR
    if _ELSEWHERE_RE.search(sentence):
        factor *= _ELSEWHERE_FACTOR
    if _LEANING_RE.match(sentence) and not _SELF_REFERENCE_RE.match(sentence):
        factor *= _LEANING_FACTOR
    if estimate_tokens(sentence) < _SHORT_UNITS or len(sentence) > _LONG_CHARS:
        factor *= _SIZE_FACTOR
    if (
        len(_SYMBOL_RE.findall(sentence)) >= _SYMBOLIC_TOKENS
    ):  # notation: "keywords k x , k y can be extracted from x and y"
        factor *= _SYMBOLIC_FACTOR
    return factor


# --------------------------------------------------------------------------------------------------
# Ranking


class _TfIdf:
    """Row-normalised TF-IDF vectors of token lists, kept sparse: only terms shared by two or more rows
    can link them, so the rows keep only those (the norm still counts every term); `self_sim` is their
    part of A·Aᵀ's diagonal. Token ids in first-appearance order (no set or hash order feeds a sum)."""

    def __init__(self, token_lists: Sequence[Sequence[str]]) -> None:
        n = len(token_lists)
        vocab: dict[str, int] = {}
        rows_tf: list[dict[int, int]] = []
        df: list[int] = []
        for tokens in token_lists:
            tf: dict[int, int] = {}
            for t in tokens:
                tid = vocab.get(t)
                if tid is None:
                    tid = vocab[t] = len(vocab)
                    df.append(0)
                tf[tid] = tf.get(tid, 0) + 1
            for tid in tf:
                df[tid] += 1
            rows_tf.append(tf)
        idf = [math.log((1 + n) / (1 + d)) + 1.0 for d in df]
        self.row_ids: list[list[int]] = []
        self.row_ws: list[list[float]] = []
        self.self_sim: list[float] = []
        self.col_ids: list[list[int]] = [[] for _ in vocab]
        self.col_ws: list[list[float]] = [[] for _ in vocab]
        for i, tf in enumerate(rows_tf):
            weights = {tid: (1.0 + math.log(c)) * idf[tid] for tid, c in tf.items()}
            norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
            ids: list[int] = []
            ws: list[float] = []
            for tid, w in weights.items():
                if df[tid] > 1:
                    w /= norm
                    ids.append(tid)
                    ws.append(w)
                    self.col_ids[tid].append(i)
                    self.col_ws[tid].append(w)
            self.row_ids.append(ids)
            self.row_ws.append(ws)
            self.self_sim.append(sum(w * w for w in ws))

    def w_times(self, y: list[float]) -> list[float]:
        """W·y with W = A·Aᵀ minus its diagonal."""
        mul = operator.mul
        col_ids, col_ws, row_ids, row_ws = self.col_ids, self.col_ws, self.row_ids, self.row_ws
        z = [sum(map(mul, col_ws[t], map(y.__getitem__, col_ids[t]))) for t in range(len(col_ids))]
        return [
            sum(map(mul, row_ws[i], map(z.__getitem__, row_ids[i]))) - self.self_sim[i] * y[i]
            for i in range(len(row_ids))
        ]

    def similarities(self, i: int) -> list[float]:
        """The cosine similarity of row `i` to every row (its own included)."""
        sims = [0.0] * len(self.row_ids)
        for tid, w in zip(self.row_ids[i], self.row_ws[i], strict=True):
            for j, v in zip(self.col_ids[tid], self.col_ws[tid], strict=True):
                sims[j] += w * v
        return sims


def textrank(
    token_lists: Sequence[Sequence[str]],
    prior: Sequence[float] | None = None,
    *,
    damping: float = 0.85,
    max_iterations: int = 100,
    tolerance: float = 1e-6,
    tfidf: _TfIdf | None = None,
) -> list[float]:
    """PageRank scores (summing to 1) of sentences on their TF-IDF cosine-similarity graph.

    `prior` is the teleport distribution (normalised here; uniform when omitted). Self-similarity is
    excluded; a sentence similar to no other one gets only teleport mass (and its own rank is
    redistributed along `prior`). Deterministic: no set or hash-order iteration feeds the sums.
    """
    n = len(token_lists)
    if n == 0:
        return []
    if prior is None:
        prior = [1.0] * n
    total_prior = float(sum(prior))
    p = [x / total_prior for x in prior]
    if n == 1:
        return [1.0]
    matrix = tfidf if tfidf is not None else _TfIdf(token_lists)

    degree = matrix.w_times([1.0] * n)
    inv_degree = [1.0 / d if d > 1e-12 else 0.0 for d in degree]
    dangling = [inv_degree[i] == 0.0 for i in range(n)]

    rank = list(p)
    teleport = [(1.0 - damping) * x for x in p]
    for _ in range(max_iterations):
        flow = matrix.w_times([r * k for r, k in zip(rank, inv_degree, strict=True)])
        lost = damping * sum(r for r, d in zip(rank, dangling, strict=True) if d)
        new = [t + damping * f + lost * x for t, f, x in zip(teleport, flow, p, strict=True)]
        s = sum(new)
        new = [x / s for x in new]
        delta = sum(abs(a - b) for a, b in zip(new, rank, strict=True))
        rank = new
        if delta < tolerance:
            break
    return rank


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


# The position prior's lead bonus, as a share of `lead_bonus`: a chunk further in a document than its
# first; a merge's texts by their index, and its sentences by their position in their own text.
_LATER_CHUNK_LEAD = 0.25
_MERGE_SOURCE_LEAD = 2.0
_MERGE_POSITION_LEAD = 0.25
_PARAGRAPH_BONUS = 0.5
_PRIOR_POWER = 1.0
_HEADING_WEIGHT = 0.5


@dataclass(frozen=True)
class _Budget:
    sentences: int
    soft_chars: int  # what the sentences may add up to ...
    hard_chars: int  # ... except the first one, which may be up to this long


class ExtractiveBackend(SummarizerBackend):
    """TextRank extractive summaries; see the module docstring. Stateless, offline, deterministic."""

    model = MODEL

    def __init__(
        self,
        *,
        chunk_ratio: float = 0.25,
        chunk_max_sentences: int = 5,
        chunk_max_chars: int = 600,
        merge_max_sentences: int = 8,
        merge_max_chars: int = 1200,
        min_units: int = 3,
        lead_bonus: float = 1.0,
        duplicate_jaccard: float = 0.7,
        mmr_lambda: float = 0.7,
        redundant_cosine: float = 0.5,
    ) -> None:
        self.chunk_ratio = chunk_ratio
        self.chunk_max_sentences = chunk_max_sentences
        self.chunk_max_chars = chunk_max_chars
        self.merge_max_sentences = merge_max_sentences
        self.merge_max_chars = merge_max_chars
        self.min_units = min_units
        self.lead_bonus = lead_bonus
        self.duplicate_jaccard = duplicate_jaccard
        self.mmr_lambda = mmr_lambda
        self.redundant_cosine = redundant_cosine

    async def summarize(self, request: SummaryRequest, mode: Mode = "realtime") -> SummaryResult:
        # Every mode is the same here: nothing is paid. CPU-bound (a large merge ranks thousands of
        # sentences): off the event loop, so the consumer's polls and heartbeats go on meanwhile.
        return await asyncio.to_thread(self.summarize_sync, request)

    def summarize_sync(self, request: SummaryRequest) -> SummaryResult:
        scale = _LENGTH_SCALE.get(request.length, 1.0)
        bullets = request.style == "bullets"
        if request.kind is SummaryKind.TASK:
            summary, sentences = self._task(request, scale, bullets)
        else:
            indexes = [i for i, t in enumerate(request.texts) if t and t.strip()]
            texts = [request.texts[i] for i in indexes]
            first_chunk = request.kind is not SummaryKind.CHUNK or not request.context_before.strip()
            chosen = self._summarize(texts, request.kind, scale, lead=first_chunk) if texts else []
            # Sources among the non-blank texts, as indexes of the request's texts.
            sentences = [_in_text(c, indexes) for c in chosen if c.text]
            summary = _format([c.text for c in sentences], bullets)
        return SummaryResult(
            text=summary,
            model=self.model,
            prompt_tokens=sum(estimate_tokens(t) for t in request.texts),
            completion_tokens=estimate_tokens(summary),
            sentences=tuple(sentences),
        )

    # ----------------------------------------------------------------------------------------------

    def _candidates(self, texts: Sequence[str]) -> tuple[list[_Sentence], list[tuple[str, _Place]]]:
        """The candidate sentences of `texts` (de-duplicated, in order) and all their sentences, with
        where each came from."""
        all_sentences: list[tuple[str, _Place]] = []
        candidates: list[_Sentence] = []
        seen: set[str] = set()
        heading_tokens: set[str] = set()
        for source, text in enumerate(texts):
            masked = _mask(text)
            for position, (s, e, opens) in enumerate(_clauses_joined(masked.text)):
                raw = strip_marks(masked.text[s:e].strip())
                # `raw` is what the sentence ends with: marks go only from the front.
                end = s + len(masked.text[s:e].rstrip())
                place = _Place(masked, source, end - len(raw), end)
                sentence = _unwrap(raw)
                all_sentences.append((sentence, place))
                if not _is_candidate(raw, self.min_units, lines_masked=True):
                    if _is_heading(raw):
                        heading_tokens.update(tokens_for_similarity(sentence))
                    continue
                key = _NORMALISE_RE.sub("", sentence.lower())
                tokens = tokens_for_similarity(sentence)
                if not key or not tokens or key in seen:
                    continue
                seen.add(key)
                candidates.append(
                    _Sentence(sentence, len(all_sentences) - 1, position, tokens, source, opens, place=place)
                )
        if heading_tokens:
            for c in candidates:
                token_set = set(c.tokens)
                c.heading = len(token_set & heading_tokens) / len(token_set)
        if not all_sentences:  # the text was nothing but non-prose: the fallback quotes the original
            for source, text in enumerate(texts):
                unmasked = _Masked(text, text, (0,), (0,))
                for s, e in sentence_spans(text):
                    raw = strip_marks(text[s:e].strip())
                    end = s + len(text[s:e].rstrip())
                    all_sentences.append((raw, _Place(unmasked, source, end - len(raw), end, unwrapped=False)))
        return candidates, all_sentences

    def _summarize(
        self, texts: list[str], kind: SummaryKind, scale: float = 1.0, *, lead: bool = True
    ) -> list[SummarySentence]:
        candidates, all_sentences = self._candidates(texts)
        if not candidates:
            return self._fallback(all_sentences, texts)
        input_chars = sum(len(t) for t in texts)
        if kind is SummaryKind.CHUNK:
            limit = math.ceil(self.chunk_max_sentences * scale)
            hard_chars = int(self.chunk_max_chars * scale)
            budget = _Budget(
                sentences=max(1, min(limit, math.ceil(self.chunk_ratio * scale * len(candidates)))),
                soft_chars=min(hard_chars, max(int(self.chunk_ratio * scale * input_chars), 200)),
                hard_chars=hard_chars,
            )
        else:
            chars = int(self.merge_max_chars * scale)
            budget = _Budget(max(1, math.ceil(self.merge_max_sentences * scale)), chars, chars)
            if self._fits(candidates, budget):  # a merge that already fits: keep everything
                return self._distinct(candidates)
        if kind is SummaryKind.CHUNK:
            bonus = self.lead_bonus * (1.0 if lead else _LATER_CHUNK_LEAD)
            prior = [1.0 + bonus / (1 + c.position) + _PARAGRAPH_BONUS * c.opens for c in candidates]
        else:  # a merge: its first texts lead (a document's first chunks), then the order within each
            source, position = self.lead_bonus * _MERGE_SOURCE_LEAD, self.lead_bonus * _MERGE_POSITION_LEAD
            prior = [1.0 + source / (1 + c.source) + position / (1 + c.position) for c in candidates]
        return self._select(candidates, prior, budget)

    def _select(self, candidates: list[_Sentence], prior: list[float], budget: _Budget) -> list[SummarySentence]:
        """MMR selection within the budget; the sentences taken, in their original order."""
        tfidf = _TfIdf([c.tokens for c in candidates])
        scores = textrank([c.tokens for c in candidates], prior, tfidf=tfidf)
        relevance = [
            s * _relevance_factor(c.text) * (1.0 + _HEADING_WEIGHT * c.heading) * p**_PRIOR_POWER
            for s, c, p in zip(scores, candidates, prior, strict=True)
        ]
        top = max(relevance) or 1.0
        relevance = [r / top for r in relevance]
        lam = self.mmr_lambda
        redundancy = [0.0] * len(candidates)
        remaining = list(range(len(candidates)))
        chosen: list[int] = []
        chosen_sets: list[set[str]] = []
        used = 0
        while remaining and len(chosen) < budget.sentences:
            limit = budget.soft_chars if chosen else budget.hard_chars
            best = -1
            best_value = -math.inf
            keep: list[int] = []
            for i in remaining:
                extra = len(candidates[i].text) + (1 if chosen else 0)
                if used + extra > limit or redundancy[i] >= self.redundant_cosine:
                    continue  # too long for what is left (a shorter one may still fit), or said already
                keep.append(i)
                value = lam * relevance[i] - (1.0 - lam) * redundancy[i]
                if value > best_value + 1e-12:
                    best, best_value = i, value
            if best < 0:
                break
            remaining = [i for i in keep if i != best]
            token_set = set(candidates[best].tokens)
            if any(_jaccard(token_set, other) >= self.duplicate_jaccard for other in chosen_sets):
                continue
            chosen.append(best)
            chosen_sets.append(token_set)
            used += len(candidates[best].text) + (1 if len(chosen) > 1 else 0)
            redundancy = [max(r, s) for r, s in zip(redundancy, tfidf.similarities(best), strict=True)]
        if not chosen:  # every candidate is longer than the budget: the best one, shortened
            best = max(range(len(candidates)), key=lambda i: (relevance[i], -i))
            return [_cite_cut(candidates[best].text, _place_of(candidates[best]), budget.hard_chars)]
        chosen.sort(key=lambda i: candidates[i].order)
        return [_cite(candidates[i].text, _place_of(candidates[i])) for i in chosen]

    def _distinct(self, candidates: list[_Sentence]) -> list[SummarySentence]:
        """The candidates without near-duplicates of an earlier one (few candidates only)."""
        kept: list[set[str]] = []
        out: list[SummarySentence] = []
        for c in candidates:
            token_set = set(c.tokens)
            if not any(_jaccard(token_set, other) >= self.duplicate_jaccard for other in kept):
                kept.append(token_set)
                out.append(_cite(c.text, _place_of(c)))
        return out

    def _fits(self, candidates: list[_Sentence], budget: _Budget) -> bool:
        if len(candidates) > budget.sentences:
            return False
        return sum(len(c.text) for c in candidates) + len(candidates) - 1 <= budget.soft_chars

    def _task(self, request: SummaryRequest, scale: float, bullets: bool) -> tuple[str, list[SummarySentence]]:
        """One paragraph per document, in the order given, under the document's name."""
        labels = list(request.labels) if len(request.labels) == len(request.texts) else []
        documents = [
            ((labels[i].strip() if labels and labels[i].strip() else f"Document {i + 1}"), i, text)
            for i, text in enumerate(request.texts)
            if text and text.strip()
        ]
        if not documents:
            return "", []
        per_document = self.merge_max_chars / len(documents)
        chars = int(min(max(per_document, _TASK_DOC_MIN_CHARS), _TASK_DOC_MAX_CHARS) * scale)
        budget = _Budget(max(1, math.ceil(_TASK_DOC_SENTENCES * scale)), chars, chars)
        parts: list[str] = []
        cited: list[SummarySentence] = []
        for name, index, text in documents:
            candidates, all_sentences = self._candidates([text])
            if not candidates:
                sentences = self._fallback(all_sentences, [text])
            elif self._fits(candidates, budget):
                sentences = self._distinct(candidates)
            else:
                prior = [1.0 + self.lead_bonus / (1 + c.position) + _PARAGRAPH_BONUS * c.opens for c in candidates]
                sentences = self._select(candidates, prior, budget)
            sentences = [_in_text(s, [index]) for s in sentences if s.text]
            parts.append(f"{name}\n{_format([s.text for s in sentences], bullets)}")
            cited.extend(sentences)
        return "\n\n".join(parts), cited

    @staticmethod
    def _fallback(sentences: list[tuple[str, _Place]], texts: list[str]) -> list[SummarySentence]:
        """The first sentence that is not a heading, else the first heading without its marks, else
        the texts themselves; cut to `_FALLBACK_CHARS`."""
        stripped: list[tuple[str, int, _Place]] = []  # each sentence, and where it starts without its marks
        for sentence, place in sentences:
            rest = strip_marks(sentence).lstrip()  # marks go only from the front
            stripped.append((sentence, len(sentence) - len(rest), place))
        for sentence, lead, place in stripped:
            kept = sentence[lead:].rstrip()
            if kept and not kept.startswith("#"):
                return [_cite_cut(sentence, place, _FALLBACK_CHARS, lead, lead + len(kept))]
        for sentence, lead, place in stripped:
            heading = sentence[lead:].rstrip()
            kept = heading.strip("# \t")
            if kept:
                start = lead + len(heading) - len(heading.lstrip("# \t"))
                return [_cite_cut(sentence, place, _FALLBACK_CHARS, start, start + len(kept))]
        return _fallback_texts(texts)


def _place_of(sentence: _Sentence) -> _Place:
    if sentence.place is None:
        raise ValueError(f"{sentence.text!r} has no place")
    return sentence.place


def _fallback_texts(texts: list[str]) -> list[SummarySentence]:
    """The texts joined, their marks dropped, cut to `_FALLBACK_CHARS`: a sentence of each text the
    part kept reaches into (one text, nearly always)."""
    joined = " ".join(t.strip() for t in texts)
    rest = strip_marks(joined)
    shown, start, end = _cut(rest, _FALLBACK_CHARS)
    start += len(joined) - len(rest)
    end += len(joined) - len(rest)
    out: list[SummarySentence] = []
    offset = 0  # where the text starts in `joined`
    for source, text in enumerate(texts):
        lead = len(text) - len(text.lstrip())
        length = len(text.strip())
        first, last = max(start, offset), min(end, offset + length)
        if first < last:
            out.append(SummarySentence.quoting(joined[first:last], source, lead + first - offset, lead + last - offset))
        offset += length + 1
    if out and shown.endswith("…") and end - start < len(shown):
        out[-1] = replace(out[-1], text=out[-1].text + "…")
    return out


def _format(sentences: Sequence[str], bullets: bool) -> str:
    sentences = [s for s in sentences if s]
    if bullets:
        return "\n".join(f"- {s}" for s in sentences)
    return join_sentences(sentences)
