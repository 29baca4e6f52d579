"""How much CPU a process tree gets when the machine is saturated: a floor for each side.

`evidence api` and `evidence worker` call `apply` before they start any other process or
thread, so everything they start inherits it. The modes:

* `weight`: the tree joins a control group of its own (`evidence-<role>-<pid>`) with a CPU
  weight, cgroup v2's `cpu.weight` or v1's `cpu.shares` (1024 per 100), whichever hierarchy
  holds the `cpu` controller here. The kernel shares a saturated CPU between groups by weight:
  each side gets at least its weight's part and all of what the other leaves. Where no group can
  be made (no `cpu` controller, no write access, not Linux), it falls back to `nice`, and says
  why in `Applied.refused`.
* `nice`: the process's nice value, and its session's when it leads one (autogroup
  scheduling shares CPU between sessions first): nice 10 is about a tenth of a nice-0
  competitor's share, never none.
* `idle`: `nice`, plus Linux's `SCHED_IDLE`: the tree runs only on CPU nobody else wants, so
  a busy API or a loaded machine can starve it entirely (kept for comparison only).
* `none`: as started.

Imports nothing of the project.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

MODES = ("weight", "nice", "idle", "none")
#: cgroup v1's `cpu.shares` for cgroup v2's default `cpu.weight` (100).
V1_SHARES_PER_100 = 1024
GROUP_PREFIX = "evidence-"


@dataclass(frozen=True)
class Applied:
    """What `apply` did: the mode in force, the group joined (weight), the nice value added,
    and why the asked-for mode was not possible (empty when it was)."""

    mode: str
    group: str = ""
    weight: int = 0
    nice: int = 0
    refused: str = ""


def apply(role: str, mode: str, *, weight: int, nice: int) -> Applied:
    """Put this process (and all it starts from now on) in `mode`; what was done.

    `weight` is the cgroup v2 weight (1-10000, 100 the default) for `weight`; `nice` is added
    in `nice` and `idle`, and in `weight`'s fallback."""
    if mode not in MODES:
        raise ValueError(f"CPU share mode must be one of {', '.join(MODES)}")
    if mode == "none":
        return Applied("none")
    refused = ""
    if mode == "weight":
        try:
            group = join_group(f"{GROUP_PREFIX}{role}-{os.getpid()}", weight)
        except CgroupUnavailable as exc:
            refused = str(exc)
        else:
            return Applied("weight", group=group, weight=weight)
    if nice:
        lower_priority(nice)
    if mode == "idle":
        if not idle_priority():
            return Applied("nice", nice=nice, refused="SCHED_IDLE refused")
        return Applied("idle", nice=nice)
    return Applied("nice" if nice else "none", nice=nice, refused=refused)


class CgroupUnavailable(Exception):
    """No control group with a CPU weight can be made for this process here."""


def cpu_hierarchy(
    mounts: Path = Path("/proc/self/mounts"), own: Path = Path("/proc/self/cgroup")
) -> tuple[int, Path, Path]:
    """The cgroup version holding the `cpu` controller, where it is mounted, and this
    process's directory in it."""
    paths: dict[str, str] = {}
    for line in own.read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        paths["v2" if number == "0" else controllers] = path
    for line in mounts.read_text().splitlines():
        _, where, kind, options, *_ = line.split()
        where = where.replace("\\040", " ")
        if kind == "cgroup" and "cpu" in options.split(","):
            for controllers, path in paths.items():
                if "cpu" in controllers.split(","):
                    return 1, Path(where), Path(where) / path.lstrip("/")
        if kind == "cgroup2" and "v2" in paths:
            directory = Path(where) / paths["v2"].lstrip("/")
            # The controller is in v2 only if no v1 hierarchy holds it (checked above first:
            # a hybrid mount lists v2 without `cpu`).
            if "cpu" in _words(Path(where) / "cgroup.controllers"):
                return 2, Path(where), directory
    raise CgroupUnavailable("no cgroup hierarchy with the cpu controller")


