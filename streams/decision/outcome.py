"""What the caller hears about its command, in the dict form replies and audit records carry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the caller hears. ``result`` is applied / skipped / rejected."""

    result: str
    id: int | None = None
    reason: str | None = None
    error: str | None = None  # a stable code for rejections: invalid, not_found, locked, ...
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"result": self.result}
        if self.id is not None:
            d["id"] = self.id
        if self.reason is not None:
            d["reason"] = self.reason
        if self.error is not None:
            d["error"] = self.error
        if self.detail:
            d["detail"] = self.detail
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        return cls(d["result"], d.get("id"), d.get("reason"), d.get("error"), d.get("detail", {}))
