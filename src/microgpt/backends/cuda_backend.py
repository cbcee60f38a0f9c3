"""A stand-in for the module that became the package `cuda/`, kept only while memory.py imports
FLASH_MAX_WIDTH from here; delete it when memory.py asks `Backend.attention_memory` instead."""

from __future__ import annotations

from microgpt.backends.cuda.attention import FLASH_MAX_WIDTH

__all__ = ["FLASH_MAX_WIDTH"]
