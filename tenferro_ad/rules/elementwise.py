"""(being written)"""

from __future__ import annotations

JVP: dict = {}
TRANSPOSE: dict = {}
