"""Comparing answers of two deployments of one script (embedded vs Kafka mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def stable_without(volatile: set[str]) -> Callable[[Any], Any]:
    """``stable(body)``: the answer without the keys in ``volatile`` (clock readings, random
    ids) at any depth. A command id the script did not give (``cmd-…``) is one the server drew
    or derived from clock readings: it is replaced by a placeholder, as it differs per run."""

    def stable(body: Any) -> Any:
        if isinstance(body, dict):
            out = {k: stable(v) for k, v in body.items() if k not in volatile}
            if isinstance(out.get("command_id"), str) and not out["command_id"].startswith("cmd-"):
                out["command_id"] = "<not the script's>"
            return out
        if isinstance(body, list):
            return [stable(v) for v in body]
        return body

    return stable
