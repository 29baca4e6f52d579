"""worker/platform/cpu_share.py against fake cgroup trees (v1 and v2), and its fallback: the
groups it makes, the weight it writes, where it moves the process, the stale groups it removes.
The real kernel's side is tests/ops/test_cpu_share.py."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from worker.platform import cpu_share
from worker.platform.cpu_share import CgroupUnavailable, cpu_hierarchy, join_group


def fake_v2(root: Path, own: str = "/user.slice/app.service") -> dict[str, Path]:
    """A cgroup v2 mount with the cpu controller, this process in `own`."""
    mount = root / "cg"
    (mount / own.lstrip("/")).mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mounts = root / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\ncgroup2 {mount} cgroup2 rw,nosuid 0 0\n")
    cgroup = root / "cgroup"
    cgroup.write_text(f"0::{own}\n")
    return {"mounts": mounts, "own": cgroup}


def fake_v1(root: Path) -> dict[str, Path]:
    """A hybrid host as here: v1 holds cpu (with cpuacct), v2 holds nothing; this process in
    the root of the cpu hierarchy."""
    cpu, unified = root / "cpu,cpuacct", root / "unified"
    cpu.mkdir()
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("\n")
    mounts = root / "mounts"
    mounts.write_text(
        f"cgroup {root / 'memory'} cgroup rw,memory 0 0\n"
        f"cgroup {cpu} cgroup rw,relatime,cpu,cpuacct 0 0\n"
        f"cgroup2 {unified} cgroup2 rw 0 0\n"
    )
    cgroup = root / "cgroup"
    cgroup.write_text("4:memory:/x\n2:cpu,cpuacct:/\n0::/\n")
    return {"mounts": mounts, "own": cgroup}


def test_v2_group_inside_its_own_with_cpu_weight(tmp_path: Path) -> None:
    where = fake_v2(tmp_path)
    assert cpu_hierarchy(**where)[0] == 2
    group = Path(join_group("evidence-worker-1", 150, **where))
    # Inside the process's own group (a unit's, a container's): it never leaves it.
    assert group == tmp_path / "cg" / "user.slice" / "app.service" / "evidence-worker-1"
    assert (group / "cpu.weight").read_text() == "150"
    assert (group / "cgroup.procs").read_text() == str(os.getpid())
    assert (group.parent / "cgroup.subtree_control").read_text() == "+cpu"
    assert cpu_share.group_weight(group) == 150


def test_v2_refused_when_the_own_group_cannot_share_cpu(tmp_path: Path) -> None:
    """Others left in the own group (the kernel answers EBUSY): moved back, group removed."""
    where = fake_v2(tmp_path)
    own = tmp_path / "cg" / "user.slice" / "app.service"
    (own / "cgroup.subtree_control").mkdir()  # any write to it fails
    with pytest.raises(CgroupUnavailable, match="Error"):
        join_group("evidence-worker-2", 100, **where)
    # Moved back (removing the group works only on a real cgroupfs: here it holds files).
    assert (own / "cgroup.procs").read_text() == str(os.getpid())


def test_v2_in_the_root_makes_the_group_under_it(tmp_path: Path) -> None:
    where = fake_v2(tmp_path, own="/")
    (tmp_path / "cg" / "cgroup.subtree_control").write_text("cpu memory\n")
    group = Path(join_group("evidence-api-1", 200, **where))
    assert group == tmp_path / "cg" / "evidence-api-1"
    assert (tmp_path / "cg" / "cgroup.subtree_control").read_text() == "cpu memory\n"


def test_v1_group_under_its_own_with_shares(tmp_path: Path) -> None:
    where = fake_v1(tmp_path)
    assert cpu_hierarchy(**where)[0] == 1
    group = Path(join_group("evidence-api-7", 200, **where))
    assert group == tmp_path / "cpu,cpuacct" / "evidence-api-7"
    assert (group / "cpu.shares").read_text() == "2048"
    assert cpu_share.group_weight(group) == 200


def test_stale_groups_of_dead_processes_are_removed(tmp_path: Path) -> None:
    where = fake_v1(tmp_path)
    base = tmp_path / "cpu,cpuacct"
    dead = base / "evidence-worker-999999999"
    alive = base / f"evidence-api-{os.getpid()}"
    busy = base / "evidence-api-999999998"
    for group in (dead, alive, busy):
        group.mkdir()
    (busy / "cgroup.procs").write_text("123\n")
    join_group("evidence-worker-8", 100, **where)
    assert not dead.exists()
    assert alive.exists() and busy.exists()


def test_no_cpu_controller_is_refused(tmp_path: Path) -> None:
    where = fake_v1(tmp_path)
    where["mounts"].write_text(f"cgroup2 {tmp_path / 'unified'} cgroup2 rw 0 0\n")
    with pytest.raises(CgroupUnavailable, match="no cgroup hierarchy"):
        join_group("evidence-worker-9", 100, **where)


def test_a_read_only_hierarchy_is_refused(tmp_path: Path) -> None:
    where = fake_v1(tmp_path)
    (tmp_path / "cpu,cpuacct" / "evidence-worker-10").write_text("a file where the group goes")
    with pytest.raises(CgroupUnavailable, match="Error"):
        join_group("evidence-worker-10", 100, **where)


def test_weight_falls_back_to_nice_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    lowered: list[int] = []

    def refuse(**_: Path) -> tuple[int, Path, Path]:
        raise CgroupUnavailable("no cgroup hierarchy with the cpu controller")

    monkeypatch.setattr(cpu_share, "cpu_hierarchy", refuse)
    monkeypatch.setattr(cpu_share, "lower_priority", lowered.append)
    applied = cpu_share.apply("worker", "weight", weight=100, nice=10)
    assert applied == cpu_share.Applied(
        "nice", nice=10, refused="no cgroup hierarchy with the cpu controller"
    )
    assert lowered == [10]
    # The API has no nice to fall back to: it stays as it was, and says why.
    assert cpu_share.apply("api", "weight", weight=200, nice=0).mode == "none"
    assert lowered == [10]


def test_modes() -> None:
    assert cpu_share.apply("worker", "none", weight=100, nice=10) == cpu_share.Applied("none")
    with pytest.raises(ValueError, match="one of"):
        cpu_share.apply("worker", "fast", weight=100, nice=10)
    with pytest.raises(ValueError, match="1-10000"):
        join_group("evidence-worker-1", 0)


def test_leaving_waits_for_members_still_exiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group is removed once a member that was still exiting is gone (here: a directory
    that empties a moment later), and left to the next start when one never goes."""
    base = tmp_path / "own"
    base.mkdir()
    (base / "cgroup.procs").write_text("")
    group = base / "evidence-worker-1"
    group.mkdir()
    member = group / "exiting"
    member.write_text("")
    threading.Timer(0.2, member.unlink).start()
    cpu_share._leave(base, group)
    assert not group.exists()

    stuck = base / "evidence-worker-2"
    stuck.mkdir()
    (stuck / "staying").write_text("")
    monkeypatch.setattr(cpu_share, "LEAVE_WAIT_SECONDS", 0.2)
    cpu_share._leave(base, stuck)
    assert stuck.exists()
