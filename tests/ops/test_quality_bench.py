"""The public-benchmark harness's pure parts (`bench.quality`): tokens, scores, the fixed split,
the gold-text readers and the manifest check, with malformed items (no gold text, an unreadable
file, a checksum mismatch)."""

import subprocess
from pathlib import Path

import pytest

from bench.quality import prepare
from bench.quality.prepare import (
    GitSnapshot,
    Page,
    cleaneval_gold,
    dragnet_gold,
    l3s_gold,
    manifest_text,
    read_manifest,
    verify,
)
from bench.quality.scoring import (
    PRF,
    manifest_problems,
    mean_prf,
    segment_counts,
    segment_prf,
    split_of,
    token_prf,
    tokenize_ws,
)


class TestTokens:
    def test_whitespace_of_any_kind_separates_case_and_punctuation_stay(self) -> None:
        assert tokenize_ws("  The cat,\tsat\n\non  the\u00a0mat. ") == [
            "The",
            "cat,",
            "sat",
            "on",
            "the",
            "mat.",
        ]

    def test_blank_text_has_no_tokens(self) -> None:
        assert tokenize_ws("") == []
        assert tokenize_ws(" \n\t ") == []


class TestTokenScores:
    def test_identical_texts_score_one(self) -> None:
        assert token_prf("a b c", "c b a") == PRF(1.0, 1.0, 1.0)

    def test_partial_overlap_is_a_bag_of_tokens(self) -> None:
        # gold has "a" twice: a prediction with it once recalls one of the two.
        score = token_prf("a a b c", "a b x y z")
        assert score.precision == pytest.approx(2 / 5)
        assert score.recall == pytest.approx(2 / 4)
        assert score.f1 == pytest.approx(2 * 0.4 * 0.5 / 0.9)

    def test_case_and_punctuation_count(self) -> None:
        assert token_prf("Hello world.", "hello world").f1 == 0.0

    def test_page_without_gold_text_is_perfect_only_when_nothing_is_extracted(self) -> None:
        assert token_prf("", "") == PRF(1.0, 1.0, 1.0)
        assert token_prf("  \n", "") == PRF(1.0, 1.0, 1.0)
        assert token_prf("", "menu login") == PRF(0.0, 1.0, 0.0)

    def test_nothing_extracted_from_a_page_with_text_scores_zero(self) -> None:
        assert token_prf("some text", "") == PRF(0.0, 0.0, 0.0)

    def test_mean_counts_every_page_once(self) -> None:
        assert mean_prf([PRF(1.0, 0.5, 0.6), PRF(0.0, 0.5, 0.2)]) == PRF(0.5, 0.5, 0.4)
        assert mean_prf([]) == PRF(0.0, 0.0, 0.0)


class TestSegmentScores:
    def test_snippets_found_and_missed(self) -> None:
        counts = segment_counts(
            ["Die  GEMA\ndreht", "absent one"], ["Impressum", "Twitter"], "Die GEMA dreht! Twitter"
        )
        assert counts == (1, 1, 1, 1)

    def test_no_output_finds_nothing(self) -> None:
        assert segment_counts(["a"], ["b", "c"], None) == (0, 0, 1, 2)
        assert segment_counts(["a"], ["b"], "") == (0, 0, 1, 1)

    def test_counts_are_summed_over_the_set(self) -> None:
        score = segment_prf([(2, 1, 0, 3), (1, 0, 1, 2)])
        assert score.precision == pytest.approx(3 / 4)
        assert score.recall == pytest.approx(3 / 4)
        assert segment_prf([]) == PRF(0.0, 0.0, 0.0)


class TestSplit:
    def test_assignment_is_fixed_and_about_one_in_three(self) -> None:
        pages = [f"page-{i}" for i in range(3000)]
        held = [p for p in pages if split_of("cleaneval", p) == "held_out"]
        assert [split_of("cleaneval", p) for p in pages] == [
            split_of("cleaneval", p) for p in pages
        ]
        assert 900 < len(held) < 1100
        assert {split_of("cleaneval", p) for p in pages} == {"dev", "held_out"}

    def test_dataset_is_part_of_the_id(self) -> None:
        pages = [f"{i}" for i in range(300)]
        assert [split_of("a", p) for p in pages] != [split_of("b", p) for p in pages]

    def test_committed_manifest_agrees_with_the_rule(self) -> None:
        rows = read_manifest()
        assert len(rows) > 3000
        assert all(split == split_of(*key.split("/", 1)) for key, (split, *_) in rows.items())
        assert not any(key.startswith("scrapinghub/") for key in rows)


