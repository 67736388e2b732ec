"""MapR access control expressions: parsing, errors, canonical text, evaluation."""

from __future__ import annotations

import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.ace import (
    MAX_BYTES,
    MAX_DEPTH,
    NOBODY,
    Ace,
    AceError,
    And,
    Identity,
    Node,
    Not,
    Or,
    Term,
    allows,
    default_for,
    parse,
)

ALICE = Identity("alice", frozenset({"ops", "dev"}), frozenset({"admin"}))
BOB = Identity("bob", frozenset({"qa"}))
CAROL = Identity("carol", roles=frozenset({"eng"}))
UID = Identity("1001", frozenset({"first.last@example.com", "dom$users"}))
EVERYONE = {"alice": ALICE, "bob": BOB, "carol": CAROL, "1001": UID}

VALID = [
    ("u:alice", {"alice"}),
    ("g:ops", {"alice"}),
    ("r:eng", {"carol"}),
    ("p", set(EVERYONE)),
    ("  p\t", set(EVERYONE)),
    ("", set()),
    ('""', set()),
    ('  ""  ', set()),
    (" \t\n ", set()),
    # & binds tighter than |: read as carol | (bob & ops); (carol | bob) & ops allows nobody.
    ("u:carol | u:bob & g:ops", {"carol"}),
    ("u:bob & g:ops | u:carol", {"carol"}),
    # ! binds tighter than &: read as (!alice) & qa; !(alice & qa) would allow everyone.
    ("!u:alice & g:qa", {"bob"}),
    ("!u:alice | g:ops", set(EVERYONE)),
    ("u:bob | g:ops & !r:admin", {"bob"}),
    ("!(u:alice | u:bob)", {"carol", "1001"}),
    ("(u:alice | u:bob) & !g:qa", {"alice"}),
    ("((((g:qa))))", {"bob"}),
    ("!!u:alice", {"alice"}),
    ("g:ops & g:dev & r:admin", {"alice"}),
    ("u:alice&g:ops|u:bob&g:qa", {"alice", "bob"}),
    ("  u:alice|u:bob  ", {"alice", "bob"}),
    ("u:alice\t&\ng:ops", {"alice"}),
    ("(\tu:bob )", {"bob"}),
    ("u:1001", {"1001"}),
    ("g:first.last@example.com & g:dom$users", {"1001"}),
    ("u:nobody_here | g:missing-group", set()),
    ("u:carol | (g:ops & !g:dev) | (g:qa & (r:app2 | r:app3)) | (g:ba & g:dept_7a)", {"carol"}),
]


@pytest.mark.parametrize(("text", "allowed"), VALID)
def test_valid_expression_allows_exactly(text: str, allowed: set[str]) -> None:
    ace = parse(text)
    granted = {name for name, who in EVERYONE.items() if ace.allows(who)}
    assert granted == allowed
    assert {name for name, who in EVERYONE.items() if allows(text, who)} == allowed


INVALID = [
    ("u:alice &", 9, "after '&', found the end of the ACE"),
    ("& u:a", 0, "at the start"),
    ("u:a & | u:b", 6, "expected a term such as u:alice"),
    ("u:a && u:b", 5, "after '&', found '&'"),
    ("(u:a | u:b", 0, "unclosed '(': add a matching ')'"),
    ("u:a | (u:b & (g:c)", 6, "unclosed '('"),
    ("u:a)", 3, "unmatched ')'"),
    ("()", 1, "after '(', found ')'"),
    ("u:a u:b", 4, "missing operator before 'u:b'"),
    ("u:a (u:b)", 4, "missing operator before '('"),
    ("u:a !u:b", 4, "missing operator before '!'"),
    ("(u:a u:b)", 5, "missing operator"),
    ("x:bob", 0, "unknown prefix 'x:'"),
    ("U:alice", 0, "unknown prefix 'U:'"),
    ("u:a | user:bob", 6, "unknown prefix 'user:'"),
    ("u:", 2, "missing name after 'u:'"),
    ("g:ops & u: alice", 10, "missing name after 'u:'"),
    ("alice", 0, "'alice' has no prefix: write u:alice"),
    ("p | u:a", 0, "p (public) must stand alone"),
    ("u:a & p", 6, "p (public) must stand alone"),
    ("!p", 1, "p (public) must stand alone"),
    ("(p)", 1, "p (public) must stand alone"),
    ("p p", 0, "p (public) must stand alone"),
    ("p:x", 0, "'p' (public) takes no name"),
    ("u:a # u:b", 4, "unexpected character '#'"),
    ("u:alice:x", 7, "unexpected character ':'"),
    ('u:a | ""', 6, "quotes are only allowed as the whole ACE"),
    ('"u:a"', 0, "quotes"),
    ("!", 1, "after '!', found the end of the ACE"),
    ("u:a\n|", 5, "after '|'"),
    ("u:a | ", 6, "after '|'"),
    ("u:élise", 2, "missing name"),
    ("u:al\u00e9", 4, "unexpected character"),
]


