"""The ensemble's primitives: the priors, the routers and the router-weighted mix (to be written)."""

from __future__ import annotations

OPS: list = []
