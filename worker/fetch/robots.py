"""robots.txt (RFC 9309): a small exact parser and a per-origin policy cached through Redis.

The stdlib parser misses longest-match precedence, `*`/`$` patterns and percent-encoding
rules, so matching is implemented here (linear-time glob matching, no regexes built from
untrusted text). The robots.txt fetch itself is done by the caller through the same guarded
transport as any other fetch.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from worker.domain.reasons import Reason
from worker.fetch.guard import ParsedTarget
from worker.fetch.politeness import SharedState
from worker.fetch.types import FetchFailure

#: Bytes of robots.txt parsed at most (RFC 9309 §2.5 requires at least 500 KiB).
ROBOTS_MAX_BYTES = 500 * 1024
#: How long a fetched robots.txt is trusted, in seconds.
ROBOTS_TTL_SECONDS = 3600
#: How long a server-error answer (disallow all) is remembered, in seconds.
ROBOTS_ERROR_TTL_SECONDS = 300
#: How long a worker process reuses an origin's answer, parsed, before asking Redis again.
ROBOTS_LOCAL_TTL_SECONDS = 30.0
#: Origins a worker process remembers at most (the memo is emptied when full).
ROBOTS_LOCAL_MAX_ORIGINS = 1024

ALLOW_ALL = "allow_all"
DISALLOW_ALL = "disallow_all"
RULES = "rules"

_PCT = re.compile(r"%([0-9a-fA-F]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_TOKEN = re.compile(r"[a-z_-]+")


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent (`EvidenceRetrieval/0.1 (...)` → `evidenceretrieval`)."""
    match = _TOKEN.match(user_agent.strip().lower())
    return match.group(0) if match else user_agent.strip().lower()


def normalise_path(path: str) -> str:
    """Percent-encoding normalised as RFC 9309 §2.2.2 asks: unreserved decoded, rest upper."""

    def fix(match: re.Match[str]) -> str:
        value = int(match.group(1), 16)
        return chr(value) if value in _UNRESERVED else f"%{value:02X}"

    fixed = _PCT.sub(fix, path)
    return "".join(c if c.isascii() else quote(c, safe="") for c in fixed)


def glob_match(pattern: str, path: str) -> bool:
    """Does robots `pattern` (with `*` and a final `$`) match `path` from its start?"""
    anchored = pattern.endswith("$")
    pieces = (pattern[:-1] if anchored else pattern).split("*")
    if not path.startswith(pieces[0]):
        return False
    position = len(pieces[0])
    if len(pieces) == 1:
        return position == len(path) if anchored else True
    for piece in pieces[1:-1]:
        found = path.find(piece, position)
        if found < 0:
            return False
        position = found + len(piece)
    last = pieces[-1]
    if anchored:
        return path.endswith(last) and len(path) - len(last) >= position
    return path.find(last, position) >= 0


@dataclass
class _Group:
    agents: list[str] = field(default_factory=list)
    rules: list[tuple[bool, str]] = field(default_factory=list)
    has_rules: bool = False


@dataclass
class RobotsRules:
    """Parsed robots.txt groups; `allowed(token, path)` answers per RFC 9309."""

    groups: list[_Group]

    @classmethod
    def parse(cls, text: str) -> RobotsRules:
        """Parse robots.txt text (unknown lines ignored, rules before any agent ignored)."""
        groups: list[_Group] = []
        current: _Group | None = None
        for raw in text.removeprefix("\ufeff").splitlines():
            line = raw.split("#", 1)[0].strip()
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key, value = key.strip().lower(), value.strip()
            if key in ("user-agent", "useragent"):
                if current is None or current.has_rules:
                    current = _Group()
                    groups.append(current)
                current.agents.append(value.lower())
            elif key in ("allow", "disallow") and current is not None:
                current.has_rules = True
                if value:
                    current.rules.append((key == "allow", normalise_path(value)))
        return cls(groups)

    def _rules_for(self, token: str) -> list[tuple[bool, str]]:
        def names(group: _Group) -> set[str]:
            return {m.group(0) for a in group.agents if (m := _TOKEN.match(a))}

        chosen = [g for g in self.groups if token in names(g)]
        if not chosen:
            chosen = [g for g in self.groups if "*" in g.agents]
        return [rule for group in chosen for rule in group.rules]

    def allowed(self, token: str, path: str) -> bool:
        """Longest matching rule wins; on a tie, allow wins; no match allows."""
        target = normalise_path(path or "/")
        if target == "/robots.txt":
            return True
        best: tuple[int, bool] | None = None
        for allow, pattern in self._rules_for(token.lower()):
            if glob_match(pattern, target):
                candidate = (len(pattern), allow)
                if best is None or candidate > best:
                    best = candidate
        return True if best is None else best[1]