def join_group(name: str, weight: int, **where: Path) -> str:
    """Make control group `name` with CPU `weight` under this process's own, and move this
    process into it; its path.

    The group stays inside this process's own (a systemd unit's, a container's), so it never
    escapes what a supervisor tracks. In cgroup v2 a group with members cannot share out a
    controller: the own group must be left empty once this process has moved (true of the
    root, and of a delegated unit whose only process this is), else this is refused and the
    process moved back. Groups of this kind left by processes that are gone (same prefix, dead
    pid, no members) are removed first."""
    if not 1 <= weight <= 10_000:
        raise ValueError("cpu weight must be 1-10000")
    try:
        version, _, own = cpu_hierarchy(**where)
        _remove_stale(own)
        group = own / name
        group.mkdir(exist_ok=True)
        if version == 1:
            (group / "cpu.shares").write_text(str(weight * V1_SHARES_PER_100 // 100))
            (group / "cgroup.procs").write_text(str(os.getpid()))
        else:
            (group / "cgroup.procs").write_text(str(os.getpid()))
            try:
                if "cpu" not in _words(own / "cgroup.subtree_control"):
                    (own / "cgroup.subtree_control").write_text("+cpu")
                (group / "cpu.weight").write_text(str(weight))
            except OSError:  # others still in the own group (EBUSY), or not delegated
                _leave(own, group)
                raise
        atexit.register(_leave, own, group)
    except OSError as exc:  # read-only, not delegated, no such files (not Linux)
        raise CgroupUnavailable(f"{type(exc).__name__}: {exc}") from None
    return str(group)


def group_weight(group: Path) -> int:
    """The cgroup v2 weight of `group` (v1's shares converted)."""
    if (group / "cpu.weight").exists():
        return int((group / "cpu.weight").read_text())
    return int((group / "cpu.shares").read_text()) * 100 // V1_SHARES_PER_100


#: How long an exiting process waits for the rest of its group (children it just stopped)
#: to be gone before it leaves the group to the next start.
LEAVE_WAIT_SECONDS = 3.0


def _leave(base: Path, group: Path) -> None:
    """At exit: back to `base` and remove the group once its other members are gone (children
    stopped a moment before may still be exiting); else the next start here removes it."""
    with contextlib.suppress(OSError):
        (base / "cgroup.procs").write_text(str(os.getpid()))
    deadline = time.monotonic() + LEAVE_WAIT_SECONDS
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy: a member is still exiting
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _remove_stale(base: Path) -> None:
    """Remove `evidence-*-<pid>` groups under `base` whose process is gone and that are empty
    (a tree killed outright leaves its group behind)."""
    for group in base.glob(f"{GROUP_PREFIX}*-*"):
        pid = group.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        if not _words(group / "cgroup.procs"):
            with contextlib.suppress(OSError):  # a member joined meanwhile, or not ours
                group.rmdir()


def idle_priority() -> bool:
    """Run this process, and every process and thread it starts from now on, under Linux's
    `SCHED_IDLE` policy; whether it could.

    `SCHED_IDLE` work is preempted at once by any other process that wakes: it takes only the
    CPU the rest leaves, which under a read flood or on a busy machine is none (measured in
    docs/measurements.md, "CPU shared, never starved")."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused
        return False
    return True


def lower_priority(nice: int) -> None:
    """Add `nice` to this process's nice value, and to its session's when it leads one.

    With the kernel's autogroup scheduling, CPU is shared between sessions first, so a
    process's own nice value only ranks it inside its session. A worker started in a session of
    its own (as honcho and most supervisors do) also lowers that session's weight."""
    os.nice(nice)
    if os.getsid(0) != os.getpid():
        return
    autogroup = Path("/proc/self/autogroup")
    with contextlib.suppress(OSError, ValueError):
        current = int(autogroup.read_text().split("nice")[-1])
        autogroup.write_text(str(min(19, current + nice)))
