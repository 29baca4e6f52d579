"""Count the Lua scripts this process sends to Redis.

Counted in the process, not from Redis's own command statistics: those count every process's
scripts, and other tests run beside the one counting.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.commands.core import Script


class ScriptRuns:
    """Scripts run through redis-py's `Script` from now on (all, or only the one `source`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, source: str | None = None) -> None:
        self.count = 0
        run = Script.__call__

        def counted(script: Script, *args: Any, **kwargs: Any) -> Any:
            if source is None or script.script == source:
                self.count += 1
            return run(script, *args, **kwargs)

        monkeypatch.setattr(Script, "__call__", counted)
