"""griffe extension for the API reference: ``Example:`` sections read as ``Examples:``.

Ostinato's docstrings write doctest examples under ``Example:``; griffe's Google-style parser
only treats ``Examples:`` as code (``Example:`` becomes an admonition of plain Markdown, where
``x["a"][-3:]`` reads as a link). This rewrites the docstring text as griffe loads it; the
source is not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and "Example:" in docstring.value:
            docstring.value = _EXAMPLE.sub(r"\1Examples:", docstring.value)
