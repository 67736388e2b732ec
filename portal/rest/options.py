"""Declarative option specs for the maprcli-style commands on /rest.

Each option turns one raw text value into a Python value. Options only convert types (and
keep numbers within 64 bits, so a value can always be stored); ranges and domain rules stay in
the services, so each rule has exactly one home.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from replication import ace
from replication.errors import InvalidInput, NotSupported
from replication.paths import parse_stream_path

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TRUE_WORDS = frozenset({"true", "yes", "1"})
FALSE_WORDS = frozenset({"false", "no", "0"})
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: int() also takes "1_000"


@dataclass(frozen=True)
class Option:
    name: str
    summary: str = ""
    required: bool = False
    # The value a handler receives when the option is absent; None means "not given", so
    # services apply their own defaults (and -copymetafrom is not overridden).
    default: Any = None
    metavar: ClassVar[str] = "<text>"
    kind: ClassVar[str] = "text"
    # False for options accepted only to be refused or ignored: handlers never see them.
    passes_value: ClassVar[bool] = True

    def convert(self, raw: str) -> Any:
        return raw

    def usage(self) -> str:
        text = f"-{self.name} {self.metavar}"
        return text if self.required else f"[ {text} ]"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind,
            "required": self.required,
            "default": self.default,
            "help": self.summary,
        }


@dataclass(frozen=True)
class Str(Option):
    pass


@dataclass(frozen=True)
class StreamPath(Option):
    metavar: ClassVar[str] = "<stream path>"
    kind: ClassVar[str] = "stream path"

    def convert(self, raw: str) -> str:
        # Format only; the lookup goes through Stream.objects.restrict(user) in the handler.
        return str(parse_stream_path(raw, field=self.name))


def parse_bool(name: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise InvalidInput(
        f"-{name} {raw!r} is not a boolean: use true or false (yes/no and 1/0 also work)",
        field=name,
    )


@dataclass(frozen=True)
class Bool(Option):
    metavar: ClassVar[str] = "true|false"
    kind: ClassVar[str] = "boolean"

    def convert(self, raw: str) -> bool:
        return parse_bool(self.name, raw)


@dataclass(frozen=True, kw_only=True)
class Int(Option):
    min: int = INT64_MIN
    max: int = INT64_MAX
    metavar: ClassVar[str] = "<number>"
    kind: ClassVar[str] = "integer"

    def convert(self, raw: str) -> int:
        text = raw.strip()
        if not WHOLE_NUMBER.fullmatch(text):
            raise InvalidInput(f"-{self.name} {raw!r} is not a whole number", field=self.name)
        value = int(text)
        if not self.min <= value <= self.max:
            raise InvalidInput(
                f"-{self.name} {value} is out of range: give {self.min} to {self.max}",
                field=self.name,
            )
        return value


@dataclass(frozen=True, kw_only=True)
class Ratio(Option):
    """A number from 0 to 1 (or -1, when `inherit`: the stream's setting)."""

    inherit: bool = False
    metavar: ClassVar[str] = "<number>"
    kind: ClassVar[str] = "number"

    def convert(self, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            value = -2.0
        if self.inherit and value == -1:
            return value
        if not 0 <= value <= 1:
            raise InvalidInput(f"-{self.name} {raw!r} is not a number from 0 to 1",
                               field=self.name)
        return value


@dataclass(frozen=True, kw_only=True)
class Choice(Option):
    choices: Sequence[str]
    kind: ClassVar[str] = "choice"

    def convert(self, raw: str) -> str:
        word = raw.strip().lower()
        if word not in self.choices:
            raise InvalidInput(
                f"-{self.name} {raw!r} is not one of {', '.join(self.choices)}", field=self.name
            )
        return word

    def usage(self) -> str:
        text = f"-{self.name} {'|'.join(self.choices)}"
        return text if self.required else f"[ {text} ]"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "choices": list(self.choices)}


@dataclass(frozen=True)
class Ace(Option):
    metavar: ClassVar[str] = "<ACE>"
    kind: ClassVar[str] = "access control expression"

    def convert(self, raw: str) -> str:
        # Checked here too so a syntax error is reported before any lookup; the service
        # stores the canonical form.
        try:
            ace.parse(raw)
        except ace.AceError as err:
            raise InvalidInput(f"-{self.name}: {err}", field=self.name) from err
        return raw


@dataclass(frozen=True, kw_only=True)
class Refused(Option):
    """A MapR option streamgate cannot honour: refused with the reason (DESIGN.md invariant 8).

    With `accepts_false`, the value false is accepted, since it asks for what streamgate
    always does (e.g. `-ischangelog false`)."""

    reason: str
    accepts_false: bool = False
    kind: ClassVar[str] = "not supported"
    passes_value: ClassVar[bool] = False

    def convert(self, raw: str) -> None:
        if self.accepts_false and not parse_bool(self.name, raw):
            return None
        raise NotSupported(f"-{self.name} {raw}: {self.reason}", field=self.name)

    def usage(self) -> str:
        return ""  # left out of the usage line: listed by describe() with the reason

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "help": f"not supported: {self.reason}"}


def parse_options(
    options: Sequence[Option], raw: Mapping[str, str], command: str
) -> dict[str, Any]:
    """Convert the raw parameters of one request; every option appears in the result."""
    by_name = {option.name: option for option in options}
    unknown = sorted(set(raw) - set(by_name))
    if unknown:
        valid = ", ".join(f"-{name}" for name in by_name) or "none"
        raise InvalidInput(
            f"unknown option -{unknown[0]} for '{command}': valid options are {valid}",
            field=unknown[0],
        )
    values: dict[str, Any] = {}
    for option in options:
        if option.name in raw:
            value = option.convert(raw[option.name])
        elif option.required:
            hint = f" ({option.summary})" if option.summary else ""
            raise InvalidInput(f"-{option.name} is required for '{command}'{hint}",
                               field=option.name)
        else:
            value = option.default
        if option.passes_value:
            values[option.name] = value
    return values
