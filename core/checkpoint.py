"""Small files written atomically: write a temp file, fsync it, rename over, fsync the directory.

A reader sees the old content or the new one, never a mix, whatever moment the process dies.
"""
from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the descriptor's position (short writes continue), then fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` whole or not at all (temp file, fsync, rename, fsync of the
    directory). ``mode`` sets the file's permissions exactly (e.g. 0o600 for secrets)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # a leftover temp file keeps its old mode otherwise
        write_synced(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_int(path: Path, default: int) -> int:
    """An integer checkpoint; the default when the file is missing or unreadable."""
    try:
        return int(Path(path).read_text().strip())
    except (FileNotFoundError, ValueError):
        return default


def write_int(path: Path, value: int) -> None:
    write_atomic(path, f"{value}\n".encode())
