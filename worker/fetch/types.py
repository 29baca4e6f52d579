"""What a fetch returns: a bounded response, or a failure with its contract reason."""

from dataclasses import dataclass, field

from worker.domain.reasons import Reason


@dataclass(frozen=True)
class FetchedResponse:
    """A successful (2xx) response, its body decompressed and bounded."""

    #: Final URL after redirects.
    url: str
    status_code: int
    #: Lower-cased header names to values (last value wins).
    headers: dict[str, str]
    #: Decompressed body, at most the configured byte bound.
    body: bytes
    #: True when the body was cut at the byte bound (`response_too_large`).
    truncated: bool
    #: Media type from Content-Type (checked and sniffed), one of the schema's enum or None.
    mime_type: str | None
    #: Encoding the Content-Type header declares (an Encoding Standard name), if any.
    charset: str | None = None


@dataclass(frozen=True)
class NotModified:
    """A 304 to a conditional GET: the final URL after redirects, and the response headers."""

    url: str
    #: Lower-cased header names to values (a 304 may carry updated validators).
    headers: dict[str, str]


@dataclass
class FetchFailure(Exception):
    """Raised when a fetch ends without a usable response; `reason` is the contract's."""

    reason: Reason
    detail: str = ""
    #: Final URL reached before failing (None when nothing was fetched).
    source_url: str | None = None
    retry_after_seconds: int | None = None
    warnings: list[Reason] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.detail}" if self.detail else self.reason.value
