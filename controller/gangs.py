"""HTTP client of the extender's gang endpoints (``{prefix}/gangs/reserve`` and ``/release``)."""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp

from controller.errors import GangError

__all__ = ["GangClient", "GangError"]


class GangClient:
    def __init__(self, base_url: str, timeout_s: float = 30.0, ca_file: str | None = None
                 ) -> None:
        """``ca_file``: CA bundle that signed the extender's HTTPS certificate."""
        self.base = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self._session: aiohttp.ClientSession | None = None

    async def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl) if self._ssl else None
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        try:
            async with self._session.post(f"{self.base}{path}", json=payload) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200:
                    raise GangError(f"extender answered {resp.status}: "
                                    f"{(body or {}).get('error', '')}")
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise GangError(f"extender at {self.base} unreachable: {exc}") from exc

    async def reserve(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._post("/gangs/reserve", request)

    async def release(self, job_uid: str, attempt: int | None = None) -> list[str]:
        payload: dict[str, Any] = {"job": job_uid}
        if attempt is not None:
            payload["attempt"] = attempt
        return (await self._post("/gangs/release", payload)).get("released", [])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
