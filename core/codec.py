"""One shape for every versioned encoding the source writes and must read forever.

The offset dict (Spark's offset log), the snapshot manifest (``_manifest.json``) and the
BacklogFinishEvent (the control topic) outlive the release that wrote them. Each declares a
:class:`VersionedCodec`: the version field, the current version, and one upgrade step per
older version, which turns that version's dict into the next version's shape. Decoding reads
the version, refuses what this release does not know with the caller's error type, applies
the steps in order, and hands the current shape to the caller's parser. A stored example of
every released version is read by the unit tests (``tests/fixtures/``), so a step can only
be removed by failing them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: An upgrade step: a dict of version ``n`` -> the same data in version ``n + 1``'s shape.
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class VersionedCodec:
    """The version table of one encoding.

    ``what`` names it in errors (``"offset"``); ``version_field`` is where its version is
    written; ``upgrades`` maps each older version to its step; ``error`` builds the
    exception the encoding's callers expect (one type per encoding) from a message.
    """

    what: str
    version_field: str
    current: int
    error: Callable[[str], Exception]
    upgrades: Mapping[int, Upgrade] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [v for v in range(min(self.upgrades, default=self.current), self.current) if v not in self.upgrades]
        if missing:
            raise ValueError(f"{self.what}: no upgrade step for version(s) {missing}")

    @property
    def supported(self) -> tuple[int, ...]:
        return (*sorted(self.upgrades), self.current)

    def stamp(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` with the current version written first."""
        return {self.version_field: self.current, **data}

    def current_shape(self, data: Any, *, where: str = "", hint: str = "") -> dict[str, Any]:
        """``data`` in the current version's shape. Raises ``error`` when it is not an object
        or its version is not one this release reads; the message starts with ``where``
        (e.g. the file it came from) and ends with ``hint``."""
        prefix = f"{where}: " if where else ""
        if not isinstance(data, dict):
            raise self.error(f"{prefix}a {self.what} must be a JSON object, got {type(data).__name__}")
        version = data.get(self.version_field)
        if isinstance(version, bool) or version not in self.supported:
            raise self.error(
                f"{prefix}{self.what} version {version!r} is not understood; this release reads version(s) "
                f"{', '.join(map(str, self.supported))}{hint}"
            )
        while version != self.current:
            data = {**self.upgrades[version](data), self.version_field: version + 1}
            version += 1
        return data
