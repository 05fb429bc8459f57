"""Small HTML building blocks shared by the report's page and its transcript browser.

The one rule of this package: every string that came from a run (model text, answers, problem
ids, agent and role names, config values, metadata) reaches the page through ``esc``. Markup
is only ever built from literals of this package and escaped values; numbers are formatted here.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

MISSING = "—"


def esc(value: object) -> str:
    """``str(value)`` escaped for HTML text and double- or single-quoted attribute values."""
    return html.escape(str(value), quote=True)


def fmt(value: float | int | None, digits: int = 3) -> str:
    """A number for a table cell: ints with thousands separators, floats with ``digits`` decimals
    (at most 1 from 100 on, none from 1000 on), None and NaN as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.{min(digits, 1)}f}"
    return f"{value:.{digits}f}"


def fmt_signed(value: float | None, digits: int = 3) -> str:
    """A difference or an advantage with an explicit sign (``+0.250``, ``−0.100``)."""
    if value is None or math.isnan(value):
        return MISSING
    text = f"{value:+.{digits}f}"
    return text.replace("-", "\u2212")  # a real minus sign lines up with the plus in tables


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], css_class: str = "",
          row_classes: Sequence[str] | None = None) -> str:
    """A table whose header texts are escaped here and whose cells are markup built by the caller
    (already escaped). ``row_classes`` gives an optional class per row (e.g. to highlight it)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{esc(row_classes[i])}"' if row_classes and row_classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    cls = f' class="{esc(css_class)}"' if css_class else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def note(text: str) -> str:
    """A muted paragraph of (escaped) explanatory text."""
    return f'<p class="note">{esc(text)}</p>'
