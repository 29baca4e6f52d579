"""The pipeline split at its fetches gives the same results as the pipeline run whole."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tls_site import TLSSite
from tests.worker.retrieval.test_pipeline import SpyFetcher, _serve, _settings
from worker.domain.reasons import Reason
from worker.fetch.fetcher import Fetcher
from worker.fetch.types import FetchFailure
from worker.retrieval import split_pipeline as replay
from worker.retrieval.pipeline import PipelineOutput, run_pipeline


@pytest.fixture(scope="module")
def site() -> Iterator[TLSSite]:
    with TLSSite() as running:
        _serve(running)
        yield running


@pytest.fixture(scope="module")
def fetcher(site: TLSSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fetcher]:
    client = Fetcher(_settings(site, tmp_path_factory.mktemp("ca")))
    yield client
    client.close()


def untimed(output: PipelineOutput) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The output without the time it was made at."""
    provenance = {k: v for k, v in output.result["provenance"].items() if k != "retrieved_at"}
    return output.result | {"provenance": provenance}, output.images


def in_steps(fetcher: Any, url: str, kind: str, language: str | None) -> PipelineOutput:
    """`drive` with every step pickled across, as to and from an extraction process."""
    steps: list[int] = []

    def extract(fetched: replay.Fetched) -> Any:
        steps.append(len(fetched))
        sent = pickle.loads(pickle.dumps(fetched))
        return pickle.loads(pickle.dumps(replay.pipeline_step(url, kind, language, sent)))

    output = replay.drive(url, kind, language, fetcher, extract)
    assert steps == sorted(steps) and len(steps) <= replay.MAX_FETCHES
    return output


@pytest.mark.parametrize(
    ("path", "kind", "language"),
    [
        ("/en", "url_text", None),
        ("/fr", "url_text", "de"),  # language_mismatch
        ("/ja", "url_text", None),
        ("/login-page", "url_text", None),  # blocked
        ("/gallery", "url_text", None),  # metadata only
        ("/notes.txt", "url_text", None),
        ("/plain-captions.txt", "url_text", None),
        ("/talks/rivers", "published_captions", "fr"),  # page, then its caption track
        ("/talks/silent", "published_captions", None),  # no_captions
        ("/captions/story_fr.srt", "published_captions", None),
        ("/nowhere", "url_text", None),  # 404: a failed fetch
        ("/talks/rivers", "url_text", None),
    ],
)
def test_same_result_as_the_whole_pipeline(
    site: TLSSite, fetcher: Fetcher, path: str, kind: str, language: str | None
) -> None:
    """Result and images equal those of the pipeline run in one piece, and the same URLs are
    fetched, each once."""
    url = site.url(path)
    whole_spy, split_spy = SpyFetcher(fetcher), SpyFetcher(fetcher)
    whole = run_pipeline(whole_spy, url, kind, language)  # type: ignore[arg-type]
    split = in_steps(split_spy, url, kind, language)
    assert untimed(split) == untimed(whole)
    assert split_spy.urls == whole_spy.urls


def test_caption_track_takes_two_fetches(site: TLSSite, fetcher: Fetcher) -> None:
    """A page's caption track: the first step asks for the page, the next for its track."""
    url = site.url("/talks/rivers")
    first = replay.pipeline_step(url, "published_captions", "fr", {})
    assert first == replay.NeedFetch(url)
    fetched: replay.Fetched = {}
    replay.fetch_into(fetcher, url, fetched)
    second = replay.pipeline_step(url, "published_captions", "fr", fetched)
    assert isinstance(second, replay.NeedFetch) and second.url.endswith((".vtt", ".srt"))


def test_platform_url_fetches_nothing() -> None:
    """published_captions of a video platform is unsupported_source before any fetch."""
    spy = SpyFetcher(None)
    url = "https://www.youtube.com/watch?v=abc"
    output = replay.drive(url, "published_captions", None, spy, lambda _: None)
    assert output.result["reason"] == Reason.UNSUPPORTED_SOURCE.value and spy.urls == []


def test_failed_fetch_crosses_processes_whole() -> None:
    """A fetch failure keeps its reason, detail, final URL, Retry-After and warnings."""
    failure = FetchFailure(
        Reason.RATE_LIMITED, "busy", "https://a.example/x", 30, [Reason.LANGUAGE_MISMATCH]
    )
    carried = pickle.loads(pickle.dumps(replay.FailedFetch.of(failure))).exception()
    assert carried == failure


def test_failed_fetch_only_runs_no_extraction(tmp_path: Path) -> None:
    """When every fetch failed, the step that reports it runs in place (no extraction)."""

    class Refusing:
        def fetch(self, url: str) -> Any:
            raise FetchFailure(Reason.ACCESS_DENIED, "robots.txt")

    def never(_: replay.Fetched) -> Any:
        raise AssertionError("nothing to extract")

    output = replay.drive("https://a.example/x", "url_text", None, Refusing(), never)
    assert output.result["reason"] == Reason.ACCESS_DENIED.value
