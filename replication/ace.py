"""MapR Access Control Expressions (ACEs): parse, render canonically, evaluate.

Syntax as on MapR's "ACE Syntax" page: `u:<user>`, `g:<group>`, `r:<role>`, `p` (public,
never combined with anything), `!`, `&`, `|`, parentheses, `""` for nobody, at most 64 KB.
Pure Python, no Django, so the engine and the portal share one definition.

Operator precedence: MapR's page lists the operators but not their precedence, and every
example there parenthesizes mixed `&`/`|`. We use the conventional boolean order (as in C,
Java and Python): `!` binds tightest, then `&`, then `|`, so `u:a | u:b & g:x` means
`u:a | (u:b & g:x)`. The canonical text parenthesizes mixed operators anyway, so what we
store never depends on that choice.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TypeAlias

from accounts.names import NAME_CHARS, NAME_HINT

MAX_BYTES = 65536
MAX_DEPTH = 200
TERM_EXAMPLES = {"u": "u:alice", "g": "g:ops", "r": "r:admin"}
TERM_HINT = "a term such as u:alice, g:ops or r:admin"
NOBODY_TEXT = '""'


class AceError(ValueError):
    """A malformed ACE; .position is the 0-based character offset of the problem,
    .reason the text."""

    position: int
    reason: str

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"invalid ACE at position {position}: {reason}")
        self.position = position
        self.reason = reason

    def __reduce__(self) -> tuple[type[AceError], tuple[int, str]]:
        # The default reduce would replay the formatted message as `position`.
        return (type(self), (self.position, self.reason))


@dataclass(frozen=True)
class Identity:
    user: str
    groups: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in ("groups", "roles"):
            value = getattr(self, name)
            if isinstance(value, str):
                # frozenset("ops") would silently become {"o", "p", "s"}.
                raise TypeError(f"Identity.{name} must be a collection of names, not a string")
            object.__setattr__(self, name, frozenset(value))


@dataclass(frozen=True, slots=True)
class Term:
    kind: str  # "u", "g" or "r"
    name: str


@dataclass(frozen=True, slots=True)
class Public:
    pass


@dataclass(frozen=True, slots=True)
class Nobody:
    pass


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]


Node: TypeAlias = Term | Public | Nobody | Not | And | Or


def _evaluate(node: Node, who: Identity) -> bool:
    # Plain loops, not all()/any() over generators: one Python frame per AST level keeps
    # the deepest accepted expression far from the recursion limit.
    match node:
        case Term(kind="u", name=name):
            return who.user == name
        case Term(kind="g", name=name):
            return name in who.groups
        case Term(name=name):
            return name in who.roles
        case Public():
            return True
        case Nobody():
            return False
        case Not(operand=operand):
            return not _evaluate(operand, who)
        case And(operands=operands):
            for operand in operands:  # noqa: SIM110
                if not _evaluate(operand, who):
                    return False
            return True
        case Or(operands=operands):
            for operand in operands:  # noqa: SIM110
                if _evaluate(operand, who):
                    return True
            return False
    raise TypeError(f"not an ACE node: {node!r}")


def _render(node: Node) -> str:
    match node:
        case Term(kind=kind, name=name):
            return f"{kind}:{name}"
        case Public():
            return "p"
        case Nobody():
            return NOBODY_TEXT
        case Not(operand=operand):
            return "!" + _wrap(operand, _render(operand))
        case And(operands=operands) | Or(operands=operands):
            parts = []
            for operand in operands:
                parts.append(_wrap(operand, _render(operand)))
            return (" & " if isinstance(node, And) else " | ").join(parts)
    raise TypeError(f"not an ACE node: {node!r}")


def _wrap(node: Node, text: str) -> str:
    # Operands of !, & and | are parenthesized whenever they are themselves & or | so the
    # canonical text reads the same under any precedence (MapR documents none).
    return f"({text})" if isinstance(node, And | Or) else text


@dataclass(frozen=True, eq=False)
class Ace:
    """An immutable parsed expression; build it with parse(). Equal when canonical texts are."""

    source: str
    node: Node = field(repr=False)
    _canonical: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_canonical", _render(self.node))

    def allows(self, who: Identity) -> bool:
        return _evaluate(self.node, who)

    def __str__(self) -> str:
        return self._canonical

    def __repr__(self) -> str:
        return f"Ace({self._canonical!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ace):
            return NotImplemented
        return self._canonical == other._canonical

    def __hash__(self) -> int:
        return hash(self._canonical)


NOBODY = Ace(NOBODY_TEXT, Nobody())


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # term, public, not, and, or, lparen, rparen, end
    pos: int
    text: str
    term: Term | None = None


_OPERATORS = {"(": "lparen", ")": "rparen", "!": "not", "&": "and", "|": "or"}


def _shown(text: str) -> str:
    # Keeps messages readable when the offending word is a 60 KB run of letters.
    return text if len(text) <= 24 else text[:24] + "..."


def _describe(token: _Token) -> str:
    return "the end of the ACE" if token.kind == "end" else f"'{_shown(token.text)}'"


def _check_length(text: str) -> None:
    # surrogatepass: lone surrogates must yield an AceError later, not a UnicodeEncodeError.
    if len(text.encode("utf-8", "surrogatepass")) <= MAX_BYTES:
        return
    used = 0
    for index, char in enumerate(text):
        used += len(char.encode("utf-8", "surrogatepass"))
        if used > MAX_BYTES:
            raise AceError(index, "longer than 64 KB (65536 bytes of UTF-8): shorten it")


def _scan_name(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end] in NAME_CHARS:
        end += 1
    return end


def _scan_word(text: str, start: int) -> _Token:
    end = _scan_name(text, start)
    word = text[start:end]
    if end == len(text) or text[end] != ":":
        if word == "p":
            return _Token("public", start, word)
        shown = _shown(word)
        raise AceError(start, f"'{shown}' has no prefix: write u:{shown}, g:{shown} or r:{shown}")
    if word == "p":
        raise AceError(start, "'p' (public) takes no name: write just p")
    if word not in TERM_EXAMPLES:
        reason = f"unknown prefix '{_shown(word)}:': use u: (user), g: (group) or r: (role)"
        raise AceError(start, reason)
    name_end = _scan_name(text, end + 1)
    if name_end == end + 1:
        example = TERM_EXAMPLES[word]
        reason = f"missing name after '{word}:': put it right after the colon, e.g. {example}"
        raise AceError(end + 1, reason)
    term = Term(word, text[end + 1 : name_end])
    return _Token("term", start, text[start:name_end], term)


def _bad_character(text: str, pos: int) -> AceError:
    if text[pos] == '"':
        return AceError(pos, 'quotes are only allowed as the whole ACE "" (nobody): remove them')
    return AceError(pos, f"unexpected character {text[pos]!r}: {NAME_HINT}")


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
        elif char in _OPERATORS:
            tokens.append(_Token(_OPERATORS[char], pos, char))
            pos += 1
        elif char in NAME_CHARS:
            tokens.append(_scan_word(text, pos))
            pos += len(tokens[-1].text)
        else:
            raise _bad_character(text, pos)
    tokens.append(_Token("end", len(text), ""))
    return tokens


def _check_public(tokens: list[_Token]) -> None:
    # MapR rejects p combined with any operator; parentheses around it count as combining.
    publics = [token for token in tokens if token.kind == "public"]
    if publics and len(tokens) > 2:
        reason = "p (public) must stand alone: use p by itself, or name users, groups and roles"
        raise AceError(publics[0].pos, reason)


@dataclass(frozen=True, slots=True)
class _Parsed:
    node: Node
    level: int  # how many '(' and '!' the canonical text nests around its deepest term
    start: int  # source position of its first token, for errors


def _wrapped(item: _Parsed) -> int:
    # The canonical text parenthesizes every & or | that is an operand (see _wrap).
    return item.level + (1 if isinstance(item.node, And | Or) else 0)


def _too_deep(pos: int, level: int, why: str) -> None:
    # Bounding the nesting bounds the recursion of the parser, _evaluate and _render.
    if level > MAX_DEPTH:
        reason = f"nested deeper than {MAX_DEPTH} levels of '(' and '!'{why}: simplify it"
        raise AceError(pos, reason)


def _combine(kind: type[And] | type[Or], items: list[_Parsed]) -> _Parsed:
    if len(items) == 1:
        return items[0]
    flat: list[Node] = []
    level = 0
    for item in items:
        if isinstance(item.node, kind):
            # & and | are associative: (a & b) & c is stored, and written, as a & b & c.
            flat.extend(item.node.operands)
            level = max(level, item.level)
        else:
            # Limited as written canonically too, so str(ace) always parses back.
            _too_deep(item.start, _wrapped(item), " once & inside | is parenthesized")
            flat.append(item.node)
            level = max(level, _wrapped(item))
    return _Parsed(kind(tuple(flat)), level, items[0].start)


def _negate(item: _Parsed, bang: _Token) -> _Parsed:
    level = _wrapped(item) + 1
    _too_deep(bang.pos, level, " once & inside | is parenthesized")
    return _Parsed(Not(item.node), level, bang.pos)


def _expected_term(token: _Token, before: _Token | None) -> AceError:
    where = "at the start" if before is None else f"after '{before.text}'"
    return AceError(token.pos, f"expected {TERM_HINT} {where}, found {_describe(token)}")


def _missing_operator(token: _Token) -> AceError:
    reason = f"missing operator before {_describe(token)}: join terms with & (and) or | (or)"
    return AceError(token.pos, reason)


class _Parser:
    """Recursive descent; only _expression and _unary recurse, two frames per nesting level."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._index = 0

    def parse(self) -> Node:
        parsed = self._expression(0)
        token = self._tokens[self._index]
        if token.kind == "rparen":
            raise AceError(token.pos, "unmatched ')': remove it or add a matching '(' before it")
        if token.kind != "end":
            raise _missing_operator(token)
        return parsed.node

    def _accept(self, kind: str) -> _Token | None:
        token = self._tokens[self._index]
        if token.kind != kind:
            return None
        self._index += 1
        return token

    def _expression(self, depth: int) -> _Parsed:
        # Both precedence levels in one function: an or-list of and-lists.
        disjuncts: list[_Parsed] = []
        while True:
            conjuncts = [self._unary(depth)]
            while self._accept("and"):
                conjuncts.append(self._unary(depth))
            disjuncts.append(_combine(And, conjuncts))
            if not self._accept("or"):
                return _combine(Or, disjuncts)

    def _unary(self, depth: int) -> _Parsed:
        bangs: list[_Token] = []
        while bang := self._accept("not"):
            bangs.append(bang)
            _too_deep(bang.pos, depth + len(bangs), "")
        opening = self._accept("lparen")
        if opening is None:
            parsed = self._leaf()
        else:
            _too_deep(opening.pos, depth + len(bangs) + 1, "")
            inner = self._expression(depth + len(bangs) + 1)
            self._close(opening)
            parsed = _Parsed(inner.node, inner.level, opening.pos)
        for bang in reversed(bangs):
            parsed = _negate(parsed, bang)
        return parsed

    def _leaf(self) -> _Parsed:
        before = self._tokens[self._index - 1] if self._index else None
        token = self._tokens[self._index]
        if token.kind == "term" and token.term is not None:
            self._index += 1
            return _Parsed(token.term, 0, token.pos)
        if token.kind == "public":
            self._index += 1
            return _Parsed(Public(), 0, token.pos)
        raise _expected_term(token, before)

    def _close(self, opening: _Token) -> None:
        token = self._tokens[self._index]
        if token.kind == "end":
            raise AceError(opening.pos, "unclosed '(': add a matching ')'")
        if token.kind != "rparen":
            raise _missing_operator(token)
        self._index += 1


