"""Text the database refuses: U+0000 (PostgreSQL's text cannot hold it) and lone surrogates
(not encodable as UTF-8, so the driver cannot send them).

Requests carrying such text are refused at the door (`api.serving.bounded_json`); text that comes
from outside (a receiver's answer, a page) is made storable with `storable` before it is written.
"""

from __future__ import annotations

import re

#: Characters no text column can store.
REFUSED = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def first_refused(text: str) -> int | None:
    """The index of the first character the database refuses, or None when it takes all."""
    if text.isascii():  # the common case, in one C pass
        index = text.find("\x00")
        return None if index < 0 else index
    found = REFUSED.search(text)
    return None if found is None else found.start()


def storable(text: str) -> str:
    """`text` with every refused character replaced by U+FFFD, so it can be stored as it reads."""
    return text if first_refused(text) is None else REFUSED.sub(REPLACEMENT, text)
