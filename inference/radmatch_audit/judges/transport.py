"""HTTP to a judge server: one aiohttp session, made on first use on the caller's event loop.

Report text goes only where the user pointed: a redirect is never followed (the caller
sees the 3xx and its Location), and proxy variables (HTTP_PROXY, ALL_PROXY, ...) are
ignored unless `allow_proxy` is given. The API key lives only in the request headers:
never in a repr. (aiohttp, not httpx: httpx's pool scans every connection for every
request, which made 64 calls in flight CPU-bound.)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

QUICK_S = 10.0  # deadline of the pre-flight's small requests, and of every connect


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Any  # case-insensitive, as aiohttp gives them
    content: bytes


class Unreachable(Exception):
    """No reply: the connection was refused, reset or cut short, or the deadline passed."""

    def __init__(self, cause: BaseException, elapsed_s: float) -> None:
        super().__init__(type(cause).__name__)
        self.cause = cause
        self.elapsed_s = elapsed_s

    @property
    def timed_out(self) -> bool:
        return isinstance(self.cause, asyncio.TimeoutError)


class HttpTransport:
    """POST and GET with a deadline, no redirect followed, proxies only on opt-in."""

    def __init__(self, *, timeout_s: float, api_key: str | None = None, allow_proxy: bool = False) -> None:
        self.timeout_s = timeout_s
        self._allow_proxy = allow_proxy  # a proxy is somewhere else: same opt-in as a remote host
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._http: Any = None  # an aiohttp.ClientSession, made on first use

    def __repr__(self) -> str:
        return f"HttpTransport(timeout_s={self.timeout_s!r})"

    def _client(self) -> Any:
        if self._http is None:
            import aiohttp

            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),  # the run loop bounds the calls
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, connect=min(QUICK_S, self.timeout_s)),
                trust_env=self._allow_proxy,
                auto_decompress=True,
                cookie_jar=aiohttp.DummyCookieJar(),  # a judge API sets none; matching them costs per call
            )
        return self._http

    async def post(self, url: str, body: bytes, *, quick: bool = False) -> Reply:
        """The reply to `body` (JSON); `quick` gives it the pre-flight's short deadline."""
        return await self._request("POST", url, body, quick)

    async def get(self, url: str) -> Reply:
        return await self._request("GET", url, None, quick=True)

    async def _request(self, method: str, url: str, body: bytes | None, quick: bool) -> Reply:
        import aiohttp

        options: dict[str, Any] = {"headers": self._headers, "allow_redirects": False}
        if body is not None:
            options["data"] = body
        if quick:
            options["timeout"] = aiohttp.ClientTimeout(total=min(self.timeout_s, QUICK_S))
        started = time.perf_counter()
        try:
            async with self._client().request(method, url, **options) as response:
                return Reply(response.status, response.headers, await response.read())
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # refused, reset, cut short, late
            raise Unreachable(exc, time.perf_counter() - started) from None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
