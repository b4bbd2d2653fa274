"""Resource alarms, as RabbitMQ raises them: low free disk, high resident memory.

:meth:`Alarms.check` is called on a timer and returns the alarms now active; the AMQP side
blocks publishing connections while any is (``connection.blocked``), so that a broker short of
disk or memory slows its producers down instead of falling over.
"""
from __future__ import annotations

import logging
import os
import resource
from pathlib import Path

from gateway.logs import fields

log = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE")
# After a write failed for want of space, the disk alarm holds until at least this much is free
# again (or the configured limit, if larger): enough for a few full-size batches.
FULL_CLEAR_BYTES = 16 << 20


def resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


def open_fds() -> int:
    """File descriptors the process holds open now."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def fd_limit() -> int:
    """The process's soft limit on open file descriptors."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def total_memory_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * _PAGE


class Alarms:
    def __init__(self, data_dir: Path, disk_free_limit_mb: int, memory_limit_mb: int):
        self.data_dir = data_dir
        self.disk_free_limit = disk_free_limit_mb << 20
        self.memory_limit = (memory_limit_mb << 20) if memory_limit_mb else int(total_memory_bytes() * 0.4)
        self.active: frozenset[str] = frozenset()
        self.write_failed = False  # a log write failed (ENOSPC): the disk alarm holds until space is back

    def note_write_failure(self) -> None:
        self.write_failed = True

    def check(self) -> frozenset[str]:
        active = set()
        stat = os.statvfs(self.data_dir)
        free = stat.f_bavail * stat.f_frsize
        if self.write_failed and free >= max(self.disk_free_limit, FULL_CLEAR_BYTES):
            self.write_failed = False
        if free < self.disk_free_limit or self.write_failed:
            active.add("disk")
        rss = resident_bytes()
        if rss > self.memory_limit:
            active.add("memory")
        if active != self.active:
            for name in sorted(active - self.active):
                log.warning("resource alarm set: publishers are blocked", extra=fields(
                    alarm=name, free_disk_mb=free >> 20, disk_free_limit_mb=self.disk_free_limit >> 20,
                    resident_mb=rss >> 20, memory_limit_mb=self.memory_limit >> 20))
            for name in sorted(self.active - active):
                log.warning("resource alarm cleared", extra=fields(alarm=name))
            self.active = frozenset(active)
        return self.active
