"""One check for the config dataclasses: each validates its own fields in `__post_init__`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_fields(section: str, config: Any, checks: Mapping[str, tuple[bool, str]]) -> None:
    """Raise ValueError naming the first failing field: `section.field must be EXPECTED, got V`.

    `checks` maps a field name of `config` to (whether its value is acceptable, what is expected).
    """
    for name, (ok, expected) in checks.items():
        if not ok:
            raise ValueError(f"{section}.{name} must be {expected}, got {getattr(config, name)!r}")
