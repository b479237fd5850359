"""Text utilities shared by the chunker and the extractive summarizer: sentences, scripts, tokens.

Everything here is pure, deterministic and linear in the length of the text (regular expressions plus
single passes), so it is safe to run on a document of a million characters.

Sentences
    `sentence_spans(text)` returns ``(start, end)`` offsets into the original string. A span starts at
    a non-whitespace character and ends right after the sentence's end punctuation (closing quotes and
    brackets included); the whitespace between two spans belongs to neither, so
    ``text[spans[i][1]:spans[i + 1][0]]`` is always whitespace and the spans plus those gaps rebuild
    the text. Boundaries:

    * English ``.``, ``!``, ``?`` (runs such as ``?!`` or ``...`` count as one) followed by whitespace
      or the end of the text - except after abbreviations ("e.g.", "i.e.", "Mr.", "Dr.", "et al.",
      "No. 5"), initials ("J. Smith"), dotted acronyms ("U.S."), a list number at the start of a line
      ("1. First"), or when the next word starts with a lower-case letter. "3.14" never splits (no
      whitespace after the dot).
    * Chinese/Japanese ``。！？；．`` (and ASCII ``!``/``?`` written right after a CJK character),
      with any closing quotes ``”」』`` that follow; no whitespace needed after them.
    * Line structure: a blank line (paragraph break) always ends a sentence; so does a line break
      before or after a Markdown heading (``# ...``) or a table row (``| ...``), and before a list item
      (``- ...``, ``* ...``, ``1. ...``). Any other single line break is a soft wrap (PDF text) and does
      not end a sentence.

Clean-up of extracted text
    `fold_compatibility(text)` applies NFKC to a chosen set of compatibility characters only
    (ligatures such as "ﬁ", Arabic presentation forms, styled mathematical letters), and
    `dehyphenate(text)` joins words hyphenated at a line end ("de-\\nfined" -> "defined").
    `without_lone_surrogates(text)` makes text UTF-8 can encode, and `storable(text)` text PostgreSQL
    can store (no NUL either).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import unicodedata
from collections.abc import Iterator

# --------------------------------------------------------------------------------------------------
# Scripts

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3007\U00020000-\U0002fa1f"
_KANA = "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f"
_HANGUL = "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
_CJK = _HAN + _KANA + _HANGUL

_CJK_CHAR_RE = re.compile(f"[{_CJK}]")
_NOT_CJK_RE = re.compile(f"[^{_CJK}]+")
_NOT_LETTERS_RE = re.compile(r"[\W\d_]+")

# Sentence-final punctuation of CJK text (full-width), and what may close a quotation after it.
CJK_SENTENCE_END = "。！？；．"
_CLOSERS = "\"'”’」』）)\\]】》"


def is_cjk_char(c: str) -> bool:
    """A Chinese character (Han), Japanese kana or Korean Hangul syllable/jamo."""
    return bool(c) and _CJK_CHAR_RE.fullmatch(c[0]) is not None


def cjk_ratio(text: str) -> float:
    """The share of CJK characters among the letters of `text` (0.0 when there are no letters)."""
    # Counted by what is left once the rest is cut out: one string built in C, not a list of one-character
    # strings (it runs on every chunk's prompt, several times).
    if text.isascii():
        return 0.0
    letters = len(_NOT_LETTERS_RE.sub("", text))
    if not letters:
        return 0.0
    return cjk_count(text) / letters


def cjk_count(text: str) -> int:
    """How many CJK characters `text` holds."""
    return 0 if text.isascii() else len(_NOT_CJK_RE.sub("", text))


def estimate_tokens(text: str) -> int:
    """A rough token count for cost accounting: Latin words and numbers plus CJK characters."""
    return len(words(text))


def words(text: str) -> list[str]:
    """The words of `text`, in order: runs of letters and digits, each CJK character a word of its own
    (CJK text has no spaces)."""
    return _WORDS_RE.findall(text)


_WORDS_RE = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")


# An upper estimate for budgets (a request judged to fit must fit): a CJK character or CJK/full-width
# punctuation mark is about a token, other text about 3.2 characters a token (real tokenizers: ~4).
_TOKEN_CJK_RE = re.compile(f"[{_CJK}\u3000-\u303f\uff00-\uffef]")
_LATIN_CHARS_PER_TOKEN = 3.2


def estimate_tokens_upper(text: str) -> int:
    cjk = 0 if text.isascii() else len(_TOKEN_CJK_RE.findall(text))
    return cjk + math.ceil((len(text) - cjk) / _LATIN_CHARS_PER_TOKEN)


# --------------------------------------------------------------------------------------------------
# Clean-up of extracted text

# Compatibility characters that NFKC may fold. Whole-text NFKC is not an option: it would also turn
# full-width CJK punctuation and digits ("，；！？１") into ASCII, half-width katakana into full-width,
# "…" into "...", "①" into "1" and "x²" into "x2", which changes what the sentence splitter (and a
# reader) sees. These ranges only hold presentation variants of ordinary letters:
_COMPATIBILITY_RE = re.compile(
    "["
    "\u0132\u0133\u013f\u0140\u0149\u017f"  # Latin ligature letters Ĳ ĳ Ŀ ŀ ŉ and the long s ſ
    "\u01c4-\u01cc\u01f1-\u01f3"  # Latin digraphs Ǆ ǅ ǆ Ǉ ǈ ǉ Ǌ ǋ ǌ Ǳ ǲ ǳ
    "\ufb00-\ufb4f"  # Alphabetic Presentation Forms: ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ, Armenian and Hebrew ligatures
    "\ufb50-\ufdff\ufe70-\ufefe"  # Arabic Presentation Forms A and B (not U+FEFF, the BOM)
    "\U0001d400-\U0001d7ff"  # Mathematical Alphanumeric Symbols: 𝐀 𝑥 𝟏 (math in PDF text)
    "]+"
)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(text: str) -> str:
    """The text with every surrogate code point resolved: a high and a low one in a row become the
    character they encode, any other becomes U+FFFD. A PDF's ToUnicode map may map a glyph to a lone
    surrogate (pypdf decodes with "surrogatepass"), and UTF-8 - so PostgreSQL - cannot hold one."""
    if _SURROGATE_RE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def storable(text: str) -> str:
    """The text as PostgreSQL can store it: NUL dropped (a `text` or `jsonb` value cannot hold one) and
    surrogates resolved as `without_lone_surrogates` does. What a model wrote passes here before docsum
    reads it: a document may tell the model to write "\\u0000", and one answer that cannot be stored would
    fail every answer stored beside it."""
    # isascii: Python's own flag, known without a scan (an ASCII text has no surrogate).
    return (text if text.isascii() else without_lone_surrogates(text)).replace("\x00", "")


def fold_compatibility(text: str) -> str:
    """NFKC for ligatures and other presentation-form letters only; everything else is left as it is."""
    return _COMPATIBILITY_RE.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


# A word fragment, a hyphen and a line break, then the rest of the word (and what sticks to it, such
# as a full stop) and the spaces after it. Letters only on both sides: "3-\n4", "x_y-\nz" are left.
_HYPHEN_BREAK_RE = re.compile(r"(?<!\w)([^\W\d_]+)-\n[ \t]*+([^\W\d_]+)(\S*)([ \t]+(?=\S))?")
_HYPHENATED_WORD_RE = re.compile(r"(?<![\w-])[^\W\d_]+(?:-[^\W\d_]+)+")
_WORD_RE = re.compile(r"[^\W\d_]+")


def dehyphenate(text: str) -> str:
    """Join words that a typesetter hyphenated at a line end: "de-\\nfined the" -> "defined\\nthe".

    Only a lower-case letter, "-", a line break and a lower-case letter qualify (so "Kafka-\\nStreams",
    "3-\\n4" and list items stay). The joined word ends the first line; the rest of the second line
    stays on its own line. A compound broken at its own hyphen ("event-\\ndriven") cannot be told
    apart from a hyphenated word, so it is joined too ("eventdriven") - unless the text writes the
    compound with its hyphen elsewhere ("event-driven") and never without it, then the hyphen stays.
    """
    if "-\n" not in text:
        return text

    @functools.cache
    def vocabulary() -> tuple[frozenset[str], frozenset[str]]:
        """The text's hyphenated compounds and its words, read once, on the first candidate."""
        compounds = frozenset(w.lower() for w in _HYPHENATED_WORD_RE.findall(text))
        return compounds, frozenset(w.lower() for w in _WORD_RE.findall(text))

    def join(m: re.Match[str]) -> str:
        head, tail, rest, spaces = m.groups()
        if not (head[-1].islower() and tail[0].islower()):
            return m.group()
        compounds, words = vocabulary()
        joined = head + tail
        hyphen = f"{head}-{tail}".lower() in compounds and joined.lower() not in words
        return (f"{head}-{tail}" if hyphen else joined) + rest + ("\n" if spaces else "")

    return _HYPHEN_BREAK_RE.sub(join, text)


