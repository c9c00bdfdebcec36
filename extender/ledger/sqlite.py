"""Durable embedded ledger (the default for one replica): bookings survive a restart.

The bookings live in memory (``MemoryLedger``: every check and change is synchronous, hence
atomic) and every change is written to an SQLite database in WAL mode before its caller hears
of it. Writes run on one dedicated thread, in the order the changes were made, so the event
loop never waits on the disk. ``synchronous=NORMAL`` in WAL mode survives a crash or kill -9 of
the process (the OS has the log); ``durable=True`` (FULL) also survives power loss.

An exclusive lock on the state directory keeps two extenders from sharing one file: replicas
share Redis, never this store.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from extender.errors import LedgerUnavailable, SparseError
from extender.ledger import rules
from extender.ledger.memory import MemoryLedger
from extender.ledger.store import Change

log = logging.getLogger("sparse.ledger.sqlite")

DB_FILE = "ledger.sqlite3"
LOCK_FILE = "ledger.lock"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reservations (pod_uid TEXT PRIMARY KEY, doc BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/sparse, else ~/.local/state/sparse (the XDG default): no root needed."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                            "state")
    return Path(base) / "sparse"


class SqliteLedger(MemoryLedger):
    def __init__(self, state_dir: Path, durable: bool = False) -> None:
        super().__init__()
        self.path = Path(state_dir) / DB_FILE
        try:
            Path(state_dir).mkdir(parents=True, exist_ok=True)
            self._lock = open(Path(state_dir) / LOCK_FILE, "a+")  # noqa: SIM115 - held open
        except OSError as exc:
            raise SparseError(f"--state-dir {state_dir}: {exc}") from exc
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock.close()
            raise SparseError(
                f"--state-dir {state_dir} is in use by another extender; give each one its own"
                " --state-dir, or share a Redis (--store redis://...) between replicas") from exc
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
        docs = self._db.execute("SELECT pod_uid, doc FROM reservations").fetchall()
        self._load(int(row[0]) if row else 0, {uid: rules.from_json(doc) for uid, doc in docs})
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-ledger")
        self._failed: str | None = None
        log.info("ledger %s: %d reservations (version %d)", self.path, len(self._reservations),
                 self._version)

    def _write(self, version: int, changes: list[Change]) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for uid, reservation in changes:
                if reservation is None:
                    db.execute("DELETE FROM reservations WHERE pod_uid = ?", (uid,))
                else:
                    db.execute("INSERT OR REPLACE INTO reservations VALUES (?, ?)",
                               (uid, rules.to_json(reservation)))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (version,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def _persist(self, changes: list[Change]) -> None:
        if self._failed is not None:
            raise LedgerUnavailable(f"ledger file {self.path} failed earlier: {self._failed}")
        # Submitted before any await: the writer thread sees changes in the order they happened.
        future = asyncio.get_running_loop().run_in_executor(self._writer, self._write,
                                                            self._version, changes)
        try:
            await future
        except sqlite3.Error as exc:
            # Memory is now ahead of the file; refuse further work rather than diverge.
            self._failed = str(exc)
            log.error("writing ledger %s failed: %s", self.path, exc)
            raise LedgerUnavailable(f"writing ledger file {self.path} failed: {exc}") from exc

    async def ping(self) -> None:
        if self._failed is not None:
            raise LedgerUnavailable(f"ledger file {self.path} failed: {self._failed}")

    async def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._db.close()
        self._lock.close()
