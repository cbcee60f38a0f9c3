"""The studio's door: every API call must come to this studio's address, from its own pages, with its token.

An ASGI middleware, so that it stands in front of every route, the streams too. A request is refused when
its Host header is not one of the studio's own addresses (against DNS rebinding: a hostile page whose name
resolves to 127.0.0.1 still sends its own name), when its Origin is another site's, when the browser marks
it cross-site, or same-site without being a navigation (a page on another port of this machine is
"same-site"), or when its body is over MAX_BODY_BYTES. An API call (`/api/...`) must also carry the token,
as `?token=` or the `X-Studio-Token` header. No cookie carries it: cookies are not kept apart by port, so
any server on another port of this host that the browser visits would be sent the token. The page and its
files hold no secret and need no token; the page keeps the token of the printed URL in its own origin's
localStorage (kept apart by port), so a reopened tab works. Every answer forbids framing (X-Frame-Options
DENY, CSP frame-ancestors 'none').
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
from urllib.parse import parse_qs

LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
MAX_BODY_BYTES = 1024 * 1024  # the largest request body: a canvas graph is a few kilobytes
NO_FRAMING = [(b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'")]
WILDCARDS = {"0.0.0.0", "::"}  # the addresses that bind every interface


def machine_names() -> set[str]:
    """This machine's host name, its fully qualified name and the addresses the name resolves to."""
    names = {socket.gethostname(), socket.getfqdn()}
    with contextlib.suppress(OSError):
        names |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    return {name for name in names if name}


def studio_hosts(host: str, port: int) -> set[str]:
    """The Host header values that name this studio: its bind address; on loopback, the loopback names; on a
    wildcard (every interface), the loopback names and this machine's own names and addresses, which is what a
    browser elsewhere sends. A hostile name that resolves to this machine is none of them."""
    names = {host}
    if host in LOOPBACK_NAMES:
        names |= LOOPBACK_NAMES
    if host in WILDCARDS:
        names |= LOOPBACK_NAMES | machine_names()
    return {f"[{name}]:{port}" if ":" in name else f"{name}:{port}" for name in names}


class Guard:
    def __init__(self, app, token: str, host: str, port: int):
        self.app, self.token = app, token
        self.hosts = studio_hosts(host, port)
        self.origins = {f"http://{name}" for name in self.hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)

        async def send_unframed(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *NO_FRAMING]}
            await send(message)

        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        refusal = self.refusal(scope.get("path", ""), headers, scope.get("query_string", b"").decode("latin-1"))
        if refusal is not None:
            status, message = refusal
            body = json.dumps({"error": message}).encode()
            await send_unframed({"type": "http.response.start", "status": status,
                                 "headers": [(b"content-type", b"application/json"),
                                             (b"content-length", str(len(body)).encode())]})
            await send_unframed({"type": "http.response.body", "body": body})
            return None
        return await self.app(scope, receive, send_unframed)

    def refusal(self, path: str, headers: dict[str, str], query: str) -> tuple[int, str] | None:
        """(status, why) for a request to refuse, or None for one to serve."""
        host = headers.get("host", "")
        if host not in self.hosts:
            return 403, (f"the Host header {host!r} is not this studio's address ({', '.join(sorted(self.hosts))}); "
                         "open the URL the studio printed")
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return 403, f"a request from {origin!r} is cross-site; the studio answers only its own pages"
        site = headers.get("sec-fetch-site")
        if site == "cross-site" or (site == "same-site" and headers.get("sec-fetch-mode") != "navigate"):
            return 403, f"a {site} request; the studio answers only its own pages"
        length = headers.get("content-length", "0")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return 413, f"the request body is over {MAX_BODY_BYTES:,} bytes; the studio takes small JSON bodies"
        if not self.has_token(path, headers, query):
            return 401, "this studio needs its token: open the URL it printed (http://...?token=...)"
        return None

    def has_token(self, path: str, headers: dict[str, str], query: str) -> bool:
        """An API call's token, as the query or the header gives it; the page and its files need none."""
        if not path.startswith("/api/"):
            return True
        given = (parse_qs(query).get("token") or [""])[0] or headers.get("x-studio-token", "")
        return bool(given) and secrets.compare_digest(given.encode(), self.token.encode())