@pytest.mark.parametrize(("text", "position", "fragment"), INVALID)
def test_invalid_expression_points_at_problem(text: str, position: int, fragment: str) -> None:
    with pytest.raises(AceError) as caught:
        parse(text)
    assert caught.value.position == position
    assert fragment in caught.value.reason
    assert str(caught.value) == f"invalid ACE at position {position}: {caught.value.reason}"


def test_error_is_a_value_error_and_survives_pickling() -> None:
    with pytest.raises(ValueError) as caught:
        parse("u:alice &")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(copy, AceError)
    assert (copy.position, copy.reason, str(copy)) == (9, caught.value.reason, str(caught.value))


def test_allows_reports_malformed_text() -> None:
    with pytest.raises(AceError):
        allows("u:alice |", ALICE)


def test_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        parse(None)  # type: ignore[arg-type]


CANONICAL = [
    ("u:a|(g:b&!r:c)", "u:a | (g:b & !r:c)"),
    ("u:a | g:b & !r:c", "u:a | (g:b & !r:c)"),
    ("((u:a))", "u:a"),
    ("u:a & (u:b & u:c)", "u:a & u:b & u:c"),
    ("(u:a | u:b) | u:c", "u:a | u:b | u:c"),
    ("!(u:a|u:b)", "!(u:a | u:b)"),
    ("! ! u:a", "!!u:a"),
    ("!(!u:a)", "!!u:a"),
    ("(u:a | u:b)&u:c", "(u:a | u:b) & u:c"),
    ("", '""'),
    ("  ", '""'),
    ('""', '""'),
    (" p ", "p"),
]


@pytest.mark.parametrize(("text", "canonical"), CANONICAL)
def test_canonical_text_round_trips(text: str, canonical: str) -> None:
    ace = parse(text)
    assert str(ace) == canonical
    assert parse(canonical) == ace
    assert str(parse(canonical)) == canonical
    assert ace.source == text


def test_equality_is_by_canonical_form() -> None:
    assert parse("u:a|u:b") == parse(" (u:a) | u:b ")
    assert hash(parse("u:a|u:b")) == hash(parse("(u:a)|(u:b)"))
    assert parse("u:a | u:b") != parse("u:b | u:a")
    assert parse("") == NOBODY == parse('""')
    assert parse("u:a") != "u:a"
    assert repr(parse("u:a|u:b")) == "Ace('u:a | u:b')"


def test_nobody_allows_no_one() -> None:
    assert str(NOBODY) == '""'
    assert not any(NOBODY.allows(who) for who in EVERYONE.values())


def test_identity_normalizes_collections() -> None:
    who = Identity("alice", {"ops"}, ["admin"])  # type: ignore[arg-type]
    assert who.groups == frozenset({"ops"})
    assert who.roles == frozenset({"admin"})
    assert allows("g:ops & r:admin", who)
    with pytest.raises(TypeError):
        Identity("alice", "ops")  # type: ignore[arg-type]


def test_default_for_is_the_owner_only() -> None:
    assert default_for("alice") == "u:alice"
    assert allows(default_for("alice"), ALICE)
    assert not allows(default_for("alice"), BOB)


@pytest.mark.parametrize(
    ("username", "position"), [("", 2), ("bob | u:eve", 5), ("a b", 3), ("x)", 3)]
)
def test_default_for_refuses_names_that_are_not_one_term(username: str, position: int) -> None:
    with pytest.raises(AceError) as caught:
        default_for(username)
    assert caught.value.position == position


