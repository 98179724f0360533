"""A string enum whose members print as their value, on every supported Python.

Mode, switch method and the like are compared with, logged as, written to JSON and put in
span attributes as their value (``"in-place"``), as when they were plain strings. Python
3.11 has ``enum.StrEnum`` for this; the project supports 3.10.
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """``str(member)``, ``f"{member}"`` and ``json.dumps(member)`` give ``member.value``."""

    __str__ = str.__str__
    __format__ = str.__format__
