"""Decoding request bodies off the event loop.

msgspec holds the GIL while it decodes, so a thread does not help: a 50 MB body would stop
every other request (``/healthz`` included) for as long as the decode takes. Bodies above a
threshold are decoded in a worker process instead; small ones, the normal case, inline.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from extender.protocol import BindingArgs, ExtenderArgs, PreemptionArgs, decode_verb

DEFAULT_INLINE_BYTES = 1024 * 1024  # decodes in well under 50 ms inline


class BodyDecoder:
    def __init__(self, inline_bytes: int = DEFAULT_INLINE_BYTES, workers: int = 1) -> None:
        self.inline_bytes = inline_bytes
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:  # spawn: no copy of the event loop's threads and sockets
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    async def decode(self, verb: str, body: bytes) -> ExtenderArgs | BindingArgs | PreemptionArgs:
        if len(body) <= self.inline_bytes:
            return decode_verb(verb, body)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), decode_verb, verb, body)
        except BrokenProcessPool:  # the worker died (e.g. killed for memory): start afresh
            self.close()
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
