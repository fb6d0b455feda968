"""The SQL92 selector: grammar, RocketMQ's evaluation rules, and refusals with clear reasons."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.filter import PropertyFilterDisabled, SqlFilter, SubscriptionParseError, build_filter
from rocketpy.broker.sql92 import SelectorError, compile_selector, tokenize

#: (expression, properties, matches)
MATCHES: list[tuple[str, dict[str, str], bool]] = [
    ("a > 5 AND color = 'red'", {"a": "10", "color": "red"}, True),
    ("a > 5 AND color = 'red'", {"a": "10", "color": "blue"}, False),
    ("a > 5 AND color = 'red'", {"color": "red"}, False),  # missing property
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-7"}, True),
    ("a <= -5", {"a": "-5"}, True),
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "+5"}, True),  # Integer.valueOf accepts a sign
    ("a <> 5", {"a": "6"}, True),
    ("a <> 5", {}, False),  # NOT of unknown stays unknown
    ("a = 1.5", {"a": "1.5"}, True),
    ("a > 1.5", {"a": "2"}, True),
    ("a > 5", {"a": "5.5"}, False),  # "5.5" is no Java Integer: the expression fails, no match
    ("a > 2147483648", {"a": "2147483649"}, True),  # a Long literal converts the property to long
    ("a > 5", {"a": "2147483649"}, False),  # beyond Integer: fails as in Java
    ("a > 5", {"a": "abc"}, False),
    ("a = 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),  # Java throws for the whole expression
    ("b = 'x' OR a = 5", {"a": "abc", "b": "x"}, True),  # ... unless OR stops before it
    ("a > b", {"a": "10", "b": "9"}, True),  # two strings: compared as doubles
    ("a = b", {"a": "x", "b": "x"}, True),
    ("color = 'red'", {"color": "red"}, True),
    ("color = 'it''s'", {"color": "it's"}, True),
    ("color <> 'red'", {"color": "Red"}, True),
    ("a BETWEEN 1 AND 3", {"a": "1"}, True),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 3", {}, False),
    ("TAGS IN ('TagA', 'TagB')", {"TAGS": "TagB"}, True),
    ("TAGS IN ('TagA', 'TagB')", {"TAGS": "TagC"}, False),
    ("TAGS NOT IN ('TagA')", {"TAGS": "TagC"}, True),
    ("TAGS NOT IN ('TagA')", {}, False),
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": "1"}, False),
    ("a IS NOT NULL", {"a": "1"}, True),
    ("a is not null and a between 0 and 3", {"a": "2"}, True),  # keywords in any case
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, False),
    ("NOT FALSE", {}, True),
    ("NOT (a > 5)", {"a": "1"}, True),
    ("NOT (a > 5)", {}, False),
    ("(a > 5 OR b > 5) AND c = 'x'", {"b": "6", "c": "x"}, True),
    ("a > 5 OR b > 5 AND c = 'x'", {"a": "6"}, True),  # AND binds tighter than OR
    ("flag", {"flag": "true"}, False),  # a bare property is never a boolean: strings are not
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a > -1", {"a": "0"}, True),
    ("a = 5L", {"a": "5"}, True),
    ("a > 1E2", {"a": "101"}, True),
    ("a > 5 -- a comment\n", {"a": "6"}, True),
    ("/* block */ a > 5", {"a": "6"}, True),
]

#: (expression, part of the reason)
REFUSED: list[tuple[str, str]] = [
    ("", "expected a value"),
    ("a >", "found the end"),
    ("a > 5 AND", "found the end"),
    ("(a > 5", "expected )"),
    ("a > 5 b = 3", "expected AND, OR or the end"),  # RocketMQ would ignore the tail
    ("a # 3", "unexpected character '#'"),
    ("a = 'open", "unexpected character"),
    ("NOT a > 5", "NOT binds tighter"),
    ("a = NULL", "'NULL' cannot be compared"),
    ("a > 'x'", "cannot be compared"),
    ("a > TRUE", "cannot be compared"),
    ("TRUE = 5", "cannot be compared with"),
    ("5", "will not result in a boolean"),
    ("'x'", "will not result in a boolean"),
    ("a IN (1, 2)", "expected a quoted string"),
    ("a IN ()", "expected a quoted string"),
    ("5 IN ('x')", "Expected a property"),
    ("a BETWEEN 3 AND 1", "must less than or equal"),
    ("a > 99999999999999999999", "does not fit a long"),
    ("a > 0.0", "is less than"),  # RocketMQ refuses float literals below Double.MIN_VALUE
    ("a > 1e999", "is greater than"),
    ("a IS 5", "expected NULL"),
    ("(" * 5000 + "a > 1" + ")" * 5000, "nested too deeply"),
]


class SelectorTableTests(SynchronousTestCase):
    def test_matches(self) -> None:
        """Every row of the table evaluates as RocketMQ's filter module would."""
        for expression, props, expected in MATCHES:
            with self.subTest(expression=expression, props=props):
                self.assertIs(compile_selector(expression).matches(props), expected)

    def test_refused(self) -> None:
        """Malformed selectors raise SelectorError with RocketMQ's prefix and a readable reason."""
        for expression, reason in REFUSED:
            with self.subTest(expression=expression):
                with self.assertRaises(SelectorError) as caught:
                    compile_selector(expression)
                self.assertTrue(str(caught.exception).startswith("Invalid MessageSelector. "))
                self.assertIn(reason, str(caught.exception))

    def test_unknown_is_not_false(self) -> None:
        """Three-valued logic: a missing property gives unknown (None), which NOT keeps unknown."""
        self.assertIsNone(compile_selector("a > 5").evaluate({}))
        self.assertIsNone(compile_selector("NOT (a > 5)").evaluate({}))
        self.assertIs(compile_selector("a > 5 AND FALSE").evaluate({}), False)
        self.assertIs(compile_selector("a > 5 OR TRUE").evaluate({}), True)

    def test_tokens(self) -> None:
        """Keywords are upper-cased, numbers and strings keep their text."""
        kinds = [(t.kind, t.text) for t in tokenize("x between 1.5 and 2L or y in ('a')")]
        self.assertEqual(
            kinds,
            [("id", "x"), ("keyword", "BETWEEN"), ("float", "1.5"), ("keyword", "AND"), ("int", "2L"),
             ("keyword", "OR"), ("id", "y"), ("keyword", "IN"), ("op", "("), ("string", "'a'"), ("op", ")"),
             ("end", "")],
        )


