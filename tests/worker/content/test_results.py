"""The result builder: schema-exact dicts, the reason/status table, bounds."""

from datetime import UTC, datetime

import pytest

from tests.support.schemas import validate_result
from worker.content.results import (
    MAX_SEGMENTS,
    Content,
    Segment,
    cancelled_result,
    content_result,
    cut_at_word,
    failure_result,
    has_content,
)
from worker.domain.reasons import FAILURE_STATUS, PARTIAL_REASONS, Reason

AT = datetime(2024, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


def doc(**kw: object) -> Content:
    """Document content with a source URL."""
    base: dict[str, object] = {
        "text": "Some text.",
        "source_url": "https://a.example/x",
        "mime_type": "text/html",
        "content_kind": "document_text",
    }
    base.update(kw)
    return Content(**base)  # type: ignore[arg-type]


class TestContentResult:
    """ready and partial results."""

    def test_ready(self) -> None:
        """Content without reasons is ready with no reason or warnings."""
        result = validate_result(content_result("url_text", doc(), AT))
        assert (result["status"], result["reason"], result["warnings"]) == ("ready", None, [])
        assert result["provenance"]["retrieved_at"] == "2024-01-02T03:04:05.678Z"

    def test_partial_priority_and_warnings(self) -> None:
        """The highest-priority content reason is the reason; the rest are distinct warnings."""
        reasons = [Reason.TEXT_LIMITED, Reason.LANGUAGE_MISMATCH, Reason.TEXT_LIMITED]
        result = validate_result(content_result("url_text", doc(reasons=reasons), AT))
        assert (result["status"], result["reason"]) == ("partial", "language_mismatch")
        assert result["warnings"] == ["text_limited"]

    def test_text_cut_adds_text_limited(self) -> None:
        """Over 20 000 characters the text is cut at a word and text_limited is the reason."""
        result = validate_result(content_result("url_text", doc(text="abcd " * 5_000), AT))
        assert result["reason"] == "text_limited"
        assert len(result["text"]) <= 20_000 and result["text"].endswith("abcd")

    def test_segments_capped(self) -> None:
        """More than 1 000 segments keep 1 000: cues_limited."""
        segments = [Segment(i, i + 1, f"s{i}") for i in range(1_001)]
        content = doc(segments=segments, content_kind="published_caption_file")
        result = validate_result(content_result("published_captions", content, AT))
        assert len(result["segments"]) == MAX_SEGMENTS and result["reason"] == "cues_limited"

    def test_invalid_segments_dropped(self) -> None:
        """Segments that would break the schema (backwards, empty text) are dropped."""
        segments = [Segment(5, 5, "zero"), Segment(0, 10, "  "), Segment(0, 10, "ok")]
        content = doc(segments=segments, content_kind="published_caption_file")
        result = validate_result(content_result("published_captions", content, AT))
        assert result["segments"] == [{"start_ms": 0, "end_ms": 10, "text": "ok"}]

    def test_empty_content_is_no_text_or_no_captions(self) -> None:
        """No text and no segments is empty: no_text for url_text, no_captions for captions."""
        text = validate_result(content_result("url_text", doc(text=""), AT))
        caps = validate_result(content_result("published_captions", doc(text=""), AT))
        assert (text["status"], text["reason"]) == ("empty", "no_text")
        assert caps["reason"] == "no_captions"
        assert text["provenance"]["content_kind"] == "none"

    def test_metadata_only_without_text(self) -> None:
        """metadata_only with no text stays partial and keeps title and description."""
        content = doc(text="", title=" T ", description="D", reasons=[Reason.METADATA_ONLY])
        result = validate_result(content_result("url_text", content, AT))
        assert (result["status"], result["title"], result["description"]) == ("partial", "T", "D")

    def test_title_and_description_clipped(self) -> None:
        """Title ≤ 200 and description ≤ 2 000; blank ones become null."""
        content = doc(title="t" * 500, description="d" * 5_000)
        result = validate_result(content_result("url_text", content, AT))
        assert len(result["title"]) == 200 and len(result["description"]) == 2_000
        blank = validate_result(content_result("url_text", doc(title="   "), AT))
        assert blank["title"] is None

    @pytest.mark.parametrize("language", ["en_US", "english language", "e", "x" * 40, ""])
    def test_invalid_language_becomes_unknown(self, language: str) -> None:
        """A language the schema cannot carry becomes null with language_source unknown."""
        result = validate_result(content_result("url_text", doc(language=language), AT))
        assert result["provenance"]["language"] is None
        assert result["provenance"]["language_source"] == "unknown"

    def test_valid_language_is_publisher_declared(self) -> None:
        """A valid tag is kept as publisher_declared."""
        result = validate_result(content_result("url_text", doc(language="pt-BR"), AT))
        assert result["provenance"]["language_source"] == "publisher_declared"

    def test_overlong_source_url_dropped(self) -> None:
        """A final URL longer than 2 048 characters is not emitted (schema bound)."""
        url = "https://a.example/" + "x" * 3_000
        result = validate_result(content_result("url_text", doc(source_url=url), AT))
        assert result["provenance"]["source_url"] is None


class TestFailureResult:
    """Results without content."""

    @pytest.mark.parametrize("reason", list(FAILURE_STATUS))
    def test_every_failure_reason_maps_to_its_status(self, reason: Reason) -> None:
        """Each failure reason gives the contract's status and a schema-valid result."""
        result = validate_result(failure_result("url_text", reason, AT))
        assert result["status"] == FAILURE_STATUS[reason].value
        assert result["reason"] == reason.value and result["text"] == ""

    def test_rate_limited_retry_after(self) -> None:
        """rate_limited has a retry_after, defaulted and clamped to 1..86 400."""
        assert failure_result("url_text", Reason.RATE_LIMITED, AT)["retry_after_seconds"] == 60
        high = failure_result("url_text", Reason.RATE_LIMITED, AT, retry_after_seconds=10**7)
        low = failure_result("url_text", Reason.RATE_LIMITED, AT, retry_after_seconds=0)
        assert (
            validate_result(high)["retry_after_seconds"],
            validate_result(low)["retry_after_seconds"],
        ) == (86_400, 1)

    def test_retry_after_only_when_rate_limited(self) -> None:
        """Other failures never carry retry_after_seconds."""
        result = failure_result("url_text", Reason.TIMEOUT, AT, retry_after_seconds=30)
        assert result["retry_after_seconds"] is None

    def test_failure_content_kind_is_none(self) -> None:
        """A failure never claims document content, whatever the content said."""
        result = failure_result("url_text", Reason.LOGIN_REQUIRED, AT, content=doc())
        assert validate_result(result)["provenance"]["content_kind"] == "none"

    def test_warnings_distinct_bounded_and_without_reason(self) -> None:
        """Warnings drop the reason itself and repeats, and keep at most ten."""
        warnings = [Reason.TIMEOUT, Reason.TIMEOUT, *PARTIAL_REASONS, *list(FAILURE_STATUS)]
        result = validate_result(failure_result("url_text", Reason.TIMEOUT, AT, warnings=warnings))
        assert "timeout" not in result["warnings"]
        assert len(result["warnings"]) == 10 == len(set(result["warnings"]))

    def test_cancelled(self) -> None:
        """A cancelled result has status and reason cancelled."""
        result = validate_result(cancelled_result("published_captions", AT))
        assert (result["status"], result["reason"]) == ("cancelled", "cancelled")

    def test_has_content(self) -> None:
        """Only ready/partial results with text or segments name evidence."""
        assert has_content(content_result("url_text", doc(), AT))
        assert not has_content(failure_result("url_text", Reason.NO_TEXT, AT))
        meta = content_result(
            "url_text", doc(text="", title="T", reasons=[Reason.METADATA_ONLY]), AT
        )
        assert not has_content(meta)


class TestCutAtWord:
    """Word-boundary cutting."""

    def test_short_text_untouched(self) -> None:
        """Text within the limit is not cut."""
        assert cut_at_word("a b", 10) == ("a b", False)

    def test_cut_at_space_or_newline(self) -> None:
        """The cut falls on the last space or newline within the limit."""
        assert cut_at_word("alpha beta\ngamma", 12) == ("alpha beta", True)

    def test_one_long_word_is_cut_hard(self) -> None:
        """A text without an early boundary is cut at the limit."""
        assert cut_at_word("x" * 30, 10) == ("x" * 10, True)
