"""What the host-loss and partition tests share: a short lease, a webhook receiver every host
reaches, a batch recorded in the fault suite's history, and the exactly-once checks.

The cluster runs with the test suite's short bounds (tests/conftest.py `session_env`: a fetch
bounded at 6 s, extraction at 3 s, a 1 s margin and a 0.5 s grace make a 12 s lease instead
of 90 s; a sweep every second; two attempts), stretched by the machine's slowdown. A lost claim
is back in `pending` at most a lease after it was taken plus one sweep interval, and the same
sweep publishes it again (`Bounds`).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.cluster.hosts import Cluster, HostProcess
from tests.faults.history import History, Op
from tests.support.factories import body
from tests.support.services import wait_for
from tests.support.tls_site import TLSSite
from tests.support.webhook_receiver import Inbox
from tests.webhooks.support import Hooks
from worker.platform.settings import Settings
from worker.store import db
from worker.store.models import EvidenceRevision, Retrieval, WebhookDelivery

#: What these tests add to the cluster's settings: one receiver takes every settle's delivery,
#: more than 2 at once (the default) or it lags the batch.
FAULT_ENV = {"EVIDENCE_WEBHOOK_ENDPOINT_CONCURRENCY": "8"}


def settings_of(cluster: Cluster) -> Settings:
    """The settings the cluster's worker hosts run with (`FAULT_ENV` included)."""
    env = {**cluster.env, **FAULT_ENV}
    fields = {k.removeprefix("EVIDENCE_").lower(): v for k, v in env.items()}
    return Settings.model_validate({k: v for k, v in fields.items() if k in Settings.model_fields})


@dataclass(frozen=True)
class Bounds:
    """The seconds a lost host's work waits, from the cluster's settings."""

    #: A claim's lease: the hard time limit plus the grace.
    lease: float
    #: Beat's sweep interval: a lease that ran out is re-pended and published by the next sweep.
    sweep: float
    max_attempts: int

    def settled_within(self, drain: float) -> float:
        """Every retrieval settles within this many seconds of a host's loss: its claims'
        lease runs out, the next sweep re-pends and publishes them, and the hosts left run
        them and the rest of the batch (`drain`)."""
        return self.lease + self.sweep + drain


def bounds_of(cluster: Cluster) -> Bounds:
    settings = settings_of(cluster)
    return Bounds(settings.lease_seconds, settings.sweep_interval_seconds, settings.max_attempts)


@dataclass
class Receiver:
    """A webhook endpoint on the bridge's own address, and its registration."""

    inbox: Inbox
    hooks: Hooks
    webhook_id: str
    secret: str
    #: The CA bundle worker hosts need: the cluster's CA and the receiver's.
    ca_bundle: Path
    workspace: uuid.UUID


@contextlib.contextmanager
def webhook_receiver(cluster: Cluster, workspace: uuid.UUID) -> Iterator[Receiver]:
    """An HTTPS receiver on port 443 of the bridge's address (in this process's namespace, as
    the PostgreSQL relay is: every host reaches it, and a partition cuts it off with the
    database), registered for `workspace`'s settles."""
    assert cluster.network is not None
    gateway = cluster.network.gateway
    site = TLSSite(host=gateway, names=(gateway,), port=443).start()
    try:
        bundle = cluster.workdir / f"hosts-ca-{uuid.uuid4().hex[:8]}.pem"
        bundle.write_bytes(cluster.ca_path.read_bytes() + site.ca.cert_pem.bytes())
        inbox = Inbox(site)
        api = cluster.api(workspace)
        hooks = Hooks(api.client, api.key)
        created = hooks.create(workspace, inbox.url)
        yield Receiver(inbox, hooks, created["webhook"]["id"], created["secret"], bundle, workspace)
    finally:
        site.stop()


def worker_env(receiver: Receiver) -> dict[str, str]:
    return {**FAULT_ENV, "EVIDENCE_CA_BUNDLE": str(receiver.ca_bundle)}


def start_workers(
    cluster: Cluster, hosts: list[str], in_flight: int, env: dict[str, str]
) -> dict[str, HostProcess]:
    """Start `evidence worker` on each host at once; return when every one answers a ping."""
    started = {
        host: cluster.start_worker(host, in_flight=in_flight, env=env, wait=False) for host in hosts
    }
    for host, process in started.items():

        def up(host: str = host, process: HostProcess = process) -> bool:
            return cluster.ping(host) or not process.alive()

        wait_for(up, timeout=90, interval=0.5)
        assert process.alive(), process.tail()
    return started


