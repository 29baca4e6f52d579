"""A TCP relay: `python -m tests.cluster.relay LISTEN_HOST:PORT TARGET_HOST:PORT [PEER_SECONDS]`.

The machine's PostgreSQL listens on loopback only; the cluster's hosts reach it through this
relay on the bridge's address. Each connection is piped both ways until either side closes.

PostgreSQL's own socket faces the relay, which always answers: the keepalives and user timeout
a session asks for (EVIDENCE_DB_PEER_TIMEOUT_SECONDS, `worker.store.db.session_options`)
would never find a host cut off. With PEER_SECONDS, the relay's socket facing the host gets
them instead, and when they give up it closes the server's side: what the server does itself
when it faces the host, as it does without a relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys

from worker.store.db import session_options


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


def watch_peer(sock: socket.socket, seconds: float) -> None:
    """Give up on a silent peer as the server would (`session_options`' split of `seconds`)."""
    options = session_options(0, seconds)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, options["tcp_keepalives_idle"])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, options["tcp_keepalives_interval"])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, options["tcp_keepalives_count"])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, options["tcp_user_timeout"])


async def serve(listen: tuple[str, int], target: tuple[str, int], peer_seconds: float) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if peer_seconds:
            watch_peer(writer.get_extra_info("socket"), peer_seconds)
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(relay, *listen, reuse_address=True)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


if __name__ == "__main__":
    peer = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    asyncio.run(serve(_address(sys.argv[1]), _address(sys.argv[2]), peer))