class BuildFilterTests(SynchronousTestCase):
    def test_sql92_needs_property_filter(self) -> None:
        """Without enablePropertyFilter an SQL92 subscription is refused with Java's remark."""
        with self.assertRaises(PropertyFilterDisabled) as caught:
            build_filter("a > 1", "SQL92", property_filter=False)
        self.assertEqual(str(caught.exception), "The broker does not support consumer to filter message by SQL92")

    def test_compiled_once(self) -> None:
        """The same expression gives the same compiled filter (one compilation per subscription)."""
        first = build_filter("a > 1", "SQL92", True)
        self.assertIsInstance(first, SqlFilter)
        self.assertIs(build_filter(" a > 1 ", "SQL92", True), first)

    def test_malformed_and_unknown_types(self) -> None:
        """A malformed SQL92 expression or an unknown type is a SubscriptionParseError."""
        with self.assertRaises(SubscriptionParseError) as caught:
            build_filter("a >", "SQL92", True)
        self.assertIn("Invalid MessageSelector.", str(caught.exception))
        with self.assertRaises(SubscriptionParseError):
            build_filter("x", "CLASS", True)

    def test_tags_still_work(self) -> None:
        """TAG (or no type) keeps the tag filter."""
        f = build_filter("TagA || TagB", None, True)
        self.assertFalse(isinstance(f, SqlFilter))
        self.assertEqual(f.expression, "TagA || TagB")


#: Pieces selectors are made of, glued at random: most results are malformed.
PIECES = st.sampled_from([
    "a", "b", "TAGS", " ", "(", ")", "=", "<>", ">", ">=", "<", "<=", "AND", "OR", "NOT", "BETWEEN", "IN",
    "IS", "NULL", "TRUE", "FALSE", "1", "-", "2.5", "1E3", "99999999999", "'x'", "'it''s'", ",", "'", "#", "L",
])
PROPS = st.dictionaries(st.sampled_from(["a", "b", "TAGS"]),
                        st.sampled_from(["1", "-3", "2.5", "x", "", "NaN", "99999999999", "true"]))


class SelectorFuzzTests(SynchronousTestCase):
    @settings(max_examples=400, deadline=None)
    @given(st.lists(PIECES, max_size=12).map(" ".join), PROPS)
    def test_never_a_traceback(self, expression: str, props: dict[str, str]) -> None:
        """Any text either compiles or raises SelectorError; a compiled selector answers a bool for any properties."""
        try:
            selector = compile_selector(expression)
        except SelectorError as e:
            self.assertTrue(str(e).startswith("Invalid MessageSelector. "))
            return
        self.assertIn(selector.matches(props), (True, False))