class TestGoldReaders:
    def test_cleaneval_pseudo_tags_and_url_line_go(self) -> None:
        gold = "URL: http://example.org/a\n<h>  Title here\n<p>First   para.\n<l>item"
        text = cleaneval_gold(gold)
        assert "URL" not in text and "<" not in text
        assert tokenize_ws(text) == ["Title", "here", "First", "para.", "item"]

    def test_dragnet_comments_are_cut(self) -> None:
        assert dragnet_gold("Body text.\n!@#$%^&*()  COMMENTS\nNice post!") == "Body text."
        for typed in (
            "!@ $%^&*()  COMMENTS",
            "  #$%^&*()  COMMENTS",
            "!@#$%^&*()  \tCOMMENTS\t",
            "!@#$%^&*() COMMENTS\r",
        ):
            assert dragnet_gold(f"Body.\n{typed}\nFirst!\n") == "Body."
        assert dragnet_gold("NO COMMENTS on this article.") == "NO COMMENTS on this article."
        assert dragnet_gold("No comments here.") == "No comments here."

    def test_l3s_keeps_marked_leaves_only(self) -> None:
        annotated = (
            "<html><body><p><span class='x-nc-sel1'>Headline</span></p>"
            "<div><span class='x-nc-sel0'>Menu</span></div>"
            "<p><span class='x-nc-sel2'>Body <b>bold</b></span>"
            "<span class='x-nc-sel2'>text</span></p>"
            "<p><span class='x-nc-sel5'>A comment</span><span class='x-nc-sel3'>Caption</span></p>"
            "</body></html>"
        )
        assert tokenize_ws(l3s_gold(annotated)) == ["Headline", "text", "Caption"]

    def test_l3s_page_without_marks_has_no_gold_text(self) -> None:
        assert l3s_gold("<html><body><p>only boilerplate</p></body></html>") == ""


def _pages(cache: Path) -> list[Page]:
    pages = [
        Page("demo", "one", "<p>one</p>", "one"),
        Page("demo", "empty-gold", "<p>nav</p>", ""),
        Page("segments", "s1", "<p>x</p>", '{"with": ["x"], "without": ["y"]}', ".gold.json"),
    ]
    for page in pages:
        (cache / page.dataset).mkdir(parents=True, exist_ok=True)
        (cache / page.dataset / f"{page.page}.html").write_text(page.html, encoding="utf-8")
        (cache / page.dataset / f"{page.page}{page.gold_suffix}").write_text(
            page.gold, encoding="utf-8"
        )
    return pages


class TestManifest:
    def test_problems_named_one_per_file(self) -> None:
        expected = {"a.html": "1", "a.gold.txt": "2", "b.html": "3", "c.html": "4"}
        actual = {"a.html": "1", "a.gold.txt": "x", "b.html": None, "d.html": "5"}
        assert manifest_problems(expected, actual) == [
            "checksum mismatch: a.gold.txt",
            "missing or unreadable: b.html",
            "missing or unreadable: c.html",
            "not in the manifest: d.html",
        ]
        assert manifest_problems(expected, dict(expected)) == []

    def test_prepared_cache_verifies_then_each_fault_is_found(self, tmp_path: Path) -> None:
        cache, manifest = tmp_path / "cache", tmp_path / "manifest.tsv"
        pages = _pages(cache)
        manifest.write_text(manifest_text(pages, cache), encoding="utf-8")
        assert len(read_manifest(manifest)) == 3
        assert verify(cache, manifest) == []
        (cache / "demo" / "one.gold.txt").write_text("one!", encoding="utf-8")
        assert verify(cache, manifest) == ["checksum mismatch: demo/one.gold.txt"]
        (cache / "demo" / "one.gold.txt").write_text("one", encoding="utf-8")
        (cache / "demo" / "empty-gold.html").unlink()
        (cache / "demo" / "empty-gold.html").mkdir()  # there, but not readable as a file
        assert verify(cache, manifest) == ["missing or unreadable: demo/empty-gold.html"]
        (cache / "demo" / "empty-gold.html").rmdir()
        assert verify(cache, manifest) == ["missing or unreadable: demo/empty-gold.html"]

    def test_extractor_outputs_beside_the_pages_are_not_pages(self, tmp_path: Path) -> None:
        cache, manifest = tmp_path / "cache", tmp_path / "manifest.tsv"
        manifest.write_text(manifest_text(_pages(cache), cache), encoding="utf-8")
        (cache / "_outputs").mkdir()
        (cache / "_outputs" / "x.jsonl").write_text("{}", encoding="utf-8")
        (cache / "demo" / "stray.html").write_text("?", encoding="utf-8")
        assert verify(cache, manifest) == ["not in the manifest: demo/stray.html"]


class TestGitSnapshot:
    def test_reads_blobs_of_the_pinned_commit(self, tmp_path: Path) -> None:
        work = tmp_path / "w"
        work.mkdir()
        git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.org"]
        subprocess.run([*git, "init", "-q"], check=True)
        (work / "d").mkdir()
        (work / "d" / "a.txt").write_bytes(b"first\n\x00binary")
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "one"], check=True)
        commit = subprocess.run(
            [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
        (work / "d" / "a.txt").write_bytes(b"changed")
        subprocess.run([*git, "commit", "-qam", "two"], check=True)
        source = prepare.Source("someone/w", commit, "test")
        git_dir = prepare.find_git_dir(
            [tmp_path / "nowhere", tmp_path], prepare.Source("x/w", commit, "t")
        )
        assert git_dir is not None
        snapshot = GitSnapshot(work / ".git", source.commit)
        try:
            assert snapshot.paths("d/") == ["d/a.txt"]
            assert snapshot.read("d/a.txt") == b"first\n\x00binary"
            assert (
                snapshot.read("d/a.txt") == b"first\n\x00binary"
            )  # the batch stream stays aligned
            with pytest.raises(KeyError):
                snapshot.read("d/missing.txt")
        finally:
            snapshot.close()
        assert prepare.find_git_dir([tmp_path], prepare.Source("x/w", "0" * 40, "t")) is None
