"""Where report text may go: loopback and private networks, unless the user opts in."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from radmatch_audit.judges.base import EndpointRefusedError

OPT_IN_HINT = (
    "pass --allow-remote-endpoint (or set RADMATCH_ALLOW_REMOTE_ENDPOINT=1) only if "
    "sending report text to that service is permitted"
)


def _is_private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return ip.is_loopback or ip.is_private or ip.is_link_local


def is_local_endpoint(url: str) -> bool:
    """True when every address the URL's host resolves to is loopback or private."""
    host = urlsplit(url).hostname
    if not host:
        return False
    try:
        return _is_private(host)
    except ValueError:
        pass  # a name, not a literal address
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(_is_private(info[4][0]) for info in infos)


def check_url(url: str) -> str:
    """Return the URL without a trailing slash, or raise ValueError saying what is wrong.

    >>> check_url("http://127.0.0.1:8000/v1/")
    'http://127.0.0.1:8000/v1'
    >>> check_url("http://127.0.0.1:/v1")
    Traceback (most recent call last):
    ...
    ValueError: the judge URL 'http://127.0.0.1:/v1' has an empty port; write it as http://HOST:PORT/v1
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"the judge URL {url!r} is not an http(s) URL with a host; write it as http://HOST:PORT/v1"
        )
    try:
        parts.port
    except ValueError:
        raise ValueError(f"the judge URL {url!r} has an invalid port") from None
    if parts.netloc.endswith(":"):
        raise ValueError(f"the judge URL {url!r} has an empty port; write it as http://HOST:PORT/v1")
    return url.rstrip("/")


def check_endpoint(url: str, *, allow_remote: bool) -> None:
    """Raise EndpointRefusedError when report text would leave the local network unasked."""
    if allow_remote or is_local_endpoint(url):
        return
    host = urlsplit(url).hostname or url
    raise EndpointRefusedError(
        f"refusing to send report text to {host}: it is not a loopback or private-network "
        f"address; {OPT_IN_HINT}"
    )
