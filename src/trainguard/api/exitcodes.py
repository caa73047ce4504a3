"""Sets of exit codes written as "129,101", "1-100" or "1-3,137" (or a number, or a list of those)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

#: The largest code a process can report; the AITrainingJob dialect tolerates larger ones with a warning.
MAX_EXIT_CODE = 255
#: Codes above this are nonsense in any dialect (they do not fit a 32-bit status).
ABSURD_EXIT_CODE = 2**31 - 1


@dataclass(frozen=True)
class ExitCodeSet:
    """Inclusive code ranges, in the order the user wrote them."""

    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, value: object) -> ExitCodeSet:
        """Parse a user-written set; raises ValueError with a message fit for the user."""
        if isinstance(value, ExitCodeSet):
            return value
        if isinstance(value, bool):
            raise ValueError(f'{value!r}: not a code or range (write e.g. "129,101" or "1-3,137")')
        if isinstance(value, int):
            parts: list[str] = [str(value)]
        elif isinstance(value, str):
            parts = value.split(",")
        elif isinstance(value, list | tuple):
            parts = []
            for item in value:
                if isinstance(item, bool) or not isinstance(item, int | str):
                    raise ValueError(f'{item!r}: not a code or range (write e.g. "129,101" or "1-3,137")')
                parts.extend(str(item).split(","))
        else:
            raise ValueError(f'{value!r}: not a code or range (write e.g. "129,101" or "1-3,137")')
        ranges = [_parse_part(part) for part in parts]
        if not ranges:
            raise ValueError('empty: list at least one code, e.g. "137"')
        return cls(_merge(ranges))

    def __contains__(self, code: object) -> bool:
        return isinstance(code, int) and any(lo <= code <= hi for lo, hi in self.ranges)

    @property
    def highest(self) -> int:
        return max(hi for _, hi in self.ranges)

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.parse, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "x-kubernetes-int-or-string": True,
            "description": 'Exit codes: "129,101", a range "1-100", or a mix "1-3,137".',
        }


def _parse_part(part: str) -> tuple[int, int]:
    text = part.strip()
    hint = '(write e.g. "129,101" or "1-3,137")'
    if not text:
        raise ValueError(f"empty entry in the code list {hint}")
    lo_text, sep, hi_text = text.partition("-")
    try:
        lo = int(lo_text.strip())
        hi = int(hi_text.strip()) if sep else lo
    except ValueError:
        raise ValueError(f'"{text}": not a code or range {hint}') from None
    if lo < 0 or hi < 0:
        raise ValueError(f'"{text}": exit codes are not negative')
    if hi < lo:
        raise ValueError(f'"{text}": range runs backwards; write it "{hi}-{lo}"')
    if hi > ABSURD_EXIT_CODE:
        raise ValueError(f'"{text}": exit codes are at most {MAX_EXIT_CODE}')
    return lo, hi


def _merge(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Drop repeats but keep the user's order, so that "129,101" reads back as written."""
    kept: list[tuple[int, int]] = []
    for item in ranges:
        if item not in kept:
            kept.append(item)
    return tuple(kept)


#: Killed by a signal (128+N), including 137 (SIGKILL, OOM) and 143 (SIGTERM): worth retrying by default.
DEFAULT_RETRYABLE = ExitCodeSet(((128, 255),))