# --------------------------------------------------------------------------------------------------
# Sentences

# Candidate boundaries. The pattern opens with one character class (a newline or an end mark), which
# lets the regex engine skip ordinary text quickly, and every repetition is possessive, keeping the
# scan linear. After a newline one of three named groups must match (a soft line break matches
# nothing); after an end mark the rest of the run of marks and closing quotes is taken. Which ASCII
# candidates really end a sentence is decided in `_boundaries`.
_HEADING = r"#{1,6}(?=[ \t\r\n]|\Z)"
_OWN_LINE = rf"[ \t]*+(?P<own>(?:{_HEADING}|\|)[^\n]*+)"  # heading or table row: a sentence of its own
_END_MARKS = CJK_SENTENCE_END + ".!?"
_CANDIDATE_RE = re.compile(
    f"[\n{_END_MARKS}](?:"
    # a line break, then a heading or table line (end marks inside it do not count)
    rf"(?<=\n){_OWN_LINE}"
    # a paragraph break: blank lines (the last newline is left to the next match)
    r"|(?<=\n)(?P<para>\s*(?=\n))"
    # a line break before a list item
    r"|(?<=\n)(?P<block>(?=[ \t]*+(?:[-*+•][ \t]|\d{1,3}[.)][ \t])))"
    # the rest of a run of end marks, and closing quotes
    f"|(?<!\n)[{_END_MARKS}]*+[{_CLOSERS}]*+)"
)
_OWN_LINE_RE = re.compile(_OWN_LINE)
_CJK_END_RE = re.compile(f"[{CJK_SENTENCE_END}]")
_NONSPACE_RE = re.compile(r"\S")
_DOTTED_ACRONYM_RE = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")

