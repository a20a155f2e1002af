"""JSON values as memory content, and back, unchanged by the server's text cleaning."""

from __future__ import annotations

import json
from typing import Any

# The server strips "[Memory from ...]" annotations from stored text (api/tools/sanitize.py).
# In JSON that text can only sit inside a string, where "\u005b" is the same "[", so the
# escaped form survives the cleaning and decodes to the value that was put.
_ANNOTATION = "[Memory from"
_ESCAPED = "\\u005bMemory from"


def encode(value: Any) -> str:
    """JSON text (strict: no NaN); ``ValueError``/``TypeError`` on a value
    JSON cannot hold."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return text.replace(_ANNOTATION, _ESCAPED)


def decode(text: str) -> Any:
    """The value ``encode`` wrote; ``ValueError`` when the text is not JSON."""
    return json.loads(text)
