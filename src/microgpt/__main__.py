"""`python -m microgpt`: the same command line as the `microgpt` script."""

from microgpt.cli import main

raise SystemExit(main())
