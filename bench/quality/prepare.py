"""Prepare the public benchmarks from pinned git snapshots into var/quality-data (not committed).

Every page is read from a git repository at a pinned commit (`SOURCES`), decoded as the
web-content-extraction-benchmark decodes pages (resiliparse's encoding detection), and written
as `<dataset>/<page>.html` (UTF-8) beside its gold text `<page>.gold.txt` (or `<page>.gold.json`:
trafilatura's snippets). `bench/quality/manifest.tsv` holds the SHA-256 of every file written
and each page's split; a run elsewhere verifies it has the same pages.

Get the repositories (bare clones are enough), then prepare:

    git clone --bare https://github.com/mozilla/readability var/quality-src/mozilla+readability
    ... (the four repositories in SOURCES) ...
    .venv/bin/python -m bench.quality.prepare --repos var/quality-src

`--write-manifest` rewrites the manifest (after a deliberate change of sources); without it the
prepared files are checked against the committed manifest and any difference fails the run.
The Scrapinghub article-extraction-benchmark is deliberately absent: it is kept aside as an
outside check and is never used here.
"""

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from resiliparse.parse.encoding import bytes_to_str, detect_encoding
from resiliparse.parse.html import HTMLTree, NodeType

from bench.quality.scoring import manifest_problems, sha256_hex, split_of

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "var" / "quality-data"
MANIFEST = Path(__file__).resolve().parent / "manifest.tsv"
DEFAULT_REPOS = (ROOT / "var" / "quality-src",)


@dataclass(frozen=True)
class Source:
    """A public repository at a pinned commit, and the licence of the pages it holds."""

    repo: str
    commit: str
    licence: str


SOURCES = {
    "readability": Source(
        "mozilla/readability", "ab4027a8b37669745016869a37a504727992b2ba", "Apache-2.0"
    ),
    # CleanEval (dev and final sets), CleanPortalEval and Dragnet's pages, gathered in one
    # repository from their original sites (CleanEval's is only on archive.org now).
    "merged": Source(
        "j-szulc/html-cleaning-dataset-merged",
        "46e01a04b47051838a228bf23631430b2c9de375",
        "each dataset's own: CleanEval research use, CleanPortalEval, Dragnet AGPL-3.0",
    ),
    "l3s": Source(
        "geodrome/page-signal", "186d8153b3d111f84865ddc180600a9cbe35ac7f", "L3S: research use"
    ),
    "trafilatura": Source(
        "adbar/trafilatura", "e90b0ef51ab026fdb905fb6c5b3c84dd3d784fd5", "Apache-2.0"
    ),
}


@dataclass(frozen=True)
class Page:
    """One prepared page: its HTML and its gold text (or gold snippets, as JSON)."""

    dataset: str
    page: str
    html: str
    gold: str
    gold_suffix: str = ".gold.txt"


class GitSnapshot:
    """Blobs of one commit of a git repository, read through one `git cat-file --batch`."""

    def __init__(self, git_dir: Path, commit: str) -> None:
        self.git_dir, self.commit = git_dir, commit
        listing = subprocess.run(
            ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", commit],
            check=True,
            capture_output=True,
        ).stdout.decode()
        self.blobs = {}
        for entry in filter(None, listing.split("\0")):
            meta, path = entry.split("\t", 1)
            self.blobs[path] = meta.split()[2]
        self._cat = subprocess.Popen(
            ["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def paths(self, prefix: str) -> list[str]:
        """Paths under `prefix`, sorted."""
        return sorted(p for p in self.blobs if p.startswith(prefix))

    def read(self, path: str) -> bytes:
        """`path`'s bytes at the pinned commit (KeyError: no such path; OSError: no object)."""
        assert self._cat.stdin is not None and self._cat.stdout is not None
        self._cat.stdin.write(self.blobs[path].encode() + b"\n")
        self._cat.stdin.flush()
        header = self._cat.stdout.readline().split()
        if len(header) != 3:
            raise OSError(f"{path}: object not in the snapshot ({b' '.join(header).decode()})")
        data = self._cat.stdout.read(int(header[2]))
        self._cat.stdout.read(1)
        return data

    def close(self) -> None:
        """Stop the cat-file process."""
        if self._cat.stdin:
            self._cat.stdin.close()
        self._cat.wait()
        if self._cat.stdout:
            self._cat.stdout.close()


def decode(data: bytes) -> str:
    """Bytes to text as the web-content-extraction-benchmark reads pages."""
    encoding = detect_encoding(data, max_len=100_000, html5_compatible=False) or "utf-8"
    return bytes_to_str(data, encoding=encoding, fallback_encodings=["utf-8", "cp1252"])


def body_text(html: str) -> str:
    """The text of a document's body, as resiliparse renders it (the benchmark's gold text)."""
    tree = HTMLTree.parse(html)
    return tree.body.text if tree.body is not None else ""


_CLEANEVAL_WRAPPER = re.compile(r"(?:^<text [^>]+>\s*|\s*</text>$)", flags=re.MULTILINE)
#: Dragnet's line between the article and its comments, typed by hand: "!@#$%^&*()  COMMENTS"
#: in most files, with a symbol or a space missing or doubled in a few.
_DRAGNET_COMMENTS = re.compile(r"^[ \t]*[!@#$%^&*() ]{3,}\s*COMMENTS[ \t\r]*$", flags=re.MULTILINE)
_BLOCK_PARENTS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "canvas",
        "dd",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "noscript",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "tfoot",
        "ul",
        "video",
    ]
)