@dataclass(frozen=True)
class RobotsAnswer:
    """What a robots.txt fetch said: allow all, disallow all, or rules text."""

    kind: str
    text: str = ""

    @classmethod
    def from_response(cls, status: int, body: bytes) -> RobotsAnswer:
        """2xx → rules; 5xx → disallow all; anything else (4xx, odd 3xx) → allow all."""
        if 200 <= status < 300:
            return cls(RULES, body[:ROBOTS_MAX_BYTES].decode("utf-8", errors="replace"))
        if status >= 500:
            return cls(DISALLOW_ALL)
        return cls(ALLOW_ALL)


class RobotsPolicy:
    """Obey robots.txt per origin: answers cached in Redis, and parsed in-process for a while."""

    def __init__(
        self,
        state: SharedState,
        user_agent: str,
        fetch: Callable[[str], RobotsAnswer],
        *,
        ttl_seconds: int = ROBOTS_TTL_SECONDS,
        error_ttl_seconds: int = ROBOTS_ERROR_TTL_SECONDS,
        local_ttl_seconds: float = ROBOTS_LOCAL_TTL_SECONDS,
    ) -> None:
        self.state = state
        self.token = product_token(user_agent)
        self.fetch = fetch
        self.ttl_seconds = ttl_seconds
        self.error_ttl_seconds = error_ttl_seconds
        self.local_ttl_seconds = local_ttl_seconds
        self._local: dict[str, tuple[float, RobotsAnswer, RobotsRules | None]] = {}
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def answer(self, origin: str) -> RobotsAnswer:
        """The origin's robots answer, from the cache or fetched (and then cached)."""
        key = self.state.key("robots", origin)
        cached = self.state.call(None, "get", key)
        if cached:
            try:
                data = json.loads(cached)
                return RobotsAnswer(str(data["kind"]), str(data.get("text", "")))
            except (ValueError, KeyError, TypeError):
                pass
        answer = self.fetch(f"{origin}/robots.txt")
        ttl = self.error_ttl_seconds if answer.kind == DISALLOW_ALL else self.ttl_seconds
        payload = json.dumps({"kind": answer.kind, "text": answer.text})
        self.state.call(None, "set", key, payload, ex=ttl)
        return answer

    def rules(self, origin: str) -> tuple[RobotsAnswer, RobotsRules | None]:
        """The origin's answer and parsed rules: from this process's memo, else `answer`.

        Only one of the process's retrievals loads an origin's answer at a time; the others
        wait for it and read the memo (one robots.txt fetch per origin, not one per thread).
        """
        memo = self._memo(origin)
        if memo is not None:
            return memo
        with self._lock:
            loading = self._loading.setdefault(origin, threading.Lock())
        with loading:
            memo = self._memo(origin)
            if memo is not None:
                return memo
            try:
                return self._load(origin)
            finally:
                with self._lock:
                    self._loading.pop(origin, None)

    def memoized(self, origin: str) -> bool:
        """Whether `check` can answer for `origin` from this process's memo (no request)."""
        return self._memo(origin) is not None

    def _memo(self, origin: str) -> tuple[RobotsAnswer, RobotsRules | None] | None:
        memo = self._local.get(origin)
        if memo is not None and memo[0] > time.monotonic():
            return memo[1], memo[2]
        return None

    def _load(self, origin: str) -> tuple[RobotsAnswer, RobotsRules | None]:
        now = time.monotonic()
        answer = self.answer(origin)
        parsed = RobotsRules.parse(answer.text) if answer.kind == RULES else None
        if len(self._local) >= ROBOTS_LOCAL_MAX_ORIGINS:
            self._local.clear()
        self._local[origin] = (now + self.local_ttl_seconds, answer, parsed)
        return answer, parsed

    def check(self, target: ParsedTarget) -> None:
        """Raise access_denied when robots.txt disallows `target` for our product token."""
        if target.path == "/robots.txt":
            return
        answer, parsed = self.rules(target.origin)
        if answer.kind == DISALLOW_ALL:
            detail = "robots.txt answered a server error: disallow all (RFC 9309)"
            raise FetchFailure(Reason.ACCESS_DENIED, detail)
        if parsed is not None and not parsed.allowed(self.token, target.path):
            raise FetchFailure(Reason.ACCESS_DENIED, f"disallowed by robots.txt for {self.token}")
