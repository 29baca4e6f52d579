"""Finding and picking `<track>` caption files; video platform hosts."""

import pytest

from worker.content.markup import parse_html
from worker.content.tracks import Track, find_tracks, is_platform_url, pick_track

PAGE = "https://media.example/talks/rivers.html"


def tracks_of(html: str, url: str = PAGE) -> list[Track]:
    """Parse `html` and return its tracks."""
    tree = parse_html(html)
    assert tree is not None
    return find_tracks(tree, url)


VIDEO = """<html><body><video controls src="talk.mp4">
<track kind="subtitles" srclang="fr" label="Français" src="subs/fr.vtt">
<track kind="captions" srclang="en-GB" label="English" src="/captions/en.vtt" default>
<track kind="chapters" srclang="en" src="chapters.vtt">
<track kind="descriptions" srclang="en" src="desc.vtt">
<track kind="metadata" src="meta.vtt">
<track srclang="de" src="https://cdn.example/de.srt">
<track kind="captions" srclang="es">
<track kind="captions" srclang="it" src="javascript:alert(1)">
</video><audio><track kind="CAPTIONS" srclang="nl" src="nl.vtt"></audio></body></html>"""


class TestFindTracks:
    """Caption and subtitle tracks of <video> and <audio>."""

    def test_only_caption_and_subtitle_tracks_with_http_src(self) -> None:
        """Chapters, descriptions, metadata, src-less and non-http tracks are ignored."""
        found = tracks_of(VIDEO)
        assert [t.srclang for t in found] == ["fr", "en-GB", "de", "nl"]

    def test_src_resolved_against_page(self) -> None:
        """Relative, root-relative and absolute src resolve against the page URL."""
        urls = [t.url for t in tracks_of(VIDEO)]
        assert urls == [
            "https://media.example/talks/subs/fr.vtt",
            "https://media.example/captions/en.vtt",
            "https://cdn.example/de.srt",
            "https://media.example/talks/nl.vtt",
        ]

    def test_missing_kind_defaults_to_subtitles_and_kind_is_lowercased(self) -> None:
        """A track without kind is subtitles; CAPTIONS is captions."""
        found = {t.srclang: t for t in tracks_of(VIDEO)}
        assert found["de"].kind == "subtitles"
        assert found["nl"].kind == "captions"

    def test_default_and_label(self) -> None:
        """The default attribute and the label are read."""
        found = {t.srclang: t for t in tracks_of(VIDEO)}
        assert found["en-GB"].default and not found["fr"].default
        assert found["fr"].label == "Français"

    def test_base_href(self) -> None:
        """A <base href> changes how src resolves."""
        html = '<head><base href="https://static.example/v/"></head><video><track src="a.vtt">'
        assert tracks_of(html)[0].url == "https://static.example/v/a.vtt"

    def test_urls_urllib_refuses_are_skipped(self) -> None:
        """A src or <base href> like "https://[oops" (ValueError in urllib) is skipped."""
        html = (
            '<head><base href="https://[oops/"></head><video>'
            '<track src="https://[::1/bad.vtt"><track src="/good.vtt"></video>'
        )
        assert [t.url for t in tracks_of(html)] == ["https://media.example/good.vtt"]

    def test_track_outside_media_ignored(self) -> None:
        """A stray <track> outside video/audio is not a published caption."""
        assert tracks_of('<body><track kind="captions" src="x.vtt"></body>') == []


class TestPickTrack:
    """Language, then default, then first."""

    def test_requested_language_primary_subtag(self) -> None:
        """Requesting en picks the en-GB track; fr picks fr."""
        found = tracks_of(VIDEO)
        assert pick_track(found, "en").srclang == "en-GB"  # type: ignore[union-attr]
        assert pick_track(found, "FR-ca").srclang == "fr"  # type: ignore[union-attr]

    def test_exact_tag_preferred(self) -> None:
        """pt-BR prefers the pt-BR track over an earlier pt-PT one."""
        found = [
            Track("https://a/pt.vtt", "pt-PT", "subtitles", None, False),
            Track("https://a/br.vtt", "pt-BR", "subtitles", None, False),
        ]
        assert pick_track(found, "pt-BR").srclang == "pt-BR"  # type: ignore[union-attr]
        assert pick_track(found, "pt").srclang == "pt-PT"  # type: ignore[union-attr]

    def test_default_when_no_language_match(self) -> None:
        """With no match (or no request) the default track is picked."""
        found = tracks_of(VIDEO)
        assert pick_track(found, "ja").srclang == "en-GB"  # type: ignore[union-attr]
        assert pick_track(found, None).srclang == "en-GB"  # type: ignore[union-attr]

    def test_first_when_no_default(self) -> None:
        """With no match and no default the first track is picked."""
        found = tracks_of(VIDEO.replace(" default", ""))
        assert pick_track(found, "ja").srclang == "fr"  # type: ignore[union-attr]

    def test_none(self) -> None:
        """No tracks: nothing picked."""
        assert pick_track([], "en") is None


class TestPlatformHosts:
    """Video platforms' own players are recognised by host."""

    @pytest.mark.parametrize(
        "url",
        [
            "https://www.youtube.com/watch?v=abc",
            "https://youtu.be/abc",
            "https://m.youtube.com/watch?v=abc",
            "https://vimeo.com/123",
            "https://player.vimeo.com/video/123",
            "https://www.dailymotion.com/video/x1",
            "https://www.tiktok.com/@a/video/1",
            "https://www.twitch.tv/videos/1",
            "https://WWW.YOUTUBE.COM./watch",
        ],
    )
    def test_platforms(self, url: str) -> None:
        """Platform hosts and their subdomains are recognised."""
        assert is_platform_url(url)

    @pytest.mark.parametrize(
        "url",
        [
            "https://notyoutube.com/watch",
            "https://youtube.com.evil.example/x",
            "https://media.example/talk.vtt",
            "https://example.com/?u=youtube.com",
        ],
    )
    def test_not_platforms(self, url: str) -> None:
        """Look-alike hosts and URLs merely mentioning a platform are not platforms."""
        assert not is_platform_url(url)
