"""A Griffe extension for the API pages: a docstring's ``Fields:`` section renders as a list.

teamplay's records document their fields in a ``Fields:`` section (one ``name: text`` entry per
field, continuation lines indented deeper). The Google docstring style knows no such section, so
mkdocstrings shows it as a box of one run-together paragraph. This extension rewrites the section,
before the docstring is parsed, into a Markdown list under the same title:

    Fields:                          Fields:
        id: stable identifier.   ->      - `id`: stable identifier.
        prompt: the problem              - `prompt`: the problem
            text.                          text.

An entry that does not start with ``name:`` (``name, fn, options (...)``) keeps its text as the item.
Loaded by ``mkdocs.yml`` (mkdocstrings' ``extensions`` option); it changes no code and no docstring
at run time.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_SECTION = re.compile(r"^(?P<indent> *)Fields:\s*$")
_NAMED = re.compile(r"^(?P<name>[A-Za-z_]\w*):\s+(?P<text>.*)$")


def fields_as_list(doc: str) -> str:
    """``doc`` with each ``Fields:`` section's entries as Markdown list items (see the module doc).

    >>> print(fields_as_list("Fields:\\n    a: one\\n        more.\\n    b, c: two\\n\\nAfter."))
    Fields:
        - `a`: one
          more.
        - b, c: two
    <BLANKLINE>
    After.
    """
    lines = doc.split("\n")
    out: list[str] = []
    k = 0
    while k < len(lines):
        head = _SECTION.match(lines[k])
        out.append(lines[k])
        k += 1
        if not head:
            continue
        body_start = k
        while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > len(head.group("indent"))):
            k += 1
        out += _items(lines[body_start:k])
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _items(body: list[str]) -> list[str]:
    """The body of one section (its lines, indented) as list items; blank lines are kept."""
    filled = [line for line in body if line.strip()]
    if not filled:
        return body
    entry = min(_indent(line) for line in filled)  # the indent of an entry's first line
    out = []
    for line in body:
        if not line.strip():
            out.append(line)
        elif _indent(line) == entry:
            named = _NAMED.match(line.strip())
            text = f"`{named.group('name')}`: {named.group('text')}" if named else line.strip()
            out.append(" " * entry + "- " + text)
        else:
            out.append(" " * (entry + 2) + line.strip())
    return out


class FieldsAsList(griffe.Extension):
    """Rewrites ``Fields:`` sections of every object's docstring (:func:`fields_as_list`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and "Fields:" in obj.docstring.value:
            obj.docstring.value = fields_as_list(obj.docstring.value)
