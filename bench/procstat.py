"""CPU time of processes and process trees, read from /proc (Linux). Pure reads."""

from __future__ import annotations

import os
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first); None when unreadable."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used, from /proc; 0 when unreadable."""
    fields = _stat(pid) if pid is not None else None
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, theirs, ...), from /proc's parent ids."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parent[int(entry.name)] = int(fields[1])
    below, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        below += kids
        frontier = kids
    return below


def tree_cpu(pid: int | None) -> dict[int, float]:
    """CPU seconds of a process and of each live descendant (the extender's share price
    worker runs in a child process: its CPU is the extender's). The root's entry also holds
    the CPU of children it has already reaped."""
    if pid is None or (fields := _stat(pid)) is None:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    out = {pid: sum(int(f) for f in fields[11:15]) / tick}
    for child in descendants(pid):
        out[child] = cpu_seconds(child)
    return out


def tree_cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds a process tree used between two ``tree_cpu`` readings; a process born
    since counts from zero."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())
