"""Text others wrote — file names, titles, errors, owners, summaries — made safe to print with rich.

rich reads markup in what it prints: "[/x].txt" raises MarkupError, "[link=…]…[/link]" makes a link. And
a terminal obeys the control characters in what it is sent: ESC starts a sequence that makes a link
(OSC 8), clears the screen or sets the window's title, CR writes over the line. So each such text is
printed through `as_text` (with markup=False) or `as_markup` (inside markup of the CLI's own).
"""

from __future__ import annotations

import re

from rich.markup import escape

# C0 and C1 control characters but tab and line feed (0x9b and 0x9d are ESC [ and ESC ] in one byte, for
# the terminals that read C1 controls).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def as_text(text: str) -> str:
    """`text` with each control character shown by its code ("\\x1b"), to print with markup=False."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def as_markup(text: str) -> str:
    """`text` as rich markup that shows it as it is: control characters by their code, "[" as "[" (rich's
    escape), so nothing in it is read as a tag."""
    return escape(as_text(text))
