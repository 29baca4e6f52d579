"""A TCP relay: `python -m tests.cluster.relay LISTEN_HOST:PORT TARGET_HOST:PORT`.

The machine's PostgreSQL listens on loopback only; the cluster's hosts reach it through this
relay on the bridge's address. Each connection is piped both ways until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


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


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
    asyncio.run(serve(_address(sys.argv[1]), _address(sys.argv[2])))
