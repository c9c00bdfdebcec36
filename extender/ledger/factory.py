"""Settings -> the ledger store (and the Redis options the demand source shares)."""

from __future__ import annotations

import os

from extender.config import Settings
from extender.errors import SparseError
from extender.ledger.connect import RedisOptions
from extender.ledger.memory import MemoryLedger
from extender.ledger.redis import RedisLedger
from extender.ledger.sqlite import SqliteLedger, default_state_dir
from extender.ledger.store import LedgerStore

PASSWORD_ENV = "SPARSE_REDIS_PASSWORD"


def redis_password(settings: Settings) -> str | None:
    """--redis-password-file, else $SPARSE_REDIS_PASSWORD, else none."""
    if settings.redis_password_file is not None:
        try:
            text = settings.redis_password_file.read_text().strip()
        except OSError as exc:
            raise SparseError(f"--redis-password-file: {exc}") from exc
        return text or None
    return os.environ.get(PASSWORD_ENV) or None


def redis_options(settings: Settings) -> RedisOptions:
    return RedisOptions(
        password=redis_password(settings),
        socket_timeout_s=settings.redis_socket_timeout_s,
        connect_timeout_s=settings.redis_connect_timeout_s,
        pool_size=settings.redis_pool_size,
        pool_wait_s=settings.redis_pool_wait_s,
        min_replicas=settings.redis_min_replicas,
    )


def open_ledger(settings: Settings) -> LedgerStore:
    if settings.store == "memory":
        return MemoryLedger()
    if settings.store == "sqlite":
        return SqliteLedger(settings.state_dir or default_state_dir())
    return RedisLedger.from_url(settings.store, options=redis_options(settings))
