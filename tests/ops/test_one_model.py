"""One execution model in every deployment: deploy/Procfile (`make run`),
deploy/docker-compose.yml, the Dockerfile's command and the bare `evidence api` / `evidence
worker` start the same processes (docs/execution-model.md).

Each deployment's command line is run through the real `evidence` command with only the last
step replaced (uvicorn's `serving.run`, the supervisor's worker, Celery's `worker_main`), so
what is compared is what the command would start: the API's process count, each worker's
pool, queues and retrievals in flight. The compose file is read from `docker compose config`
(or `docker-compose config`) where that works (it needs no engine) and from the file itself
otherwise; `test_same_processes` prints which (`-rA`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from worker.jobs.celery_app import RETRIEVAL_QUEUES, SWEEP_QUEUE, WEBHOOK_QUEUE, WORKER_QUEUES
from worker.platform.settings import Settings, get_settings

ROOT = Path(__file__).resolve().parents[2]
PROCFILE = ROOT / "deploy" / "Procfile"
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
#: The queues of the retrieval worker wherever the sweeper runs apart from it.
RETRIEVAL_WORKER_QUEUES = frozenset({*RETRIEVAL_QUEUES.split(","), WEBHOOK_QUEUE})
IN_FLIGHT_DEFAULT = Settings.model_fields["worker_in_flight"].default
#: The environment that decides the worker's pool and in flight: unset for every launch here,
#: so each launch shows the defaults a deployment gets.
WORKER_ENV = (
    "EVIDENCE_WORKER_IN_FLIGHT",
    "EVIDENCE_WORKER_POOL",
    "EVIDENCE_WORKER_CONCURRENCY",
    "EVIDENCE_WORKER_CPU_SHARE",
    "EVIDENCE_WORKER_CPU_WEIGHT",
    "EVIDENCE_WORKER_NICE",
    "EVIDENCE_API_CPU_SHARE",
    "EVIDENCE_API_CPU_WEIGHT",
)
#: The CPU share every deployment gives each side (worker/platform/cpu_share.py): the API
#: ten times the worker's weight; the worker at nice 10 where no cgroup can be made.
API_SHARE = "weight weight=200 nice=0"
WORKER_SHARE = "weight weight=20 nice=10"
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


@dataclass(frozen=True)
class Launch:
    """What one `evidence api` or `evidence worker` command line starts."""

    command: str
    api_processes: int | None = None
    pool: str | None = None
    queues: frozenset[str] = frozenset()
    in_flight: int | None = None
    hostname: str | None = None
    cpu_share: str = ""


def expand(word: str, env: dict[str, str] | None = None) -> str:
    """`${NAME:-default}` as the shell (honcho) and compose expand it."""
    return _VARIABLE.sub(lambda m: (env or {}).get(m.group(1), m.group(2) or ""), word)


def procfile_argv() -> dict[str, list[str]]:
    """Procfile process name to the arguments of `evidence`."""
    entries = {}
    for line in PROCFILE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            words = [expand(word) for word in command.split()]
            assert words[0] == "evidence", line
            entries[name.strip()] = words[1:]
    return entries


#: The compose commands tried in turn; each parses and interpolates the file without an engine.
COMPOSE_COMMANDS = (("docker", "compose"), ("docker-compose",))


def compose_config(env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The compose services, and what read them: `docker compose config` (or the older
    `docker-compose config`) where that compose is installed, else the file itself. An
    installed compose that rejects the file fails the test."""

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    for program, *sub in COMPOSE_COMMANDS:
        path = shutil.which(program)
        if not path or run(path, *sub, "version").returncode != 0:
            continue  # `docker` without its compose plugin, say
        done = run(path, *sub, "-f", str(COMPOSE), "config")
        assert done.returncode == 0, done.stderr
        return yaml.safe_load(done.stdout)["services"], " ".join([program, *sub, "config"])
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    for service in services.values():
        if isinstance(service.get("command"), list):
            service["command"] = [expand(word, env) for word in service["command"]]
    return services, "the file (no compose installed)"


def compose_argv(services: dict[str, Any]) -> dict[str, list[str]]:
    """Compose service to the arguments of `evidence`, for the services of this image."""
    return {
        name: list(service["command"])
        for name, service in services.items()
        if "build" in service and name != "migrate"
    }


def dockerfile_instruction(name: str) -> list[str]:
    """The exec form of a Dockerfile instruction (`ENTRYPOINT`, `CMD`)."""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{name} "):
            words: list[str] = json.loads(line[len(name) :])
            return words
    raise AssertionError(f"no {name} in {DOCKERFILE}")


