"""`microgpt studio [DIR]`: serve a workspace in the browser: compose a model, train it, watch, compare, sample."""

from __future__ import annotations

from microgpt.core.errors import ConfigError

STUDIO_EXTRA = "pip install -e '.[studio]' (starlette, uvicorn and plotly)"


def add_parser(commands) -> None:
    p = commands.add_parser("studio", help="compose, train, watch, compare and sample models in the browser",
                            description=__doc__.split(":", 1)[1].strip()
                            + " It prints a URL with a token that every request needs; see docs/studio.md.")
    p.add_argument("directory", metavar="DIR", nargs="?", default=".",
                   help="the workspace: its text files, studio.yaml and checkpoints (default: the current directory)")
    p.add_argument("--port", type=int, default=8765, metavar="N", help="the port to listen on; 0 picks a free one "
                   "(default: 8765)")
    p.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                   help="the address to listen on; another than 127.0.0.1 serves beyond this machine, with a "
                   "warning (default: 127.0.0.1)")
    p.add_argument("--no-browser", action="store_true", help="print the URL without opening a browser")
    p.add_argument("--keep-runs", action="store_true",
                   help="leave the runs it started training when the studio stops (default: SIGTERM, so they save)")
    p.set_defaults(run=run)


def run(args) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        import plotly  # noqa: F401 - only to say what is missing, before serving
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"microgpt studio needs {exc.name}: {STUDIO_EXTRA}") from None
    from microgpt.studio.server import serve

    try:
        return serve(args.directory, args.host, args.port, open_browser=not args.no_browser,
                     keep_runs=args.keep_runs)
    except OSError as exc:
        raise ConfigError(str(exc)) from None
