"""Rolling WARC files under the archive directory, appended so a kill never leaves a half
record that a reader would choke on.

Each process appends to a file of its own, named `<time>-<host>-<pid>-<n>.warc.gz.open` while it
writes, and holds an exclusive `flock` on it. A group of records (each its own gzip member) is
appended with one write and then fsync'd; only then is it indexed in the database, so an index
row never names bytes that are not on disk. A write that fails is cut back off the file. Past
`MAX_FILE_BYTES` the file is sealed: fsync'd and renamed without `.open`.

A process killed mid-write leaves a torn gzip member at the end of its `.open` file, and the
kernel releases its lock. `recover` (run when a process opens its first file, and by the
sweep) takes each unlocked `.open` file, cuts it after its last complete gzip member and
seals it. The index names files by their sealed name; `locate` finds either.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import threading
import time
import zlib
from pathlib import Path

OPEN_SUFFIX = ".open"
#: A file is sealed and a new one begun past this size (the usual WARC file size is 1 GB).
MAX_FILE_BYTES = 256 * 1024 * 1024
_SCAN_CHUNK = 1 << 20


def locate(directory: Path, name: str) -> Path:
    """The path of an indexed file: sealed, or still open."""
    sealed = directory / name
    return sealed if sealed.exists() else directory / (name + OPEN_SUFFIX)


def complete_length(path: Path) -> int:
    """The bytes of `path` that are whole gzip members (a torn last member not counted)."""
    good = 0
    with path.open("rb") as handle:
        data = handle.read()
    position = 0
    while position < len(data):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            while not inflater.eof and position < len(data):
                chunk = data[position : position + _SCAN_CHUNK]
                inflater.decompress(chunk)
                position += len(chunk) - len(inflater.unused_data)
        except zlib.error:
            return good
        if not inflater.eof:
            return good
        good = position
    return good


def recover(directory: Path) -> list[Path]:
    """Cut and seal every `.open` file no live process holds; the files sealed."""
    sealed = []
    for path in sorted(directory.glob(f"*.warc.gz{OPEN_SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue  # sealed meanwhile by its writer
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive
            if not path.exists():
                continue  # its writer sealed it before letting go
            length = complete_length(path)
            if length < os.fstat(fd).st_size:
                os.ftruncate(fd, length)
            os.fsync(fd)
            target = path.with_name(path.name[: -len(OPEN_SUFFIX)])
            os.rename(path, target)
            sealed.append(target)
        finally:
            os.close(fd)
    if sealed:
        _sync_directory(directory)
    return sealed


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class WarcFiles:
    """This process's rolling WARC file: appends are serialised, fsync'd, never torn."""

    def __init__(self, directory: Path, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._name = ""
        self._size = 0
        self._count = 0

    def append(self, data: bytes) -> tuple[str, int]:
        """Write `data` whole at the end of the current file and fsync it: (file, offset)."""
        with self._lock:
            if self._fd is not None and self._size and self._size + len(data) > self.max_bytes:
                self._seal()
            if self._fd is None:
                self._begin()
            assert self._fd is not None
            offset = self._size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
                os.fsync(self._fd)
            except BaseException:
                os.ftruncate(self._fd, offset)  # never leave a torn record behind a live writer
                raise
            self._size += len(data)
            return self._name, offset

    def close(self) -> None:
        """Seal the current file, if any."""
        with self._lock:
            if self._fd is not None:
                self._seal()

    def _begin(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._count == 0:
            recover(self.directory)  # files of this host's processes killed before
        self._count += 1
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        # The random part keeps names unique where host, pid and second repeat (a container
        # restarted under the same name and pid): the index finds records by file name.
        unique = secrets.token_hex(4)
        self._name = f"{stamp}-{socket.gethostname()}-{os.getpid()}-{self._count}-{unique}.warc.gz"
        path = self.directory / (self._name + OPEN_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o640)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _sync_directory(self.directory)
        self._fd, self._size = fd, 0

    def _seal(self) -> None:
        assert self._fd is not None
        os.fsync(self._fd)
        open_path = self.directory / (self._name + OPEN_SUFFIX)
        os.rename(open_path, self.directory / self._name)
        _sync_directory(self.directory)
        os.close(self._fd)  # releases the lock once the sealed name is in place
        self._fd = None