def submit_batch(history: History, urls: list[str]) -> list[str]:
    """POST `urls` as one batch (with two malformed items, refused alone), recording each
    item's answer in `history` as the fault suite records a POST; the retrieval ids."""
    workspace = history.workspace
    items: list[Any] = [body(url, workspace) for url in urls]
    malformed = [{**body(urls[0], workspace), "kind": "no_such_kind"},
                 {"kind": "url_text", "workspace_id": str(workspace)}]  # fmt: skip
    sent = time.monotonic()
    response = history.api.batch([*items, *malformed])
    answered = time.monotonic()
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == len(items) + 2
    for result in results[-2:]:
        assert result["status"] == 400 and result["error"]["code"] == "invalid_input", result
    ids = []
    for item, result in zip(items, results, strict=False):
        assert result["status"] == 202, result
        history.ops.append(Op("post", item["mutation_id"], 202, result, answered, started=sent))
        ids.append(result["retrieval"]["id"])
    return ids


def settled_count(workspace: uuid.UUID) -> int:
    table = Retrieval.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        return int(
            session.execute(
                sa.select(sa.func.count()).where(
                    table.c.workspace_id == workspace,
                    table.c.state.in_(["completed", "cancelled", "unconfirmed", "expired"]),
                )
            ).scalar_one()
        )


def rows_by_id(ids: list[str]) -> dict[str, Any]:
    """The rows' fencing and outcome fields, by retrieval id."""
    table = Retrieval.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        rows = session.execute(
            sa.select(
                table.c.id, table.c.state, table.c.attempt, table.c.settled_at,
                table.c.lease_until, table.c.result, table.c.evidence_id,
                table.c.evidence_revision,
            ).where(table.c.id.in_([uuid.UUID(i) for i in ids]))
        ).all()  # fmt: skip
    return {str(row.id): row._asdict() for row in rows}


def check_exactly_once(
    history: History, receiver: Receiver, bounds: Bounds, timeout: float
) -> list[Retrieval]:
    """Every accepted retrieval settled once (the history checker: I1-I5), each completed and
    ready with its own single evidence revision, and each settle's one webhook delivery
    received under its one id, signed. Returns the rows."""
    rows = history.check(bounds.max_attempts, settle_timeout=timeout)
    assert len(rows) == len(history.accepted())
    for row in rows:
        assert row.state == "completed" and row.result is not None, row
        assert row.result["status"] == "ready", row.result
        assert row.evidence_revision == 1, row
    assert len({row.evidence_id for row in rows}) == len(rows)
    revisions = EvidenceRevision.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        written = session.execute(
            sa.select(sa.func.count()).where(
                revisions.c.evidence_id.in_([row.evidence_id for row in rows])
            )
        ).scalar_one()
    assert written == len(rows), f"{written} evidence revisions for {len(rows)} retrievals"
    check_deliveries(receiver, {str(row.id) for row in rows}, timeout)
    return rows


def _deliveries(workspace: uuid.UUID) -> list[Any]:
    table = WebhookDelivery.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        return list(
            session.execute(
                sa.select(table.c.id, table.c.retrieval_id, table.c.state, table.c.attempts).where(
                    table.c.workspace_id == workspace
                )
            ).all()
        )


def check_deliveries(receiver: Receiver, retrieval_ids: set[str], timeout: float) -> None:
    """One delivery row per settled retrieval, each delivered; the receiver saw exactly those
    delivery ids (a resend after a lost host repeats its id), each for its own retrieval."""

    def all_delivered() -> list[Any] | None:
        rows = _deliveries(receiver.workspace)
        return rows if all(row.state == "delivered" for row in rows) else None

    deliveries = wait_for(all_delivered, timeout=timeout, interval=0.5)
    assert isinstance(deliveries, list)
    per_retrieval = {str(row.retrieval_id): str(row.id) for row in deliveries}
    assert len(per_retrieval) == len(deliveries), "two deliveries for one settle"
    assert set(per_retrieval) == retrieval_ids
    received: dict[str, set[str]] = {}
    for request in receiver.inbox.received:
        payload = request.verify(receiver.secret)
        received.setdefault(request.headers["webhook-id"], set()).add(
            payload["data"]["retrieval"]["id"]
        )
    assert set(received) == set(per_retrieval.values())
    for retrieval_id, delivery_id in per_retrieval.items():
        assert received[delivery_id] == {retrieval_id}


def host_log_events(process: HostProcess, offset: int = 0) -> list[dict[str, Any]]:
    """The JSON events a host's worker logged, from byte `offset` of its log."""
    events = []
    with open(process.log_path, "rb") as log:
        log.seek(offset)
        for line in log:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
    return events


def late_settles(process: HostProcess, held: set[str]) -> set[str] | None:
    """What the host logged of its settles of `held` (`settled`, `settle_fenced`), once it
    logged one for each; None before."""
    outcomes = {
        e["retrieval_id"]: e["event"]
        for e in host_log_events(process)
        if e.get("event") in ("settled", "settle_fenced") and e.get("retrieval_id") in held
    }
    return set(outcomes.values()) if set(outcomes) == held else None