def parse(text: str) -> Ace:
    """Parse an ACE; raises AceError pointing at the offending character."""
    if not isinstance(text, str):
        raise TypeError(f"an ACE is a string, not {type(text).__name__}")
    _check_length(text)
    if text.strip() in ("", NOBODY_TEXT):
        return Ace(text, Nobody())
    tokens = _tokenize(text)
    _check_public(tokens)
    return Ace(text, _Parser(tokens).parse())


_parse_cached = functools.lru_cache(maxsize=256)(parse)


def allows(text: str, who: Identity) -> bool:
    """Whether the ACE text grants access to `who`; raises AceError if the text is malformed."""
    return _parse_cached(text).allows(who)


def default_for(username: str) -> str:
    """The ACE MapR uses when none is given: only the creating user. Raises AceError if the
    name cannot be written as a term (position counts from the start of "u:")."""
    text = f"u:{username}"
    # A full parse would accept "bob | u:eve" and silently widen access; demand one name.
    end = _scan_name(text, 2)
    if end == 2:
        raise AceError(2, "missing name after 'u:': give a user name such as alice")
    if end < len(text):
        raise AceError(end, f"unexpected character {text[end]!r} in the user name: {NAME_HINT}")
    _check_length(text)
    return text


# --- alternatives: an ACE as a list of grants (Kafka's ACLs over ACEs, broker/apis/acls.py) ---


