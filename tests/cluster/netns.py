"""Hosts as Linux network namespaces on one bridge, named so that leftovers can be found.

Every name starts with `evc<pid>` (the pid of the test process that made it): a run sweeps
only leftovers whose owner is gone, so a parallel run's hosts are never touched. Each run takes
a /24 of 198.18.0.0/15 (the range reserved for network benchmarks) that no interface of this
machine uses yet: `.1` is the bridge's own address in the machine's namespace, the hosts get
the next ones. No namespace has a default route, so nothing they send leaves the bridge.

A link cut (`link_down`) takes the host's end of its veth down, as pulling its cable would: the
namespace keeps its address and sockets, its packets go nowhere. A partition between two hosts
(`cut`) points each one's neighbour entry for the other at a MAC address nobody has, so their
packets are dropped by the bridge without any error (iptables, nft and tc actions are not
available everywhere; neighbour entries are).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "evc"
#: The range the cluster's hosts live in; nothing outside the test's bridge uses it.
RANGE = ipaddress.ip_network("198.18.0.0/15")
#: A locally administered MAC address no interface has: frames to it are dropped.
NOWHERE_MAC = "02:00:5e:00:de:ad"


def ip(*args: str, namespace: str | None = None, check: bool = True) -> str:
    """Run `ip ARGS` (inside `namespace` when given); return its output."""
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def namespace_pids(namespace: str) -> list[int]:
    """Every process inside `namespace`."""
    out = ip("netns", "pids", namespace, check=False)
    return [int(p) for p in out.split()]


def kill_namespace(namespace: str) -> None:
    """SIGKILL every process inside `namespace`, until none is left (a supervisor may fork)."""
    for _ in range(50):
        pids = namespace_pids(namespace)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    raise RuntimeError(f"processes of {namespace} survive SIGKILL: {namespace_pids(namespace)}")


def sweep_leftovers() -> list[str]:
    """Delete namespaces and links of earlier runs whose test process is gone; their names."""
    owner = re.compile(rf"^{PREFIX}(\d+)")
    removed = []
    for line in ip("netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        found = owner.match(name)
        if found and not alive(int(found.group(1))):
            kill_namespace(name)
            ip("netns", "del", name, check=False)
            removed.append(name)
    for line in ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        found = owner.match(name)
        if found and not alive(int(found.group(1))):
            ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of RANGE that no interface of this machine has an address in."""
    used = set()
    for line in ip("-4", "-o", "addr", "show").splitlines():
        address = ipaddress.ip_interface(line.split()[3]).ip
        if address in RANGE:
            used.add(ipaddress.ip_network(f"{address}/24", strict=False))
    for subnet in RANGE.subnets(new_prefix=24):
        if subnet not in used:
            return subnet  # type: ignore[return-value]
    raise RuntimeError("every /24 of 198.18.0.0/15 is in use")


@dataclass
class Host:
    """A network namespace with one veth on the bridge."""

    name: str  # short: w1, services, origin
    namespace: str
    veth: str  # the machine's end, on the bridge
    address: str
    extra_addresses: list[str] = field(default_factory=list)

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]

    def mac(self) -> str:
        out = ip("-o", "link", "show", "eth0", namespace=self.namespace)
        return out.split("link/ether", 1)[1].split()[0]


class Network:
    """The bridge and its hosts; `close` removes every namespace and link it made."""

    def __init__(self) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.subnet = free_subnet()
        hosts = self.subnet.hosts()
        self.gateway = str(next(hosts))  # the bridge's address, in the machine's namespace
        self._addresses = hosts
        self.bridge = f"{self.tag}br"
        self.hosts: dict[str, Host] = {}
        self._cuts: set[tuple[str, str]] = set()
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_host(self, name: str, extra_addresses: int = 0) -> Host:
        index = len(self.hosts)
        host = Host(
            name=name,
            namespace=f"{self.tag}-{name}",
            veth=f"{self.tag}v{index}",
            address=str(next(self._addresses)),
        )
        peer = f"{self.tag}p{index}"
        ip("netns", "add", host.namespace)
        self.hosts[name] = host
        ip("link", "add", host.veth, "type", "veth", "peer", "name", peer)
        ip("link", "set", host.veth, "master", self.bridge, "up")
        ip("link", "set", peer, "netns", host.namespace)
        ns = host.namespace
        ip("link", "set", peer, "name", "eth0", namespace=ns)
        ip("addr", "add", f"{host.address}/24", "dev", "eth0", namespace=ns)
        for _ in range(extra_addresses):
            extra = str(next(self._addresses))
            ip("addr", "add", f"{extra}/24", "dev", "eth0", namespace=ns)
            host.extra_addresses.append(extra)
        ip("link", "set", "lo", "up", namespace=ns)
        ip("link", "set", "eth0", "up", namespace=ns)
        return host

    # Faults.
    def link_down(self, host: Host) -> None:
        ip("link", "set", host.veth, "down")

    def link_up(self, host: Host) -> None:
        """Plug the cable back in; return once the host's end has its carrier again and has
        forgotten the neighbours it was still looking for (a partition's entries stay)."""
        ip("link", "set", host.veth, "up")
        for _ in range(100):
            if "LOWER_UP" in ip("link", "show", "eth0", namespace=host.namespace):
                break
            time.sleep(0.02)
        ip("neigh", "flush", "dev", "eth0", namespace=host.namespace, check=False)

    def cut(self, host: Host, other: Host | None) -> None:
        """Drop every packet between `host` and `other` (None: the machine's own namespace,
        where the PostgreSQL relay listens), silently, both ways."""
        self._point(host, other, NOWHERE_MAC)
        self._cuts.add((host.name, other.name if other else ""))

    def mend(self, host: Host, other: Host | None) -> None:
        """Undo `cut`: the neighbour entries are forgotten and learnt again."""
        for namespace, device, address in self._ends(host, other):
            ip("neigh", "del", address, "dev", device, namespace=namespace, check=False)
        self._cuts.discard((host.name, other.name if other else ""))

    def _ends(self, host: Host, other: Host | None) -> list[tuple[str | None, str, str]]:
        """(namespace, device, address of the far end) for each side of host-other."""
        if other is None:
            return [(host.namespace, "eth0", self.gateway), (None, self.bridge, host.address)]
        return [
            (host.namespace, "eth0", other.address),
            (other.namespace, "eth0", host.address),
        ]

    def _point(self, host: Host, other: Host | None, mac: str) -> None:
        for namespace, device, address in self._ends(host, other):
            ip(
                "neigh", "replace", address, "lladdr", mac, "nud", "permanent", "dev", device,
                namespace=namespace,
            )  # fmt: skip

    # Teardown.
    def close(self) -> None:
        """Kill every process in the hosts, then delete them and the bridge. Idempotent."""
        for host in list(self.hosts.values()):
            kill_namespace(host.namespace)
            ip("netns", "del", host.namespace, check=False)
            ip("link", "del", host.veth, check=False)  # gone with its peer; in case not
            del self.hosts[host.name]
        ip("link", "del", self.bridge, check=False)
