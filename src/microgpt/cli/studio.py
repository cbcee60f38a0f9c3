"""`microgpt studio [DIR]`: serve a workspace in the browser: compose a model, train it, watch, compare, sample."""

from __future__ import annotations

from microgpt.cli.common import add_flags_with_defaults
from microgpt.core.errors import ConfigError
from microgpt.core.fields import settings_fields
from microgpt.core.version import install_hint
from microgpt.settings.commands import StudioSettings

STUDIO_EXTRA = f"{install_hint('studio')}: starlette and uvicorn"


def add_parser(commands) -> None:
    p = commands.add_parser("studio", help="compose, train, watch, compare and sample models in the browser",
                            description=__doc__.split(":", 1)[1].strip()
                            + " It prints a URL with a token that every request needs; see docs/studio.md.")
    p.add_argument("directory", metavar="DIR", nargs="?", default=".",
                   help="the workspace: its text files, studio.yaml and checkpoints; without it, the current directory")
    add_flags_with_defaults(p, settings_fields(StudioSettings))
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        import starlette  # noqa: F401 - only to say what is missing, before serving
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"microgpt studio needs {exc.name}: {STUDIO_EXTRA}") from None
    from microgpt.studio.server import serve

    try:
        return serve(args.directory, args.host, args.port, open_browser=args.browser,
                     keep_runs=args.keep_runs)
    except OSError as exc:
        raise ConfigError(str(exc)) from None
