"""The studio's last resort: an error that no route expected is one line, never a traceback.

A file the studio cannot read or write (a full disk, a name too long for the file system, a permission)
answers 400 with what and why (`file_error`); anything else answers 500 with the error's one line
(`failure`), which Starlette sends and then raises on to the server, where `LastResort`, an ASGI middleware
inside the guard, prints that one line on stderr instead of letting the server print a traceback. Where an
answer had begun (a stream), the stream ends and the line is printed.
"""

from __future__ import annotations

import sys

from starlette.requests import Request
from starlette.responses import JSONResponse


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


async def file_error(request: Request, exc: OSError) -> JSONResponse:
    where = f"{exc.filename}: " if exc.filename else ""
    return JSONResponse({"error": f"{where}{exc.strerror or one_line(exc)}"}, status_code=400)


async def failure(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"error": failure_line(request.url.path, exc)}, status_code=500)


def failure_line(path: str, exc: BaseException) -> str:
    return f"the studio failed on {path}: {type(exc).__name__}: {one_line(exc)}"


class LastResort:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - answered already (failure); said here in one line
            print(f"microgpt studio: {failure_line(scope.get('path', ''), exc)}", file=sys.stderr, flush=True)