@pytest.fixture
def launch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Callable[[list[str]], Launch]]:
    """Run `evidence <argv>` to the point where it would start its processes."""
    import api.cli.main
    from api.serving import cpu_claims
    from api.serving import server as serving
    from worker.jobs import node, supervisor
    from worker.jobs.celery_app import app as celery
    from worker.platform import cpu_share

    for name in WORKER_ENV:
        monkeypatch.delenv(name, raising=False)
    # What the api command writes for its processes, put back afterwards.
    monkeypatch.setenv("EVIDENCE_API_WORKERS", "1")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(api.cli.main, "_configure_logging", lambda: None)
    monkeypatch.setattr(cpu_claims, "wanted", lambda: False)
    get_settings.cache_clear()
    seen: dict[str, Any] = {}

    class Supervised:
        def __init__(self, start: Callable[[], None]) -> None:
            self.start = start

        def run(self) -> int:
            self.start()
            return 0

    def record(**values: Any) -> None:
        seen.update(values)

    monkeypatch.setattr(serving, "run", lambda *_, **kw: record(api=kw["workers"]))
    monkeypatch.setattr(supervisor, "Supervisor", Supervised)
    monkeypatch.setattr(node, "preload", lambda: None)
    monkeypatch.setattr(node, "run_threads_worker", lambda argv: record(pool="threads", argv=argv))
    monkeypatch.setattr(celery, "worker_main", lambda argv: record(pool="prefork", argv=argv))

    def share(role: str, mode: str, *, weight: int, nice: int) -> cpu_share.Applied:
        record(cpu_share=f"{mode} weight={weight} nice={nice}" if mode != "none" else mode)
        return cpu_share.Applied("none")

    monkeypatch.setattr(cpu_share, "apply", share)

    def run(argv: list[str]) -> Launch:
        seen.clear()
        get_settings.cache_clear()
        result = CliRunner().invoke(api.cli.main.app, argv, catch_exceptions=False)
        assert result.exit_code == 0, (argv, result.output)
        if argv[0] == "api":
            return Launch("api", api_processes=seen["api"], cpu_share=seen["cpu_share"])
        celery_argv: list[str] = seen["argv"]

        def option(*names: str) -> str | None:
            for n, word in enumerate(celery_argv):
                if word in names:
                    return celery_argv[n + 1]
            return None

        return Launch(
            "worker",
            pool=seen["pool"],
            queues=frozenset((option("-Q", "--queues") or "").split(",")),
            in_flight=int(option("--concurrency") or 0),
            hostname=option("--hostname"),
            cpu_share=seen["cpu_share"],
        )

    yield run
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def compose() -> tuple[dict[str, Any], str]:
    return compose_config(
        {"EVIDENCE_FLOWER_BASIC_AUTH": "admin:secret", "EVIDENCE_WORKER_IN_FLIGHT": "100"}
    )


class TestReaders:
    """The readers see what the files say."""

    def test_expand(self) -> None:
        assert expand("--port ${P:-8000} ${Q}") == "--port 8000 "
        assert expand("${P:-8000}", {"P": "9"}) == "9"

    def test_dockerfile(self) -> None:
        assert dockerfile_instruction("ENTRYPOINT") == ["evidence"]


