"""An offline, deterministic extractive summarizer: TextRank over TF-IDF sentence similarity.

Works on English and Chinese (and mixed) text without any model or network:

1. The input is cut into sentences (`docsum_shared.text.sentence_spans`: English abbreviations and
   decimals, Chinese 。！？；). Heading lines (``# ...``), table rows and fragments of fewer than three
   words/characters are not candidates, and neither is what extracted documents are full of but
   nobody wants quoted (`_is_candidate`): table-of-contents lines, lines of mostly digits and
   punctuation, source code, and fragments that open with a lower-case connector ("and the ...",
   "which ..."), left over where a sentence was cut apart. Stray closing brackets at the start of a
   sentence are dropped, words hyphenated at a line end are joined, and exact repeats (after
   normalising case, spaces and punctuation) are dropped, keeping the first.
2. Each candidate becomes a TF-IDF vector over `tokens_for_similarity` (Latin words without
   stopwords, CJK character bigrams); the graph's edge weights are the cosine similarities.
3. PageRank runs on that graph (damping 0.85, power iteration until the L1 change is below 1e-6,
   at most 100 rounds). Its teleport vector is a small position prior: a sentence at position ``k``
   of its text weighs ``1 + lead_bonus / (1 + k)`` before normalisation, so lead sentences are
   slightly favoured. The similarity matrix is never built: with ``A`` the row-normalised TF-IDF
   matrix, ``W = A Aᵀ - diag`` and every product ``W y`` is computed as ``A (Aᵀ y)`` minus the
   diagonal, which costs O(non-zeros) per round - 2,000 sentences rank in a fraction of a second.
4. The best-ranked sentences (ties: earlier first) are taken up to a budget, skipping any that is a
   near-duplicate (token Jaccard >= 0.7) of one already taken, and returned in their original order
   with their original text, joined by a space (by nothing after a sentence ending in CJK). A TASK
   merge of several documents goes round-robin instead: every document's best sentence (in document
   order), then every document's second best, and so on, so that one document that shares words
   with many others cannot fill the summary alone.

Budgets. CHUNK: ``ceil(chunk_ratio * candidates)`` sentences clamped to [1, chunk_max_sentences], and
at most ``max(chunk_ratio * len(input), 200)`` characters (never above ``chunk_max_chars``).
DOCUMENT/TASK merges: when the de-duplicated input already fits ``merge_max_sentences`` and
``merge_max_chars`` it is kept whole; otherwise the best sentences up to those limits. A TASK merge
may take one sentence per document even beyond ``merge_max_sentences``: its sentence budget is
``max(merge_max_sentences, min(documents, 20))`` (the character budget stays). A non-empty
input never yields an empty summary: with no usable candidate the first sentence (or the first 300
characters) is returned, cut at a word boundary when too long.
"""

from __future__ import annotations

import asyncio
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..text import (
    CJK_SENTENCE_END,
    cjk_ratio,
    dehyphenate,
    estimate_tokens,
    is_cjk_char,
    sentence_spans,
    split_sentences,
    tokens_for_similarity,
)
from .base import SummarizerBackend, SummaryKind, SummaryRequest, SummaryResult

MODEL = "extractive-textrank-v1"

_NORMALISE_RE = re.compile(r"[\W_]+")
_CLOSERS = "\"'”’」』）)]】》"
_FALLBACK_CHARS = 300


@dataclass
class _Sentence:
    text: str
    order: int  # position among all sentences of the request
    position: int  # position within its own text
    tokens: list[str]
    source: int = 0  # index of its text in the request


# The `length` option scales every sentence and character budget.
_LENGTH_SCALE = {"brief": 0.5, "": 1.0, "detailed": 2.0}
_TITLE_MAX_UNITS = 12
_TASK_MAX_DOCUMENT_SENTENCES = 20
_END_MARKS = CJK_SENTENCE_END + ".!?:"
_LINE_BREAK_RE = re.compile(r"\s*\n\s*")


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
_STRAY_CLOSERS = ")]）】》」』〕"


def _strip_stray_closers(sentence: str) -> str:
    """Drop closing brackets a sentence opens with (the rest of the previous sentence's parenthesis)."""
    return sentence.lstrip(_STRAY_CLOSERS + " \t\n") if sentence[:1] in _STRAY_CLOSERS else sentence


