"""The studio's routing helper: `python -m microgpt.studio.routing CHECKPOINT --backend B` reads a text on
stdin and prints an ensemble's routing of it as one JSON line (use/routing.py's Routing.as_json).

The studio runs it in a subprocess, as it runs `microgpt sample` and `eval`, so that no model is loaded into
the server; the Sample view colours each generated character by its dominant expert from it. A model
without a router, or any other mistake, is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from microgpt.core.errors import ConfigError, DataError
from microgpt.model.checkpoint import CheckpointError
from microgpt.use.loaded import load

MAX_ROUTED_CHARACTERS = 5_000  # the longest text the page has coloured: past seq_len each position is a window


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m microgpt.studio.routing", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args(argv)
    text = sys.stdin.read()
    try:
        if len(text) > MAX_ROUTED_CHARACTERS:
            raise ConfigError(f"the text is {len(text):,} characters; the studio routes at most "
                              f"{MAX_ROUTED_CHARACTERS:,} (`microgpt eval DIR FILE --routing OUT.csv` routes any)")
        routing = load(args.checkpoint, backend=args.backend, threads=1).routing(text)
    except (ConfigError, DataError, CheckpointError, FileNotFoundError) as exc:
        print(f"routing: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(routing.as_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
