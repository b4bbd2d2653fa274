"""How admin commands print: aligned tables for people, ``--json`` for scripts, progress on stderr."""
from __future__ import annotations

import json
import sys
from typing import Any, Sequence


def emit(rows: list[dict] | dict, columns: Sequence[str], as_json: bool, out=sys.stdout) -> None:
    if as_json:
        json.dump(rows, out, indent=2, default=str)
        out.write("\n")
        return
    rows = [rows] if isinstance(rows, dict) else rows
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    out.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={_cell(v)}" for k, v in value.items())
    return str(value)


class Progress:
    """``label [#####.....] n/total`` redrawn on stderr (a line per step when stderr is not a terminal)."""

    def __init__(self, label: str, total: int, err=sys.stderr):
        self.label, self.total, self.err, self.done = label, max(total, 1), err, 0
        self.tty = hasattr(err, "isatty") and err.isatty()

    def step(self, what: str = "") -> None:
        self.done += 1
        filled = 30 * self.done // self.total
        line = f"{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {what}"
        self.err.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and self.done >= self.total:
            self.err.write("\n")
        self.err.flush()
