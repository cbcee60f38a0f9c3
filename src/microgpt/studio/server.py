"""Serving a studio: the workspace's lock, a port, the printed URL with its token, and a clean stop.

`serve` binds (127.0.0.1 unless told otherwise, and then it warns), takes the workspace's studio lock (a
second studio there is refused), prints `http://HOST:PORT/?token=...`, opens a browser where one exists, and
serves until Ctrl-C, SIGTERM or SIGHUP (a closed terminal). As the server begins to stop, the open streams
end themselves (so none is cut off with a traceback); then it stops the runs it started with SIGTERM, so
that each saves (with `keep_runs`, it leaves them training), and releases the lock. Runs of the workspace
still training from an earlier studio are named as it starts, and can be stopped from the page.
"""

from __future__ import annotations

import gc
import secrets
import signal
import socket
import sys
import webbrowser

import uvicorn

from microgpt.studio.app import Studio
from microgpt.studio.workspace import StudioLock, Workspace

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port") from None
    sock.listen(64)
    return sock


def stop_serving(signum, frame) -> None:
    raise KeyboardInterrupt


class StudioServer(uvicorn.Server):
    """uvicorn's server, which tells the studio's streams to end as soon as it is asked to stop."""

    def __init__(self, studio: Studio):
        super().__init__(uvicorn.Config(studio.app, log_level="warning", timeout_graceful_shutdown=2,
                                        lifespan="off"))
        self.studio = studio

    def handle_exit(self, sig, frame) -> None:
        self.studio.stopping = True
        super().handle_exit(sig, frame)


def url_of(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def serve(directory: str, host: str = "127.0.0.1", port: int = 8765, open_browser: bool = True,
          keep_runs: bool = False, out=sys.stdout) -> int:
    workspace = Workspace(directory)
    sock = bind(host, port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(24)
    url = url_of(host, port, token)
    lock = StudioLock(workspace).acquire(url)
    studio = Studio(workspace, token, host, port)
    server = StudioServer(studio)
    gc.freeze()  # what is loaded by now lives as long as the server: no full collection walks it again, which
    # held up the check of the edit in hand (docs/benchmarks.md, the studio)
    signal.signal(signal.SIGTERM, stop_serving)  # uvicorn hands a SIGTERM on to this once it has shut down
    signal.signal(signal.SIGHUP, lambda signum, frame: server.handle_exit(signal.SIGTERM, frame))  # as SIGTERM
    try:  # from here a Ctrl-C, even one before uvicorn has started, stops as below
        if host not in LOOPBACK:
            print(f"microgpt studio: warning: serving on {host}, beyond this machine: anyone who can reach it and "
                  "learns the token can train, read and write in the workspace", file=sys.stderr)
        print(f"microgpt studio: serving {workspace.root} at {url}", file=out, flush=True)
        if open_browser:
            try:
                webbrowser.get()
            except webbrowser.Error:
                pass  # no browser here: the URL above is the way in
            else:
                webbrowser.open(url)
        for other in studio.manager.others():
            print(f"microgpt studio: run {other['name']} is training in process {other['pid']}, which this studio "
                  "did not start; the page can stop it", file=out)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # Ctrl-C or SIGTERM, which uvicorn raises again after its shutdown: stop as asked
    finally:
        studio.stopping = True
        if keep_runs:
            live = [state for state in studio.manager.states() if state["running"]]
            for state in live:
                print(f"microgpt studio: leaving run {state['name']} training (process {state['pid']})", file=out)
        else:
            studio.manager.stop_all()
        lock.release()
        sock.close()
    print("microgpt studio: stopped", file=out, flush=True)
    return 0