# A dot after these never ends a sentence.
_ABBREVIATIONS = frozenset(
    """mr mrs ms mx dr prof rev hon sr jr st mt vs al e.g i.e eg ie cf viz approx ca dept
    fig figs eq eqs vol vols pp ed eds esp incl resp""".split()
)
# ... and these only when a number follows ("No. 5", "p. 12").
_NUMBER_ABBREVIATIONS = frozenset("no nos nr art sec ch p para".split())
_OPENERS = "([{\"'“‘「『（【《"


def _is_abbreviation(text: str, dot: int, next_char: str) -> bool:
    """Whether the "." at `dot` (followed by whitespace) closes an abbreviation, not a sentence."""
    lo = dot - 32 if dot > 32 else 0
    words = text[lo:dot].rsplit(None, 1)
    if not words or (len(words) == 1 and lo > 0 and not text[lo - 1].isspace()):
        return False  # nothing before the dot, or a "word" of more than 32 characters
    raw = words[-1]
    j = dot - len(raw)
    token = raw.lstrip(_OPENERS)
    if not token:
        return False
    low = token.lower()
    if low in _ABBREVIATIONS:
        return True
    if low in _NUMBER_ABBREVIATIONS and next_char.isdigit():
        return True
    if len(token) == 1 and token.isupper():  # an initial: "J. Smith"
        return True
    if _DOTTED_ACRONYM_RE.fullmatch(token):  # "U.S.", "a.m."
        return True
    # A list or section number at the start of a line: "1. First step", "# 2. Design".
    if token.isdigit() and len(token) <= 3:
        while j > 0 and text[j - 1] in " \t#":
            j -= 1
        return j == 0 or text[j - 1] == "\n"
    return False