def cleaneval_gold(text: str) -> str:
    """CleanEval's gold file as text: its pseudo-tags dropped, the URL line removed."""
    text = re.sub(r"\n +", "\n", body_text(text))
    return re.sub(r"^\s*URL:[^\n]+\s*", "", text)


def dragnet_gold(text: str) -> str:
    """Dragnet's corrected text without the user comments after its separator."""
    return _DRAGNET_COMMENTS.split(text, maxsplit=1)[0].strip()


def l3s_gold(annotated: str) -> str:
    """The headline, full text and supplemental blocks an L3S-GN1 assessor marked."""
    tree = HTMLTree.parse(annotated)
    if tree.body is None:
        return ""
    content = ""
    for element in tree.body.query_selector_all(".x-nc-sel1, .x-nc-sel2, .x-nc-sel3"):
        if len(element.child_nodes) != 1 or element.first_child.type != NodeType.TEXT:
            continue  # leaves only: a nested marked element would count twice
        if element.parent is not None and element.parent.tag in _BLOCK_PARENTS:
            content += "\n"
        content += element.text.strip() + " "
    return content.strip()


def _pairs(
    snapshot: GitSnapshot, inputs: str, golds: str, gold_suffix: str
) -> Iterator[tuple[str, str, str]]:
    """(page id, input path, gold path) for every input with a gold file."""
    for path in snapshot.paths(inputs):
        stem = path[len(inputs) :].rsplit(".", 1)[0]
        gold = f"{golds}{stem}{gold_suffix}"
        if "/" not in stem and gold in snapshot.blobs:
            yield stem, path, gold


def readability_pages(snapshot: GitSnapshot) -> Iterator[Page]:
    """Mozilla Readability's test pages: source.html, gold = expected.html's body text."""
    for path in snapshot.paths("test/test-pages/"):
        if path.endswith("/source.html"):
            case = path.split("/")[2]
            expected = f"test/test-pages/{case}/expected.html"
            if expected in snapshot.blobs:
                gold = body_text(decode(snapshot.read(expected)))
                yield Page("readability", case, decode(snapshot.read(path)), gold)


def merged_pages(snapshot: GitSnapshot) -> Iterator[Page]:
    """CleanEval (dev and final), CleanPortalEval and Dragnet from the merged repository."""
    for folder, dataset, prefix in (
        ("cleaneval-dev", "cleaneval", "dev-"),
        ("cleaneval-final", "cleaneval", "final-"),
        ("CleanPortalEval-master", "cleanportaleval", ""),
    ):
        for stem, html, gold in _pairs(
            snapshot, f"{folder}/input/", f"{folder}/GoldStandard/", ".txt"
        ):
            page_html = _CLEANEVAL_WRAPPER.sub("", decode(snapshot.read(html)))
            gold_text = cleaneval_gold(decode(snapshot.read(gold)))
            yield Page(dataset, prefix + stem, page_html, gold_text)
    for stem, html, gold in _pairs(
        snapshot, "dragnet_data/input/", "dragnet_data/GoldStandard/", ".txt"
    ):
        gold_text = dragnet_gold(decode(snapshot.read(gold)))
        yield Page("dragnet", stem, decode(snapshot.read(html)), gold_text)


def l3s_pages(snapshot: GitSnapshot) -> Iterator[Page]:
    """L3S-GN1 (Google News, 2008): original pages and the assessors' annotated copies."""
    base = "L3S-GN1-20100130203947-00001/"
    for stem, html, gold in _pairs(snapshot, f"{base}original/", f"{base}annotated/", ".html"):
        gold_text = l3s_gold(decode(snapshot.read(gold)))
        yield Page("l3s-gn1", stem, decode(snapshot.read(html)), gold_text)


def trafilatura_pages(snapshot: GitSnapshot) -> Iterator[Page]:
    """trafilatura's evaluation set: pages with snippets that must and must not be extracted."""
    evaldata = json.loads(snapshot.read("tests/evaldata.json"))
    for url, item in sorted(evaldata.items()):
        path = next(
            (
                p
                for p in (f"tests/cache/{item['file']}", f"tests/eval/{item['file']}")
                if p in snapshot.blobs
            ),
            None,
        )
        if path is None:
            continue
        page = item["file"].rsplit(".", 1)[0]
        gold = json.dumps(
            {"url": url, "with": item["with"], "without": item["without"]}, ensure_ascii=False
        )
        yield Page("trafilatura", page, decode(snapshot.read(path)), gold, ".gold.json")


READERS: dict[str, Callable[[GitSnapshot], Iterator[Page]]] = {
    "readability": readability_pages,
    "merged": merged_pages,
    "l3s": l3s_pages,
    "trafilatura": trafilatura_pages,
}


