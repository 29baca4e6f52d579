"""Full-text search per dialect: PostgreSQL tsvector/tsquery, SQLite FTS5 (migration 0002).

`ranked(...)` adds the match condition and a relevance score (higher is better) to a select
over a table that has the full-text columns migration 0002 created for it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import REGCONFIG
from sqlalchemy.orm import Session

from worker.domain.languages import primary_subtag
from worker.store import db

#: Primary language subtag → PostgreSQL text-search configuration (others use "simple").
TS_CONFIGS: dict[str, str] = {
    "ar": "arabic",
    "hy": "armenian",
    "eu": "basque",
    "ca": "catalan",
    "da": "danish",
    "nl": "dutch",
    "en": "english",
    "fi": "finnish",
    "fr": "french",
    "de": "german",
    "el": "greek",
    "hi": "hindi",
    "hu": "hungarian",
    "id": "indonesian",
    "ga": "irish",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "no": "norwegian",
    "nb": "norwegian",
    "nn": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "es": "spanish",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
    "yi": "yiddish",
}
SIMPLE = "simple"
#: Query terms kept at most (a longer query is cut, not refused).
MAX_QUERY_TERMS = 32
_WORD = re.compile(r"\w+", re.UNICODE)


def ts_config(language: str | None) -> str:
    """The PostgreSQL configuration for a language tag (`simple` when unknown or absent)."""
    return TS_CONFIGS.get(primary_subtag(language), SIMPLE) if language else SIMPLE


def query_terms(query: str) -> list[str]:
    """The words of a user query, lower-cased, de-duplicated, in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_TERMS]


def fts5_query(query: str) -> str | None:
    """A safe FTS5 MATCH expression: every word quoted, all required (None: no words)."""
    terms = query_terms(query)
    return " ".join(f'"{t}"' for t in terms) or None


def _tsquery(query: str, configs: Iterable[str]) -> sa.ColumnElement[object]:
    """websearch_to_tsquery under each configuration, OR-ed, so any stemming may match."""
    parts = [sa.func.websearch_to_tsquery(sa.cast(c, REGCONFIG), query) for c in sorted(configs)]
    return functools.reduce(lambda a, b: a.op("||")(b), parts)


def ranked(
    session: Session,
    stmt: sa.Select[tuple[object, ...]],
    table: sa.Table,
    query: str,
    configs: Iterable[str],
) -> tuple[sa.Select[tuple[object, ...]], sa.ColumnElement[float]] | None:
    """`stmt` restricted to rows of `table` matching `query`, and the score; None: no terms."""
    terms = query_terms(query)
    if not terms:
        return None
    if db.dialect(session) == db.POSTGRESQL:
        tsv: sa.ColumnClause[object] = sa.literal_column(f"{table.name}.tsv")
        tsq = _tsquery(" ".join(terms), set(configs) | {SIMPLE})
        score = sa.func.ts_rank_cd(tsv, tsq).label("score")
        return stmt.where(tsv.op("@@")(tsq)), score
    fts = sa.table(f"{table.name}_fts", sa.column("rowid"))
    match = sa.literal_column(f"{table.name}_fts").op("MATCH")(fts5_query(query))
    score = (-sa.func.bm25(sa.literal_column(f"{table.name}_fts"))).label("score")
    return stmt.join(fts, fts.c.rowid == table.c.seq).where(match), score