def _alternatives(node: Node) -> tuple[Node, ...]:
    return node.operands if isinstance(node, Or) else () if isinstance(node, Nobody) else (node,)


def granting_terms(text: str) -> list[str]:
    """The ACE's top-level alternatives that are one term or `p`, canonical: each grants on its
    own (`u:alice` of `u:alice | (g:ops & !u:bob)`; the rest grants only in combination)."""
    return [_render(n) for n in _alternatives(parse(text).node) if isinstance(n, Term | Public)]


def with_term(text: str, term: str) -> str:
    """The ACE with the single term `term` (`u:alice`, `g:ops`, `r:admin` or `p`) as one more
    alternative, canonical; unchanged when it grants already. `p` grants everyone alone."""
    current, added = parse(text).node, parse(term).node
    if not isinstance(added, Term | Public):
        raise AceError(0, f"{term!r} is not one term: give u:<user>, g:<group>, r:<role> or p")
    alternatives = _alternatives(current)
    if isinstance(current, Public) or added in alternatives:
        return _render(current)
    if isinstance(added, Public) or not alternatives:
        return _render(added)
    return _render(Or((*alternatives, added)))


def without_term(text: str, term: str) -> str:
    """The ACE with the top-level alternative `term` removed, canonical (`""` when none is
    left); unchanged when `term` is not one of its alternatives."""
    removed = parse(term).node
    kept = [n for n in _alternatives(parse(text).node) if n != removed]
    if not kept:
        return NOBODY_TEXT
    return _render(kept[0] if len(kept) == 1 else Or(tuple(kept)))