def _is_candidate(sentence: str, min_units: int) -> bool:
    """Whether a sentence (its line breaks still in it) is prose worth quoting; see the module docstring."""
    sentence = sentence.strip()
    if not sentence or sentence.startswith(("#", "|")):
        return False
    units = estimate_tokens(sentence)  # words, each CJK character counting as one
    # A short line without an end mark is a title or a caption, not a sentence worth quoting.
    if units <= _TITLE_MAX_UNITS and sentence.rstrip(_CLOSERS)[-1:] not in _END_MARKS:
        return False
    if units < min_units:
        return False
    return not (_is_contents(sentence) or _is_code_or_numbers(sentence) or _is_fragment(sentence))


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


def _is_fragment(sentence: str) -> bool:
    m = _FIRST_WORD_RE.match(sentence)
    if m is None or m.group() not in _CONNECTORS:  # lower case only: "And" may open a sentence
        return False
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
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def textrank(
    token_lists: Sequence[Sequence[str]],
    prior: Sequence[float] | None = None,
    *,
    damping: float = 0.85,
    max_iterations: int = 100,
    tolerance: float = 1e-6,
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

    # Term frequencies with token ids in first-appearance order.
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

    # Row-normalised TF-IDF; only terms shared by two or more sentences can link them, so the sparse
    # rows keep only those (the norm still counts every term), and `self_sim` is their part of A·Aᵀ's
    # diagonal, subtracted below.
    row_ids: list[list[int]] = []
    row_ws: list[list[float]] = []
    self_sim: list[float] = []
    col_ids: list[list[int]] = [[] for _ in vocab]
    col_ws: list[list[float]] = [[] for _ in vocab]
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
                col_ids[tid].append(i)
                col_ws[tid].append(w)
        row_ids.append(ids)
        row_ws.append(ws)
        self_sim.append(sum(w * w for w in ws))

    mul = operator.mul

    def w_times(y: list[float]) -> list[float]:
        """W·y with W = A·Aᵀ minus its diagonal."""
        z = [sum(map(mul, col_ws[t], map(y.__getitem__, col_ids[t]))) for t in range(len(col_ids))]
        return [sum(map(mul, row_ws[i], map(z.__getitem__, row_ids[i]))) - self_sim[i] * y[i] for i in range(n)]

    degree = w_times([1.0] * n)
    inv_degree = [1.0 / d if d > 1e-12 else 0.0 for d in degree]
    dangling = [inv_degree[i] == 0.0 for i in range(n)]

    rank = list(p)
    teleport = [(1.0 - damping) * x for x in p]
    for _ in range(max_iterations):
        flow = w_times([r * k for r, k in zip(rank, inv_degree, strict=True)])
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
        lead_bonus: float = 0.5,
        duplicate_jaccard: float = 0.7,
    ) -> None:
        self.chunk_ratio = chunk_ratio
        self.chunk_max_sentences = chunk_max_sentences
        self.chunk_max_chars = chunk_max_chars
        self.merge_max_sentences = merge_max_sentences
        self.merge_max_chars = merge_max_chars
        self.min_units = min_units
        self.lead_bonus = lead_bonus
        self.duplicate_jaccard = duplicate_jaccard

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        # CPU-bound (a large merge ranks thousands of sentences): off the event loop, so the consumer's
        # polls and heartbeats go on meanwhile.
        return await asyncio.to_thread(self.summarize_sync, request)

    def summarize_sync(self, request: SummaryRequest) -> SummaryResult:
        texts = [t for t in request.texts if t and t.strip()]
        scale = _LENGTH_SCALE.get(request.length, 1.0)
        summary = self._summarize(texts, request.kind, scale) if texts else ""
        if summary and request.style == "bullets":
            summary = "\n".join(f"- {sentence}" for sentence in split_sentences(summary))
        return SummaryResult(
            text=summary,
            model=self.model,
            prompt_tokens=sum(estimate_tokens(t) for t in request.texts),
            completion_tokens=estimate_tokens(summary),
        )

    # ----------------------------------------------------------------------------------------------

    def _summarize(self, texts: list[str], kind: SummaryKind, scale: float = 1.0) -> str:
        all_sentences: list[str] = []
        candidates: list[_Sentence] = []
        seen: set[str] = set()
        for source, text in enumerate(texts):
            for position, (s, e) in enumerate(sentence_spans(text)):
                raw = _strip_stray_closers(text[s:e].strip())
                sentence = _unwrap(raw)
                all_sentences.append(sentence)
                if not _is_candidate(raw, self.min_units):
                    continue
                key = _NORMALISE_RE.sub("", sentence.lower())
                tokens = tokens_for_similarity(sentence)
                if not key or not tokens or key in seen:
                    continue
                seen.add(key)
                candidates.append(_Sentence(sentence, len(all_sentences) - 1, position, tokens, source))
        if not candidates:
            return self._fallback(all_sentences, texts)

        input_chars = sum(len(t) for t in texts)
        if kind is SummaryKind.CHUNK:
            limit = math.ceil(self.chunk_max_sentences * scale)
            max_sentences = max(1, min(limit, math.ceil(self.chunk_ratio * scale * len(candidates))))
            hard_chars = int(self.chunk_max_chars * scale)
            soft_chars = min(hard_chars, max(int(self.chunk_ratio * scale * input_chars), 200))
        else:
            max_sentences = max(1, math.ceil(self.merge_max_sentences * scale))
            if kind is SummaryKind.TASK:  # room for one sentence per document
                max_sentences = max(max_sentences, min(len(texts), _TASK_MAX_DOCUMENT_SENTENCES))
            hard_chars = soft_chars = int(self.merge_max_chars * scale)

        if kind is not SummaryKind.CHUNK and self._fits(candidates, max_sentences, soft_chars):
            order = list(range(len(candidates)))  # a merge that already fits: keep everything
        else:
            prior = [1.0 + self.lead_bonus / (1 + c.position) for c in candidates]
            scores = textrank([c.tokens for c in candidates], prior)
            order = sorted(range(len(candidates)), key=lambda i: (-round(scores[i], 12), candidates[i].order))
            if kind is SummaryKind.TASK and len(texts) > 1:
                order = _round_robin(order, candidates)

        chosen: list[_Sentence] = []
        chosen_sets: list[set[str]] = []
        used = 0
        for i in order:
            if len(chosen) >= max_sentences:
                break
            c = candidates[i]
            extra = len(c.text) + (1 if chosen else 0)
            if used + extra > (soft_chars if chosen else hard_chars):
                continue
            token_set = set(c.tokens)
            if any(_jaccard(token_set, other) >= self.duplicate_jaccard for other in chosen_sets):
                continue
            chosen.append(c)
            chosen_sets.append(token_set)
            used += extra
        if not chosen:  # every candidate is longer than the budget: the best one, shortened
            best = candidates[order[0]]
            return _truncate(best.text, hard_chars)
        chosen.sort(key=lambda c: c.order)
        return join_sentences([c.text for c in chosen])

    def _fits(self, candidates: list[_Sentence], max_sentences: int, max_chars: int) -> bool:
        if len(candidates) > max_sentences:
            return False
        return sum(len(c.text) for c in candidates) + len(candidates) - 1 <= max_chars

    @staticmethod
    def _fallback(sentences: list[str], texts: list[str]) -> str:
        sentences = [_strip_stray_closers(s).strip() for s in sentences]
        for sentence in sentences:
            if sentence and not sentence.startswith("#"):
                return _truncate(sentence, _FALLBACK_CHARS)
        for sentence in sentences:
            if sentence.strip("# \t"):
                return _truncate(sentence.strip("# \t"), _FALLBACK_CHARS)
        return _truncate(_strip_stray_closers(" ".join(t.strip() for t in texts)), _FALLBACK_CHARS)


def _round_robin(order: list[int], candidates: list[_Sentence]) -> list[int]:
    """Rank order regrouped: each text's best candidate (texts in order), then each one's second, ..."""
    per_text: dict[int, list[int]] = {}
    for i in order:
        per_text.setdefault(candidates[i].source, []).append(i)
    queues = [per_text[source] for source in sorted(per_text)]
    return [queue[r] for r in range(max(map(len, queues))) for queue in queues if r < len(queue)]
