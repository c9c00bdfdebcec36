"""Decoding request bodies off the event loop.

msgspec holds the GIL while it decodes, so a thread does not help: a 50 MB body would stop
every other request (``/healthz`` included) for as long as the decode takes. Bodies above a
threshold go to a worker process (``extender.http.decode_worker``) over a pipe the event loop
writes in slices; small ones, the normal case, are decoded inline. What comes back is small:
full Node objects return as spans of the body this process already holds (echoed from
there), with their annotations only when the request may change the inventory.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import sys

import msgspec

from extender.errors import InvalidRequest
from extender.protocol import BindingArgs, ExtenderArgs, PreemptionArgs, decode_verb

log = logging.getLogger("sparse.offload")

DEFAULT_INLINE_BYTES = 1024 * 1024  # decodes in well under 50 ms inline
WRITE_SLICE = 256 * 1024  # each write is copied into the pipe's buffer: keep it short

Decoded = ExtenderArgs | BindingArgs | PreemptionArgs


class WireExtenderArgs(msgspec.Struct):
    """ExtenderArgs without the raw Node objects (msgpack carries no Raw): their spans."""

    args: ExtenderArgs
    spans: list[tuple[int, int]] | None = None


class WorkerReply(msgspec.Struct, omit_defaults=True):
    error: str | None = None
    extender: WireExtenderArgs | None = None
    binding: BindingArgs | None = None
    preemption: PreemptionArgs | None = None


HEADER = struct.Struct("!16sB Q")  # verb, keep annotations, body size
REPLY_SIZE = struct.Struct("!Q")


class BodyDecoder:
    """One worker process, started on the first big body and restarted if it dies."""

    def __init__(self, inline_bytes: int = DEFAULT_INLINE_BYTES,
                 keep_annotations: bool = False) -> None:
        self.inline_bytes = inline_bytes
        self.keep_annotations = keep_annotations  # only when request inventory is trusted
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._decoder = msgspec.msgpack.Decoder(WorkerReply)
        self._last_filter: tuple[bytes, Decoded] | None = None  # body and its ExtenderArgs
        self.reused = 0  # prioritize bodies answered with filter's decoded args

    async def decode(self, verb: str, body: bytes | bytearray) -> Decoded:
        reused = self._reused(verb, body)
        if reused is not None:
            return reused
        if len(body) <= self.inline_bytes:
            return self._inline(verb, body)
        async with self._lock:  # one body at a time through the pipe
            try:
                reply = await self._exchange(verb, body)
            except (OSError, asyncio.IncompleteReadError) as exc:
                await self.close()  # the worker died (e.g. killed for memory): start afresh
                raise RuntimeError(f"decode worker failed: {exc!r}") from exc
            except BaseException:
                await self.close()  # cancelled mid-exchange: the pipe is out of step
                raise
        args = _unpack(reply, body)
        if verb == "filter":  # the body itself (its Nodes' spans point into it: no copy)
            self._last_filter = (body, args)
        return args

    def _reused(self, verb: str, body: bytes | bytearray) -> Decoded | None:
        """Prioritize normally gets the very body filter got a moment before (the same pod
        and, when every candidate passed, the same names or Node objects): that body's
        ExtenderArgs are reused (nothing downstream changes them), compared byte for byte."""
        if verb != "prioritize":
            return None
        last = self._last_filter
        if last is None or last[0] != body:
            return None
        self.reused += 1
        return last[1]

    def _inline(self, verb: str, body: bytes | bytearray) -> Decoded:
        """Decoded here."""
        args = decode_verb(verb, body)
        if verb == "filter":
            self._last_filter = (bytes(body), args)
        return args

    async def _exchange(self, verb: str, body: bytes | bytearray) -> WorkerReply:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "extender.http.decode_worker",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(HEADER.pack(verb.encode(), int(self.keep_annotations), len(body)))
        view = memoryview(body)
        for start in range(0, len(body), WRITE_SLICE):
            stdin.write(view[start:start + WRITE_SLICE])
            await stdin.drain()
        (size,) = REPLY_SIZE.unpack(await stdout.readexactly(REPLY_SIZE.size))
        return self._decoder.decode(await stdout.readexactly(size))

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()


def _unpack(reply: WorkerReply, body: bytes | bytearray) -> Decoded:
    if reply.error is not None:
        raise InvalidRequest(reply.error)
    if reply.extender is not None:
        args = reply.extender.args
        if reply.extender.spans is not None:
            view = memoryview(body)
            args.raw_nodes = [msgspec.Raw(view[a:b]) for a, b in reply.extender.spans]
        return args
    if reply.binding is not None:
        return reply.binding
    if reply.preemption is not None:
        return reply.preemption
    raise RuntimeError("decode worker sent an empty reply")