def test_length_limit_is_64_kb_of_utf8() -> None:
    largest = "u:" + "a" * (MAX_BYTES - 2)
    assert parse(largest).allows(Identity("a" * (MAX_BYTES - 2)))
    with pytest.raises(AceError) as caught:
        parse(largest + "a")
    assert caught.value.position == MAX_BYTES
    assert "64 KB" in caught.value.reason


def test_length_limit_counts_bytes_not_characters() -> None:
    with pytest.raises(AceError) as caught:
        parse("é" * 40000)  # two bytes each: the 32769th character crosses 65536 bytes
    assert caught.value.position == MAX_BYTES // 2
    assert "64 KB" in caught.value.reason


def test_long_flat_expression_needs_no_recursion() -> None:
    text = " | ".join(f"u:user{i}" for i in range(5000))
    ace = parse(text)
    assert ace.allows(Identity("user4999"))
    assert not ace.allows(Identity("user5000"))
    assert parse(str(ace)) == ace


def test_nesting_up_to_the_limit_is_accepted() -> None:
    ace = parse("(" * MAX_DEPTH + "u:a" + ")" * MAX_DEPTH)
    assert str(ace) == "u:a"
    assert parse("!" * MAX_DEPTH + "u:a").allows(Identity("a"))
    mixed = "(!" * (MAX_DEPTH // 2) + "u:a" + ")" * (MAX_DEPTH // 2)
    assert parse(mixed).allows(Identity("a"))


def _alternating(levels: int) -> str:
    # Each level is an | holding an &, which the canonical text parenthesizes: two levels
    # of nesting there per '(' here, and two AST levels for render and evaluate.
    return "(u:a | u:b & " * levels + "u:c" + ")" * levels


def test_deepest_canonical_tree_renders_evaluates_and_parses_back() -> None:
    ace = parse(_alternating(MAX_DEPTH // 2))
    assert ace.allows(Identity("a"))
    assert not ace.allows(Identity("c"))
    assert parse(str(ace)) == ace
    assert str(ace).startswith("u:a | (u:b & (u:a | (u:b & ")


def test_nesting_is_limited_as_written_canonically() -> None:
    with pytest.raises(AceError) as caught:
        parse(_alternating(MAX_DEPTH // 2 + 1))
    assert caught.value.position == len("(u:a | ")
    assert "once & inside | is parenthesized" in caught.value.reason
    with pytest.raises(AceError) as caught:
        parse("!" * (MAX_DEPTH - 1) + "(u:a | u:b & u:c)")
    assert caught.value.position == 0


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("(" * (MAX_DEPTH + 1) + "u:a" + ")" * (MAX_DEPTH + 1), MAX_DEPTH),
        ("!" * (MAX_DEPTH + 1) + "u:a", MAX_DEPTH),
        ("!(" * MAX_DEPTH + "u:a" + ")" * MAX_DEPTH, MAX_DEPTH),
        ("(" * 30000, MAX_DEPTH),
        ("!" * 60000, MAX_DEPTH),
    ],
)
def test_too_deep_nesting_is_an_ace_error(text: str, position: int) -> None:
    with pytest.raises(AceError) as caught:
        parse(text)
    assert caught.value.position == position
    assert f"deeper than {MAX_DEPTH}" in caught.value.reason


# --- property tests -------------------------------------------------------------------------

NAMES = ["alice", "bob", "ops", "x.y", "d-1", "e@f", "$g", "_h", "1001"]
WHITESPACE = st.sampled_from(["", "", " ", "  ", "\t", "\n", " \r\n "])

terms = st.builds(Term, st.sampled_from("ugr"), st.sampled_from(NAMES))
trees: st.SearchStrategy[Node] = st.recursive(
    terms,
    lambda children: st.one_of(
        st.builds(Not, children),
        st.builds(And, st.lists(children, min_size=2, max_size=4).map(tuple)),
        st.builds(Or, st.lists(children, min_size=2, max_size=4).map(tuple)),
    ),
    max_leaves=12,
)
identities = st.builds(
    Identity,
    st.sampled_from(NAMES),
    st.frozensets(st.sampled_from(NAMES)),
    st.frozensets(st.sampled_from(NAMES)),
)


def render(node: Node, draw: st.DrawFn) -> str:
    """Text for `node` with random whitespace and random redundant parentheses."""
    ws = draw(WHITESPACE)
    match node:
        case Term(kind=kind, name=name):
            text = f"{kind}:{name}"
        case Not(operand=operand):
            text = "!" + ws + operand_text(operand, isinstance(operand, And | Or), draw)
        case And(operands=operands):
            parts = [operand_text(child, isinstance(child, Or), draw) for child in operands]
            text = f"{ws}&{draw(WHITESPACE)}".join(parts)
        case Or(operands=operands):
            parts = [operand_text(child, False, draw) for child in operands]
            text = f"{ws}|{draw(WHITESPACE)}".join(parts)
    return operand_text_wrap(text, draw(st.integers(0, 9)) == 0, draw)


def operand_text(node: Node, needs_parens: bool, draw: st.DrawFn) -> str:
    return operand_text_wrap(render(node, draw), needs_parens, draw)


def operand_text_wrap(text: str, wrap: bool, draw: st.DrawFn) -> str:
    return f"({draw(WHITESPACE)}{text}{draw(WHITESPACE)})" if wrap else text


@st.composite
def rendered(draw: st.DrawFn) -> str:
    return draw(WHITESPACE) + render(draw(trees), draw) + draw(WHITESPACE)


REFERENCE_TOKEN = re.compile(r"([ugr]):([A-Za-z0-9_.@$-]+)|[!&|]|\s+")
REFERENCE_TERM = {"u": "(user == {!r})", "g": "({!r} in groups)", "r": "({!r} in roles)"}
REFERENCE_OPERATOR = {"!": " not ", "&": " and ", "|": " or "}


def reference_allows(text: str, who: Identity) -> bool:
    """An independent evaluator: Python's own not/and/or precedence matches the ACE one."""
    if text.strip() in ("", '""'):
        return False
    if text.strip() == "p":
        return True

    def translate(match: re.Match[str]) -> str:
        if match.group(1):
            return REFERENCE_TERM[match.group(1)].format(match.group(2))
        return REFERENCE_OPERATOR.get(match.group(0), " ")

    python = REFERENCE_TOKEN.sub(translate, text).strip()
    scope = {"user": who.user, "groups": who.groups, "roles": who.roles}
    # Test-only: the text is generated above from a fixed alphabet, never user input.
    return bool(eval(python, {"__builtins__": {}}, scope))


@given(rendered(), st.lists(identities, min_size=1, max_size=8))
@settings(max_examples=300)
def test_parser_agrees_with_reference_evaluator(text: str, people: list[Identity]) -> None:
    ace = parse(text)
    for who in people:
        assert ace.allows(who) == reference_allows(text, who), (text, who)
        assert reference_allows(str(ace), who) == reference_allows(text, who), (str(ace), who)


@given(rendered())
def test_canonical_text_is_a_fixed_point(text: str) -> None:
    canonical = str(parse(text))
    assert parse(canonical) == parse(text)
    assert str(parse(canonical)) == canonical


ACE_ALPHABET = 'ugrpab:!&|() \t"#é'


@given(st.one_of(st.text(), st.text(alphabet=ACE_ALPHABET), rendered()))
@settings(max_examples=500)
def test_arbitrary_text_raises_only_ace_error(text: str) -> None:
    try:
        ace = parse(text)
    except AceError as error:
        assert 0 <= error.position <= len(text)
        assert error.reason
    else:
        assert parse(str(ace)) == ace


@given(st.sampled_from([ALICE, BOB, CAROL, UID]), rendered())
def test_ace_cached_allows_matches_parse(who: Identity, text: str) -> None:
    assert allows(text, who) == parse(text).allows(who)


@given(rendered(), st.sampled_from(["", " ", "\n"]))
def test_parentheses_around_whole_expression_change_nothing(text: str, ws: str) -> None:
    assert parse(f"({ws}{text}{ws})") == parse(text)
    assert isinstance(parse(text), Ace)
