"""`evidence api --workers 2`: each process accepts on a listening socket of its own, and the
kernel spreads a client's connections over them (api/serving/server.py, `ReusePortSocket`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.procfs import children, command_line
from tests.support.services import Process, free_port, wait_for

CONNECTIONS = 64
LISTEN, ESTABLISHED = "0A", "01"


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def tcp_sockets(port: int) -> dict[int, str]:
    """Inode -> state of the IPv4 TCP sockets whose local port is `port`."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port:
            found[int(fields[9])] = fields[3]
    return found


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Process, int]]:
    port = free_port()
    served = Process(["api", "--port", str(port), "--workers", "2"], tmp_path / "api.log").start()
    try:
        wait_for(lambda: _healthy(port), timeout=60, interval=0.3)
        wait_for(lambda: len(children(served.pid)) >= 3, timeout=30)  # and the tracker
        yield served, port
    finally:
        served.stop()


def test_each_process_listens_on_its_own_socket_and_connections_spread(
    api: tuple[Process, int],
) -> None:
    served, port = api
    processes = [pid for pid in children(served.pid) if "spawn_main" in command_line(pid)]
    assert len(processes) == 2, served.log()

    # Two processes' listening sockets are two sockets, not one shared.
    def listening() -> list[set[int]]:
        states = tcp_sockets(port)
        return [
            {inode for inode in socket_inodes(pid) if states.get(inode) == LISTEN}
            for pid in processes
        ]

    wait_for(lambda: all(listening()), timeout=30)  # both have started serving
    sockets = listening()
    assert all(len(inodes) == 1 for inodes in sockets), sockets
    assert sockets[0] != sockets[1]
    # A client's pool opened at once: each process accepts a fair share of it.
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNECTIONS)]
    try:
        for client in clients:  # a request on each, so each was accepted before we count
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        for client in clients:
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
        states = tcp_sockets(port)
        accepted = [
            sum(1 for inode in socket_inodes(pid) if states.get(inode) == ESTABLISHED)
            for pid in processes
        ]
        assert sum(accepted) == CONNECTIONS
        # By the hash of their addresses: 32 each on average; below 16 is a 1-in-10^5 draw.
        assert min(accepted) >= CONNECTIONS // 4, accepted
    finally:
        for client in clients:
            client.close()
