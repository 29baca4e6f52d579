"""A cluster on one machine: hosts as network namespaces, each running the service's own CLI.

    with Cluster(workdir, workers=3).start() as cluster:   # or the `cluster` fixture
        cluster.start_worker("w1", in_flight=32)            # `evidence worker` on host w1
        api = cluster.api(workspace)                         # tests.support.factories.Api
        urls = cluster.page_urls(100)                        # pages of the origin host
        cluster.kill_host("w1")                              # kill -9 every process of w1
        cluster.partition("w2"); cluster.heal("w2")         # w2 cut from Redis and PostgreSQL
        cluster.link_down("w2"); cluster.link_up("w2")      # w2's cable pulled
        cluster.origin_stats()                               # per origin: max concurrent, served

Hosts, on one bridge, in a /24 of 198.18.0.0/15 of their own (`tests/cluster/netns.py`):

* the machine's own namespace, the bridge's `.1`: a relay to its PostgreSQL (which listens on
  loopback only) on port 5432; the tests run here and reach every host;
* `services`: redis-server (the broker, the politeness state), `evidence api`, the sweeper
  (`evidence worker --queues sweep --pool prefork --concurrency 1`) and `evidence beat`;
* `w1` .. `wN`: worker hosts, each `evidence worker --queues retrievals,retrievals-batch,
  webhooks --hostname wK@%h` once started, configured by environment variables only;
* `origin`: the site (`tests/cluster/origin.py`), one origin per address it has.

The cluster has a PostgreSQL database of its own (`tests/cluster/settings.py`); while it
runs, this process's `EVIDENCE_DATABASE_URL` names it, so `worker.store.db`,
`tests.support.factories.make_key` and the fault suite's history checker read the cluster's
rows. Processes are children of this one
with PR_SET_PDEATHSIG: they die with it; `close` (and a later run's sweep, which also drops
the databases of runs whose process is gone) remove the rest.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trustme

from tests.cluster.netns import (
    Host,
    Network,
    kill_namespace,
    namespace_pids,
    sweep_leftovers,
)
from tests.cluster.settings import POSTGRES_PORT, REDIS_PORT, cluster_env, create_database
from tests.support.factories import Api, make_key
from tests.support.services import (
    POSTGRES_ADMIN_URL,
    ROOT,
    drop_postgres_database,
    wait_for,
)

EVIDENCE = str(Path(sys.executable).with_name("evidence"))
API_PORT = 8000
RETRIEVAL_QUEUES = "retrievals,retrievals-batch,webhooks"


def _die_with_parent() -> None:
    """In the child: SIGKILL when the test process ends, however it ends."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class HostProcess:
    """One process started inside a host's namespace; its output goes to `log_path`."""

    def __init__(self, host: Host, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.host, self.args, self.log_path = host, args, log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*host.exec_prefix(), *args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (a worker's warm shutdown), then SIGKILL of the whole group."""
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, lines: int = 30, skip: str | None = None) -> str:
        kept = self.log_path.read_text(errors="replace").splitlines()
        if skip is not None:
            kept = [line for line in kept if skip not in line]
        return "\n".join(kept[-lines:])


#: What an API request's access line holds.
REQUEST_LINE = '"event": "request"'


class Cluster:
    """Services, `workers` worker hosts and an origin host with `origins` addresses."""

    def __init__(
        self,
        workdir: Path,
        workers: int = 3,
        origins: int = 24,
        hold_seconds: float = 0.5,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.worker_names = [f"w{n}" for n in range(1, workers + 1)]
        self.origin_count = origins
        self.hold_seconds = hold_seconds
        self.extra_env = dict(env or {})
        self.network: Network | None = None
        self.processes: dict[str, list[HostProcess]] = {}
        self.database: str | None = None
        self._saved_env: dict[str, str | None] = {}
        self._clients: list[httpx.Client] = []

    # Addresses.
    def host(self, name: str) -> Host:
        assert self.network is not None, "cluster not started"
        return self.network.hosts[name]

    @property
    def api_url(self) -> str:
        return f"http://{self.host('services').address}:{API_PORT}"

    @property
    def broker_url(self) -> str:
        return self.env["EVIDENCE_BROKER_URL"]

    @property
    def origins(self) -> list[str]:
        """The origin host's addresses: each one an origin of its own."""
        origin = self.host("origin")
        return [origin.address, *origin.extra_addresses]

    def page_urls(
        self, count: int, origins: int | None = None, hold: float | None = None
    ) -> list[str]:
        """`count` distinct page URLs, spread round-robin over the first `origins` origins."""
        chosen = self.origins[: origins or len(self.origins)]
        query = "" if hold is None else f"?hold={hold:g}"
        return [
            f"https://{chosen[n % len(chosen)]}/p/{uuid.uuid4().hex}{query}" for n in range(count)
        ]

    # Lifecycle.
    def start(self) -> Cluster:
        sweep_leftovers()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        from worker.store.migrate import upgrade

        self.network = network = Network()
        services = network.add_host("services")
        for name in self.worker_names:
            network.add_host(name)
        origin = network.add_host("origin", extra_addresses=self.origin_count - 1)
        ca = trustme.CA()
        ca_path = self.workdir / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_path))
        cert = ca.issue_cert(origin.address, *origin.extra_addresses)
        cert.cert_chain_pems[0].write_to_path(str(self.workdir / "origin-cert.pem"))
        cert.private_key_pem.write_to_path(str(self.workdir / "origin-key.pem"))
        self.ca_path = ca_path

        self.database, local_url = create_database()
        upgrade(local_url)
        self._use_database(local_url)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_")},
            "EVIDENCE_TEST_SLOWDOWN": os.environ.get("EVIDENCE_TEST_SLOWDOWN", "1"),
            **cluster_env(network, services, self.database, ca_path),
            **self.extra_env,
        }
        target = POSTGRES_ADMIN_URL.rsplit("@", 1)[1].split("/", 1)[0]
        with open(self.workdir / "relay.log", "ab") as log:  # the child keeps its own copy
            self.relay = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.relay",
                 f"{network.gateway}:{POSTGRES_PORT}", target,
                 self.env["EVIDENCE_DB_PEER_TIMEOUT_SECONDS"]],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )  # fmt: skip
        self.run("services", "redis", [
            "redis-server", "--bind", services.address, "--port", str(REDIS_PORT), "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--dir", str(self.workdir),
        ])  # fmt: skip
        self.run("origin", "origin", [
            sys.executable, "-m", "tests.cluster.origin", "--hold", f"{self.hold_seconds:g}",
            "--cert", str(self.workdir / "origin-cert.pem"),
            "--key", str(self.workdir / "origin-key.pem"),
        ])  # fmt: skip
        wait_for(self._redis_up, timeout=20)
        self.run("services", "api", [
            EVIDENCE, "api", "--host", services.address, "--port", str(API_PORT), "--workers", "1",
        ])  # fmt: skip
        self.run("services", "sweeper", [
            EVIDENCE, "worker", "--queues", "sweep", "--pool", "prefork", "--concurrency", "1",
            "--hostname", "sweeper@%h",
        ])  # fmt: skip
        self.run("services", "beat", [EVIDENCE, "beat", "--schedule", str(self.workdir / "beat")])
        wait_for(self._api_up, timeout=60, interval=0.2)
        wait_for(self._origin_up, timeout=30, interval=0.2)

    def run(
        self, host: str, label: str, args: list[str], env: dict[str, str] | None = None
    ) -> HostProcess:
        """Start `args` on `host`, logging to `<workdir>/<host>-<label>.log`."""
        process = HostProcess(
            self.host(host), args, self.workdir / f"{host}-{label}.log", {**self.env, **(env or {})}
        )
        self.processes.setdefault(host, []).append(process)
        return process

    def start_worker(
        self,
        host: str,
        in_flight: int | None = None,
        env: dict[str, str] | None = None,
        wait: bool = True,
    ) -> HostProcess:
        """`evidence worker` on `host`, as an operator starts one; wait until it answers a ping."""
        extra = dict(env or {})
        if in_flight is not None:
            extra["EVIDENCE_WORKER_IN_FLIGHT"] = str(in_flight)
        process = self.run(host, "worker", [
            EVIDENCE, "worker", "--queues", RETRIEVAL_QUEUES, "--hostname", f"{host}@%h",
        ], extra)  # fmt: skip
        if wait:
            wait_for(lambda: self.ping(host) or not process.alive(), timeout=60, interval=0.5)
            assert process.alive(), process.tail()
        return process

    def ping(self, host: str) -> bool:
        """Whether `host`'s worker answers a Celery ping through the broker."""
        from celery import Celery

        node = f"{host}@{socket.gethostname()}"
        app = Celery(broker=self.broker_url, set_as_current=False)
        try:
            return bool(app.control.ping(destination=[node], timeout=1))
        except OSError:
            return False
        finally:
            app.close()

    def stop_workers(self) -> None:
        """Warm shutdown of every worker host's processes."""
        for name in self.worker_names:
            for process in self.processes.pop(name, []):
                process.stop()

    def reset(self) -> None:
        """Between tests: every link up and mended, worker hosts stopped, origin counts cleared."""
        for name in self.worker_names:
            self.link_up(name)
            self.heal(name)
        self.stop_workers()
        self.origin_reset()
        self._close_clients()

    def _close_clients(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()

    # Faults.
    def kill_host(self, host: str) -> None:
        """kill -9 every process of `host` (whatever it forked too)."""
        kill_namespace(self.host(host).namespace)
        for process in self.processes.pop(host, []):
            process.proc.wait(10)

    def pids(self, host: str) -> list[int]:
        return namespace_pids(self.host(host).namespace)

    def cpu_seconds(self) -> float:
        """CPU time used so far by every process of every host (and what they reaped)."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for name in self.network.hosts if self.network else ():
            for pid in self.pids(name):
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue  # gone meanwhile
                total += sum(int(v) for v in fields[11:15]) / ticks  # utime stime cutime cstime
        return total

    def link_down(self, host: str) -> None:
        assert self.network is not None
        self.network.link_down(self.host(host))

    def link_up(self, host: str) -> None:
        assert self.network is not None
        self.network.link_up(self.host(host))

    def partition(self, host: str) -> None:
        """Cut `host` from Redis and the API (the services host) and from PostgreSQL (the
        relay); it still reaches the origin. Packets are dropped, no error is sent."""
        assert self.network is not None
        self.network.cut(self.host(host), self.host("services"))
        self.network.cut(self.host(host), None)

    def heal(self, host: str) -> None:
        assert self.network is not None
        self.network.mend(self.host(host), self.host("services"))
        self.network.mend(self.host(host), None)

    # Clients.
    def api(self, workspace: uuid.UUID, timeout: float = 30) -> Api:
        """A client of the cluster's API with a fresh key for `workspace` (closed by `reset`)."""
        client = httpx.Client(base_url=self.api_url, timeout=timeout)
        self._clients.append(client)
        return Api(client, make_key([workspace]))

    def origin_stats(self) -> dict[str, dict[str, Any]]:
        """Per origin address: requests being served `now`, the `max` at once, pages `served`
        in all and to each host (`clients`, by address)."""
        return dict(self._origin("/_stats").json())

    def origin_reset(self) -> None:
        self._origin("/_reset", "POST")

    def _origin(self, path: str, method: str = "GET") -> httpx.Response:
        url = f"https://{self.host('origin').address}{path}"
        trust = ssl.create_default_context(cafile=str(self.ca_path))
        response = httpx.request(method, url, verify=trust, timeout=5)
        response.raise_for_status()
        return response

    def _origin_up(self) -> bool:
        try:
            return self._origin("/_stats").status_code == 200
        except httpx.HTTPError:
            return False

    def _api_up(self) -> bool:
        try:
            return httpx.get(f"{self.api_url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def _redis_up(self) -> bool:
        import redis

        try:
            with redis.Redis.from_url(self.broker_url, socket_connect_timeout=0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    # The database this process reads.
    def _use_database(self, url: str) -> None:
        from worker.platform.settings import get_settings
        from worker.store import db

        self._saved_env["EVIDENCE_DATABASE_URL"] = os.environ.get("EVIDENCE_DATABASE_URL")
        os.environ["EVIDENCE_DATABASE_URL"] = url
        get_settings.cache_clear()
        db.dispose_engine()

    def _restore_database(self) -> None:
        from worker.platform.settings import get_settings
        from worker.store import db

        if "EVIDENCE_DATABASE_URL" not in self._saved_env:
            return
        saved = self._saved_env.pop("EVIDENCE_DATABASE_URL")
        if saved is None:
            os.environ.pop("EVIDENCE_DATABASE_URL", None)
        else:
            os.environ["EVIDENCE_DATABASE_URL"] = saved
        get_settings.cache_clear()
        db.dispose_engine()

    def logs(self, lines: int = 30) -> str:
        """For a failed test's report: the database's sessions, then the last lines of every
        process's log, the sweeper's and beat's first (a report may be cut short), the API's
        request lines left out (a poller's hundreds bury the rest)."""
        processes = [p for group in self.processes.values() for p in group]
        processes.sort(
            key=lambda p: ("sweeper" not in p.log_path.name, "beat" not in p.log_path.name)
        )
        tails = [
            f"--- {p.log_path.name} ---\n{p.tail(lines, skip=REQUEST_LINE)}" for p in processes
        ]
        return "\n".join([f"--- database sessions ---\n{self.sessions()}", *tails])

    def sessions(self) -> str:
        """The cluster database's sessions: who is in a transaction, since when, waiting on
        what (a stuck sweep is most often a lock some session holds)."""
        if not self.database:
            return "(no database)"
        try:
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pid, client_addr, state, wait_event_type, wait_event,"
                    " round(extract(epoch FROM now() - xact_start)::numeric, 1),"
                    " left(regexp_replace(query, '\\s+', ' ', 'g'), 120)"
                    " FROM pg_stat_activity WHERE datname = %s ORDER BY xact_start NULLS LAST",
                    (self.database,),
                ).fetchall()
        except psycopg.Error as exc:
            return f"(not read: {exc})"
        return "\n".join(" | ".join(str(v) for v in row) for row in rows) or "(none)"

    def close(self) -> None:
        """Stop everything, remove every namespace and link, drop the database. Idempotent."""
        self._close_clients()
        if self.network is not None:
            self.network.close()
            self.network = None
        for group in self.processes.values():
            for process in group:
                process.proc.wait(10)
        self.processes.clear()
        relay = getattr(self, "relay", None)
        if relay is not None and relay.poll() is None:
            relay.kill()
            relay.wait(10)
        self._restore_database()
        if self.database:
            drop_postgres_database(self.database)
            self.database = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
