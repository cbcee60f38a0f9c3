"""This microgpt's version, written into every checkpoint's config.json and shown by `microgpt --version`, and
the name it is installed by.

The distribution is `microgpt-kit` (pyproject.toml's [project] name): `microgpt` on PyPI is another project's,
so this one could never be published under it. What a user imports (`import microgpt`) and runs (the
`microgpt` command) keep the short name. `install_hint` is how every message asks for an extra.
"""

__version__ = "0.1.0"
DISTRIBUTION = "microgpt-kit"


def install_hint(extra: str) -> str:
    """The command that installs an extra, from the package index and from a checkout."""
    return f'pip install "{DISTRIBUTION}[{extra}]" (in a checkout: pip install -e ".[{extra}]")'
