"""Dead code elimination: drop nodes no output depends on; effectful nodes always stay."""

from __future__ import annotations

from ..graph import dead_code_elimination

__all__ = ["dead_code_elimination"]