class TestOneModel:
    """The processes every deployment starts, compared as the command resolves them."""

    def test_same_processes(self, compose: tuple[dict[str, Any], str]) -> None:
        services, source = compose
        print(f"compose read from {source}")
        roles = {"api", "worker", "sweeper", "beat", "flower"}
        assert set(compose_argv(services)) == set(procfile_argv()) == roles
        for name, argv in compose_argv(services).items():
            assert argv[0] == procfile_argv()[name][0], (name, argv)

    def test_cli_defaults_are_the_model(self) -> None:
        """The bare commands resolve their pool, in flight and API processes at run time."""
        from api.cli.main import app

        commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
        defaults = {
            (command, p.name): p.default
            for command in ("api", "worker")
            for p in commands[command].params
        }
        assert defaults["api", "workers"] is None  # one per usable CPU, below
        assert defaults["worker", "pool"] is None  # EVIDENCE_WORKER_POOL
        assert defaults["worker", "concurrency"] is None  # EVIDENCE_WORKER_IN_FLIGHT
        assert Settings.model_fields["worker_pool"].default == "threads"

    def test_api_processes(
        self, launch: Callable[[list[str]], Launch], compose: tuple[dict[str, Any], str]
    ) -> None:
        """One API process per usable CPU, however the API is started: no deployment fixes a
        count (`--workers 2` matches the rule only on a 2-CPU machine)."""
        cpus = len(os.sched_getaffinity(0))
        given = {
            "bare": ["api"],
            "Procfile": procfile_argv()["api"],
            "compose": compose_argv(compose[0])["api"],
            "Dockerfile CMD": dockerfile_instruction("CMD"),
        }
        assert [where for where, argv in given.items() if "--workers" in argv] == []
        started = {where: launch(argv) for where, argv in given.items()}
        assert {where: s.api_processes for where, s in started.items()} == dict.fromkeys(
            started, cpus
        )

    def test_retrieval_worker(
        self, launch: Callable[[list[str]], Launch], compose: tuple[dict[str, Any], str]
    ) -> None:
        """The threads pool at the in-flight default; the same worker in the Procfile and in
        compose. A bare `evidence worker` differs only in also taking the sweep."""
        procfile = launch(procfile_argv()["worker"])
        composed = launch(compose_argv(compose[0])["worker"])
        bare = launch(["worker"])
        assert composed == procfile
        assert (procfile.pool, procfile.in_flight) == ("threads", IN_FLIGHT_DEFAULT)
        assert procfile.queues == RETRIEVAL_WORKER_QUEUES
        assert (bare.pool, bare.in_flight) == ("threads", IN_FLIGHT_DEFAULT)
        assert bare.queues == frozenset(WORKER_QUEUES.split(","))

    def test_compose_worker_takes_in_flight_from_the_environment(
        self,
        launch: Callable[[list[str]], Launch],
        compose: tuple[dict[str, Any], str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """EVIDENCE_WORKER_IN_FLIGHT reaches the worker container and sets its in flight."""
        worker = compose[0]["worker"]
        assert "EVIDENCE_WORKER_IN_FLIGHT" in worker["environment"]
        assert worker["environment"]["EVIDENCE_WORKER_IN_FLIGHT"] in (None, "100")
        monkeypatch.setenv("EVIDENCE_WORKER_IN_FLIGHT", "100")
        assert launch(compose_argv(compose[0])["worker"]).in_flight == 100

    def test_cpu_share(
        self, launch: Callable[[list[str]], Launch], compose: tuple[dict[str, Any], str]
    ) -> None:
        """Each side's CPU weight, the same in every deployment; compose gives each container
        the same weight as `cpu_shares` (a container may not make cgroups of its own)."""
        services = compose[0]
        for name in ("api", "worker"):
            share = API_SHARE if name == "api" else WORKER_SHARE
            argvs = [procfile_argv()[name], compose_argv(services)[name], [name]]
            assert {launch(argv).cpu_share for argv in argvs} == {share}, name
            weight = int(share.split("weight=")[1].split()[0])
            assert int(services[name]["cpu_shares"]) == weight * 1024 // 100, name
        assert launch(dockerfile_instruction("CMD")).cpu_share == API_SHARE

    def test_sweeper(
        self, launch: Callable[[list[str]], Launch], compose: tuple[dict[str, Any], str]
    ) -> None:
        """The sweep alone, prefork with one child, in the Procfile and in compose."""
        procfile = launch(procfile_argv()["sweeper"])
        assert launch(compose_argv(compose[0])["sweeper"]) == procfile
        assert procfile == Launch(
            "worker",
            pool="prefork",
            queues=frozenset({SWEEP_QUEUE}),
            in_flight=1,
            hostname="sweeper@%h",
            cpu_share=WORKER_SHARE,
        )

    def test_beat(self, compose: tuple[dict[str, Any], str]) -> None:
        """The same bare `evidence beat` in the Procfile and in compose, whose two replicas hold
        the lock in turn (worker/jobs/beat_lock.py); no worker embeds one (`-B`)."""
        services = compose[0]
        assert [n for n, argv in procfile_argv().items() if argv[0] == "beat"] == ["beat"]
        assert [n for n, argv in compose_argv(services).items() if argv[0] == "beat"] == ["beat"]
        assert procfile_argv()["beat"] == compose_argv(services)["beat"] == ["beat"]
        assert services["beat"]["deploy"]["replicas"] == 2
        for argv in [*procfile_argv().values(), *compose_argv(services).values()]:
            assert not {"-B", "--beat"} & set(argv), argv
