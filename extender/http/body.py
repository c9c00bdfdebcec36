"""Request bodies read with limits: raw and decompressed size, gzip/deflate streamed.

aiohttp's own decompression is switched off (``auto_decompress=False``) so that a bad or
hostile compressed body is a 4xx answered on a connection that stays usable, and a gzip bomb
stops as soon as the decompressed size passes the limit (memory stays bounded by the limit).
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from extender.errors import InvalidRequest, PayloadTooLarge, RequestTimeout, UnsupportedEncoding
from extender.http.admission import BodyHold

DECOMPRESS_STEP = 1024 * 1024  # bytes produced per zlib call: the loop gets a turn in between
# The scheduler gives up on a call after its httpTimeout (5 s by default); a body still
# arriving after this is a slow or hostile sender holding one of the in-flight slots.
READ_TIMEOUT_S = 10.0


def _too_large(limit: int, what: str) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body {what} exceeds {limit // (1024 * 1024)} MiB"
                           " (--max-body-mib)")


def _decompressor(encoding: str) -> zlib._Decompress | None:
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS)
    raise UnsupportedEncoding(f"Content-Encoding {encoding[:40]!r} is not supported"
                              " (identity, gzip or deflate)")


async def read_body(request: web.Request, limit: int, hold: BodyHold | None = None,
                    timeout_s: float | None = None) -> bytes | bytearray:
    """The whole body, decompressed; 413 past ``limit`` bytes (raw or decompressed), 415 for an
    unknown encoding, 400 for a corrupt one, 408 when it takes longer than ``timeout_s``."""
    timeout_s = READ_TIMEOUT_S if timeout_s is None else timeout_s
    content = request.content
    length = request.content_length
    if (length is not None and length <= limit and content.is_eof()
            and "Content-Encoding" not in request.headers):
        # The whole body came with the headers (a scheduling request, on one connection
        # that the scheduler keeps open): nothing to wait for, nothing to decompress.
        body = content.read_nowait()
        if len(body) != length:  # the parser ends a body at its Content-Length: never
            raise InvalidRequest(f"request body of {len(body)} bytes, {length} announced")
        if hold is not None:
            hold.take(len(body))
        return body  # as read (no copy; the decoders take bytes or a bytearray)
    try:
        async with asyncio.timeout(timeout_s):
            return await _read(request, limit, hold)
    except TimeoutError as exc:
        raise RequestTimeout(f"request body not received within {timeout_s:g} s") from exc


async def _read(request: web.Request, limit: int, hold: BodyHold | None) -> bytearray:
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit, f"of {request.content_length} bytes")
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    decompressor = _decompressor(encoding)
    # Filled in place as chunks arrive (no joining copy of a big body at the end).
    buffer = bytearray()
    raw = 0
    try:
        async for chunk in request.content.iter_any():
            raw += len(chunk)
            if raw > limit:
                raise _too_large(limit, "received")
            if decompressor is None:
                if hold is not None:
                    hold.take(len(chunk))
                buffer += chunk
                continue
            data = chunk
            while data:
                out = decompressor.decompress(data, DECOMPRESS_STEP)
                if len(buffer) + len(out) > limit:
                    raise _too_large(limit, "decompressed")
                if hold is not None:
                    hold.take(len(out))
                buffer += out
                data = decompressor.unconsumed_tail
                if data:
                    await asyncio.sleep(0)
    except zlib.error as exc:
        raise InvalidRequest(f"request body is not valid {encoding} data: {exc}") from exc
    except (HttpProcessingError, RequestPayloadError, ConnectionError) as exc:
        raise InvalidRequest(f"request body could not be read: {exc}") from exc  # bad chunking
    if decompressor is not None and (not decompressor.eof or decompressor.unused_data):
        raise InvalidRequest(f"request body is truncated or trailed by garbage ({encoding})")
    return buffer