def find_git_dir(repos: list[Path], source: Source) -> Path | None:
    """A git directory holding `source.commit` among the usual names under `repos`."""
    owner, name = source.repo.split("/")
    for base in repos:
        for candidate in (
            base / f"{owner}+{name}" / "repo",
            base / f"{owner}+{name}",
            base / f"{owner}+{name}.git",
            base / name,
            base / f"{name}.git",
            base / name / ".git",
        ):
            found = subprocess.run(
                ["git", f"--git-dir={candidate}", "cat-file", "-e", f"{source.commit}^{{commit}}"],
                capture_output=True,
            )
            if candidate.is_dir() and found.returncode == 0:
                return candidate
    return None


def read_manifest(path: Path = MANIFEST) -> dict[str, tuple[str, str, str, str]]:
    """Manifest rows by 'dataset/page': (split, html sha256, gold sha256, gold suffix)."""
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        dataset, page, split, html_sha, gold_sha, suffix = line.split("\t")
        rows[f"{dataset}/{page}"] = (split, html_sha, gold_sha, suffix)
    return rows


def expected_files(rows: dict[str, tuple[str, str, str, str]]) -> dict[str, str]:
    """Cache-relative path -> sha256 of every file the manifest lists."""
    files = {}
    for key, (_, html_sha, gold_sha, suffix) in rows.items():
        files[f"{key}.html"] = html_sha
        files[f"{key}{suffix}"] = gold_sha
    return files


def found_files(cache: Path) -> dict[str, str | None]:
    """Cache-relative path -> sha256 of every page file in `cache` (None when unreadable)."""
    files: dict[str, str | None] = {}
    for path in sorted(cache.glob("*/*")):
        if path.parent.name.startswith("_"):
            continue  # extractor outputs, not pages
        relative = path.relative_to(cache).as_posix()
        try:
            files[relative] = sha256_hex(path.read_bytes())
        except OSError:
            files[relative] = None
    return files


def verify(cache: Path = CACHE, manifest: Path = MANIFEST) -> list[str]:
    """Problems found comparing the prepared cache with the manifest (empty: all present)."""
    return manifest_problems(expected_files(read_manifest(manifest)), found_files(cache))


def prepare(repos: list[Path], cache: Path = CACHE) -> list[Page]:
    """Write every page of every source into `cache`; return them."""
    pages: list[Page] = []
    for key, source in SOURCES.items():
        git_dir = find_git_dir(repos, source)
        if git_dir is None:
            raise SystemExit(
                f"{source.repo} at {source.commit} not found under {', '.join(map(str, repos))}: "
                f"git clone --bare https://github.com/{source.repo} "
                f"{repos[0]}/{source.repo.replace('/', '+')}"
            )
        snapshot = GitSnapshot(git_dir, source.commit)
        try:
            found = list(READERS[key](snapshot))
        finally:
            snapshot.close()
        print(f"{source.repo}@{source.commit[:10]}: {len(found)} pages", file=sys.stderr)
        pages.extend(found)
    for page in pages:
        folder = cache / page.dataset
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{page.page}.html").write_text(page.html, encoding="utf-8")
        (folder / f"{page.page}{page.gold_suffix}").write_text(page.gold, encoding="utf-8")
    return pages


def manifest_text(pages: list[Page], cache: Path = CACHE) -> str:
    """The manifest of `pages` as written in `cache`."""
    lines = [
        "# dataset\tpage\tsplit\thtml sha256\tgold sha256\tgold suffix",
        *(f"# source {s.repo} {s.commit} ({s.licence})" for s in SOURCES.values()),
    ]
    for page in sorted(pages, key=lambda p: (p.dataset, p.page)):
        folder = cache / page.dataset
        html_sha = sha256_hex((folder / f"{page.page}.html").read_bytes())
        gold_sha = sha256_hex((folder / f"{page.page}{page.gold_suffix}").read_bytes())
        split = split_of(page.dataset, page.page)
        lines.append(
            f"{page.dataset}\t{page.page}\t{split}\t{html_sha}\t{gold_sha}\t{page.gold_suffix}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Prepare the cache, then write or verify the manifest."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repos", type=Path, action="append", help="directories holding the git clones"
    )
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--write-manifest", action="store_true", help="rewrite manifest.tsv")
    parser.add_argument("--verify", action="store_true", help="only check the cache")
    args = parser.parse_args()
    if not args.verify:
        pages = prepare(args.repos or list(DEFAULT_REPOS), args.cache)
        if args.write_manifest:
            MANIFEST.write_text(manifest_text(pages, args.cache), encoding="utf-8")
    problems = verify(args.cache)
    for problem in problems[:20]:
        print(problem, file=sys.stderr)
    if problems:
        raise SystemExit(
            f"{len(problems)} problems: the prepared pages differ from {MANIFEST.name}"
        )
    print(f"{len(read_manifest())} pages verified in {args.cache}", file=sys.stderr)


if __name__ == "__main__":
    main()