def _boundaries(text: str) -> Iterator[int]:
    """Offsets where a sentence ends (exclusive), in increasing order; may include duplicates."""
    n = len(text)
    pos = 0
    m = _OWN_LINE_RE.match(text)  # the text opens with a heading or table row
    if m:
        yield m.end()
        pos = m.end()
    for m in _CANDIDATE_RE.finditer(text, pos):
        start, end = m.span()
        if text[start] == "\n":
            if m.lastgroup == "own":
                yield start  # the line break before the heading / table row ...
                yield end  # ... and its end
            else:  # para, block
                yield start
            continue
        run = m.group()
        if _CJK_END_RE.search(run):  # Chinese/Japanese: an end wherever it is
            yield end
            continue
        after = text[end] if end < n else ""
        if after and not after.isspace():
            # "3.14", "e.g": no; "好!然后": ! or ? touching CJK text ends the sentence
            if run[0] in "!?" and (is_cjk_char(after) or (start and is_cjk_char(text[start - 1]))):
                yield end
            continue
        next_char = text[end + 1] if end + 1 < n else ""  # the next word's first character decides
        if next_char.isspace():
            next_char = text[end : end + 64].lstrip()[:1]
        if next_char.islower():
            continue  # "e.g. the ...", "etc. and ...": the sentence goes on
        if run.rstrip(_CLOSERS) == "." and _is_abbreviation(text, start, next_char):
            continue
        yield end


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of `text` as ``(start, end)`` offsets; see the module docstring for the rules.

    Spans are non-empty, ordered and disjoint, start at a non-whitespace character and end after one
    (trailing whitespace is never part of a span).
    """
    spans: list[tuple[int, int]] = []
    n = len(text)
    pos = 0  # the end of the last boundary consumed
    first = -1  # cached: the first non-whitespace offset at or after `pos` (n if none), -1 = unknown
    for b in _boundaries(text):
        if b <= pos:
            continue
        if first < pos:
            m = _NONSPACE_RE.search(text, pos)
            first = m.start() if m else n
        if first >= b:
            continue  # only whitespace up to this boundary
        end = b
        while end > first and text[end - 1].isspace():
            end -= 1
        spans.append((first, end))
        pos = b
    m = _NONSPACE_RE.search(text, pos)
    if m:
        end = n
        while end > m.start() and text[end - 1].isspace():
            end -= 1
        spans.append((m.start(), end))
    return [piece for span in spans for piece in _split_title_line(text, span)]


_SMALL_WORDS = frozenset("a an and as at by for from in of on or the to vs via with".split())


def _is_title_line(line: str, next_line: str) -> bool:
    """A heading that PDF text gives as a plain line: no end mark, and in Title Case or much shorter
    than the line after it."""
    words = line.split()
    if not 1 <= len(words) <= 15 or line.rstrip(_CLOSERS)[-1:] in _END_MARKS + ",;:":
        return False
    if len(words) <= 8 and len(line) < 0.5 * len(next_line):
        return True
    significant = [w for w in words if w.lower() not in _SMALL_WORDS]
    capitalized = sum(1 for w in significant if w[:1].isupper() or w[:1].isdigit())
    return bool(significant) and capitalized >= 0.8 * len(significant)


def _split_title_line(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    start, end = span
    newline = text.find("\n", start, end)
    if newline < 0:
        return [span]
    rest = _NONSPACE_RE.search(text, newline, end)
    if rest is None or not text[rest.start()].isupper():
        return [span]
    next_end = text.find("\n", rest.start(), end)
    if not _is_title_line(text[start:newline], text[rest.start() : next_end if next_end >= 0 else end]):
        return [span]
    head_end = newline
    while head_end > start and text[head_end - 1].isspace():
        head_end -= 1
    return [(start, head_end), (rest.start(), end)]


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, each with its end punctuation and without surrounding whitespace."""
    return [text[s:e] for s, e in sentence_spans(text)]


# --------------------------------------------------------------------------------------------------
# Similarity tokens

_TOKEN_RE = re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<word>[0-9A-Za-z\u00c0-\u024f]+(?:['’][A-Za-z]+)?)")

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had has
    have having he her here hers herself him himself his how i if in into is it its itself just me more
    most my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves may might must shall us via per""".split()
)
# Chinese function characters: a bigram containing one of them carries little meaning.
_CJK_STOP = frozenset("的了着之与及和或而是在也就都把被")


def _fold(word: str) -> str:
    """Lower-case, drop a possessive, fold a regular plural ("studies" -> "study", "models" -> "model")."""
    w = word.lower()
    if w.endswith(("'s", "’s")):
        w = w[:-2]
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def tokens_for_similarity(sentence: str) -> list[str]:
    """Content tokens for comparing sentences, in order of appearance.

    Latin words: lower-cased, plural-folded, without English stopwords and one-letter words. CJK runs
    (which have no spaces): character bigrams, minus those containing a function character such as
    的 or 了; a one-character run gives that character.
    """
    out: list[str] = []
    for m in _TOKEN_RE.finditer(sentence):
        run = m.group("cjk")
        if run is not None:
            if len(run) == 1:
                if run not in _CJK_STOP:
                    out.append(run)
                continue
            for i in range(len(run) - 1):
                a, b = run[i], run[i + 1]
                if a not in _CJK_STOP and b not in _CJK_STOP:
                    out.append(a + b)
            continue
        word = m.group("word")
        if len(word) < 2:
            continue
        low = word.lower()
        if low in STOPWORDS:
            continue
        out.append(_fold(low))
    return out


def content_draw(text: str) -> float:
    """A number in [0, 1) drawn from `text` alone (a hash of it): the same wherever that text stands in
    a document, which is what content-defined cuts (the chunker's) and groups (the merger's) decide by."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
