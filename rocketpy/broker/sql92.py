"""RocketMQ's SQL92 message selector: a recursive-descent parser and a three-valued evaluator.

The grammar and the semantics follow ``org.apache.rocketmq.filter`` (``SelectorParser.jj``,
``ComparisonExpression``, ``LogicExpression``, ``UnaryExpression``), itself ActiveMQ's JMS selector
without LIKE and arithmetic::

    selector   := or
    or         := and (OR and)*
    and        := equality (AND equality)*
    equality   := comparison ('=' comparison | '<>' comparison | IS [NOT] NULL)*
    comparison := unary ('>' | '>=' | '<' | '<=' unary | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' string (',' string)* ')')*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := string | integer | float | TRUE | FALSE | NULL | identifier | '(' or ')'

Keywords are case-insensitive; strings are single-quoted (``''`` escapes a quote); integers fit a
Java long (an ``L`` suffix is allowed). As in RocketMQ, ``NOT`` binds tighter than a comparison,
so ``NOT a > 5`` is refused: write ``NOT (a > 5)``.

Evaluation sees the message properties (all strings, ``TAGS`` among them). A missing property is
NULL; a comparison with NULL is NULL (unknown) and the message does not match. A property compared
with a number is converted to that number's Java type (Integer, Long or Double); a string that does
not convert makes the whole expression fail for that message, which then does not match (Java
throws). Two strings compare with ``>``/``<`` only as doubles. Unlike RocketMQ, text after a
complete expression is refused instead of ignored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Union

Value = Union[None, bool, int, float, str]
Properties = Mapping[str, str]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_DOUBLE_MIN = 4.9e-324  # Java's Double.MIN_VALUE: RocketMQ refuses smaller float literals (0.0 too)
_JAVA_INT = re.compile(r"[+-]?\d+")
_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[fFdD]?)")


class SelectorError(ValueError):
    """A selector that does not parse or cannot be evaluated as a whole (compile time)."""


class EvaluationError(ValueError):
    """A message whose properties cannot be compared as the selector asks (it does not match)."""


class Long(int):
    """An integer literal outside Java's int range: a Java ``Long`` (conversions differ)."""


# -- values and Java's comparison rules ---------------------------------------------------


def _java_int(text: str, low: int, high: int) -> int:
    if not _JAVA_INT.fullmatch(text):
        raise EvaluationError(f"{text!r} is not an integer")
    value = int(text)
    if not low <= value <= high:
        raise EvaluationError(f"{text!r} is out of range")
    return value


def _java_double(text: str) -> float:
    stripped = text.strip()
    if not _JAVA_DOUBLE.fullmatch(stripped):
        raise EvaluationError(f"{text!r} is not a number")
    return float(stripped.rstrip("fFdD").replace("Infinity", "inf"))


def _convert(text: str, like: Value) -> Value:
    """``text`` as the Java type of ``like`` (``Integer.valueOf`` and so on)."""
    if isinstance(like, bool):
        return text.lower() == "true"
    if isinstance(like, Long):
        return _java_int(text, _LONG_MIN, _LONG_MAX)
    if isinstance(like, int):
        return _java_int(text, _INT_MIN, _INT_MAX)
    return _java_double(text)


def _order(a: float, b: float) -> int:
    """Java's ``compareTo`` for numbers: NaN is above everything and equal to itself."""
    a_nan, b_nan = a != a, b != b
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    return (a > b) - (a < b)


def compare(lv: Value, rv: Value) -> int:
    """``ComparisonExpression.__compare`` with string conversion on (RocketMQ's setting).

    :raises EvaluationError: when a string does not convert to the other side's type.
    """
    l_num = isinstance(lv, (int, float)) and not isinstance(lv, bool)
    r_num = isinstance(rv, (int, float)) and not isinstance(rv, bool)
    if isinstance(lv, bool) and isinstance(rv, bool):
        return int(lv) - int(rv)
    if isinstance(lv, str) and isinstance(rv, str):
        return (lv > rv) - (lv < rv)
    if l_num and r_num:
        return _order(lv, rv)  # type: ignore[arg-type]
    if isinstance(lv, bool):
        if isinstance(rv, str):  # Java casts the Boolean to String here and throws
            raise EvaluationError("a boolean cannot be compared with a string")
        return -1
    if l_num and isinstance(rv, str):
        return _order(lv, _convert(rv, lv))  # type: ignore[arg-type]
    if isinstance(lv, str) and (r_num or isinstance(rv, bool)):
        converted = _convert(lv, rv)
        return int(converted) - int(rv) if isinstance(rv, bool) else _order(converted, rv)  # type: ignore[arg-type]
    return -1


# -- expression nodes ------------------------------------------------------------------------


class Node:
    """An expression; ``boolean`` nodes may stand where a condition is expected."""

    boolean = False

    def evaluate(self, props: Properties) -> Value:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Constant(Node):
    value: Value

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.value is None or isinstance(self.value, bool)

    def evaluate(self, props: Properties) -> Value:
        return self.value


@dataclass(frozen=True, slots=True)
class Property(Node):
    name: str

    def evaluate(self, props: Properties) -> Value:
        return props.get(self.name)


@dataclass(frozen=True, slots=True)
class Negate(Node):
    operand: Node

    def evaluate(self, props: Properties) -> Value:
        value = self.operand.evaluate(props)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return type(value)(-value)


@dataclass(frozen=True, slots=True)
class BooleanCast(Node):
    """A bare property used as a condition: true only for a boolean TRUE (never for a string)."""

    operand: Node
    boolean = True

    def evaluate(self, props: Properties) -> Value:
        value = self.operand.evaluate(props)
        if value is None:
            return None
        return value is True


@dataclass(frozen=True, slots=True)
class Not(Node):
    operand: Node
    boolean = True

    def evaluate(self, props: Properties) -> Value:
        value = self.operand.evaluate(props)
        return None if value is None else not value


AND, OR = False, True


@dataclass(frozen=True, slots=True)
class Logic(Node):
    """AND (``decisive`` False) and OR (``decisive`` True): a decisive side decides, else unknown wins."""

    decisive: bool
    left: Node
    right: Node
    boolean = True

    def evaluate(self, props: Properties) -> Value:
        lv = self.left.evaluate(props)
        if lv is self.decisive:
            return lv
        rv = self.right.evaluate(props)
        if rv is self.decisive:
            return rv
        return None if lv is None or rv is None else not self.decisive


@dataclass(frozen=True, slots=True)
class Equal(Node):
    """``=`` and ``IS NULL`` (NULL on one side only: unknown when it is the left)."""

    left: Node
    right: Node
    boolean = True

    def evaluate(self, props: Properties) -> Value:
        lv, rv = self.left.evaluate(props), self.right.evaluate(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        if type(lv) is type(rv) and lv == rv:
            return True
        return compare(lv, rv) == 0


_ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


@dataclass(frozen=True, slots=True)
class Ordering(Node):
    """``>``, ``>=``, ``<``, ``<=``: two strings are compared as doubles."""

    op: str
    left: Node
    right: Node
    boolean = True

    def evaluate(self, props: Properties) -> Value:
        lv = self.left.evaluate(props)
        if lv is None:
            return None
        rv = self.right.evaluate(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            lv, rv = _java_double(lv), _java_double(rv)
        return _ORDERINGS[self.op](compare(lv, rv))


@dataclass(frozen=True, slots=True)
class In(Node):
    operand: Property
    values: frozenset[str]
    negated: bool
    boolean = True

    def evaluate(self, props: Properties) -> Value:
        value = self.operand.evaluate(props)
        if not isinstance(value, str):
            return None
        return (value in self.values) != self.negated


# -- tokens ----------------------------------------------------------------------------------

_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_TOKEN = re.compile(
    r"""(?P<space>[ \t\n\r\f]+|--[^\n\r]*|/\*.*?\*/)
      | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
      | (?P<int>(?:0|[1-9]\d*)[lL]?)
      | (?P<string>'(?:''|[^'])*')
      | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
      | (?P<op><>|>=|<=|[=<>(),+-])""",
    re.VERBOSE | re.DOTALL | re.ASCII,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # float int string id op keyword end
    text: str
    pos: int


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token.

    :raises SelectorError: at the first character no token starts with.
    """
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SelectorError(f"unexpected character {text[pos]!r} at position {pos}")
        kind = match.lastgroup or ""
        if kind != "space":
            word = match.group()
            if kind == "id" and word.upper() in _KEYWORDS:
                kind, word = "keyword", word.upper()
            tokens.append(Token(kind, word, pos))
        pos = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


# -- parser ----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self._tokens = tokenize(text)
        self._i = 0

    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._i + ahead, len(self._tokens) - 1)]

    def _at(self, text: str, ahead: int = 0) -> bool:
        token = self._peek(ahead)
        return token.kind in ("op", "keyword") and token.text == text

    def _take(self) -> Token:
        token = self._peek()
        self._i += 1
        return token

    def _expect(self, text: str) -> Token:
        if not self._at(text):
            self._fail(f"expected {text}")
        return self._take()

    def _fail(self, what: str) -> None:
        token = self._peek()
        found = "the end" if token.kind == "end" else repr(token.text)
        raise SelectorError(f"{what}, found {found} at position {token.pos}")

    def selector(self) -> Node:
        node = self._or()
        if self._peek().kind != "end":
            self._fail("expected AND, OR or the end")
        return _as_boolean(node)

    def _or(self) -> Node:
        left = self._and()
        while self._at("OR"):
            self._take()
            left = Logic(OR, _as_boolean(left), _as_boolean(self._and()))
        return left

    def _and(self) -> Node:
        left = self._equality()
        while self._at("AND"):
            self._take()
            left = Logic(AND, _as_boolean(left), _as_boolean(self._equality()))
        return left

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            if self._at("=") or self._at("<>"):
                op = self._take().text
                right = self._comparison()
                _check_equal_operands(left, right)
                left = Equal(left, right) if op == "=" else Not(Equal(left, right))
            elif self._at("IS"):
                self._take()
                negated = self._at("NOT")
                if negated:
                    self._take()
                self._expect("NULL")
                left = Not(Equal(left, Constant(None))) if negated else Equal(left, Constant(None))
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            if self._peek().text in _ORDERINGS and self._peek().kind == "op":
                op = self._take().text
                left = _ordering(op, left, self._unary())
            elif self._at("BETWEEN") or (self._at("NOT") and self._at("BETWEEN", 1)):
                left = self._between(left)
            elif self._at("IN") or (self._at("NOT") and self._at("IN", 1)):
                left = self._in(left)
            else:
                return left

    def _between(self, value: Node) -> Node:
        negated = self._at("NOT")
        self._i += 2 if negated else 1
        low = self._unary()
        self._expect("AND")
        high = self._unary()
        if negated:
            return Logic(OR, _ordering("<", value, low), _ordering(">", value, high))
        if isinstance(low, Constant) and isinstance(high, Constant):
            if low.value is None or high.value is None:
                raise SelectorError("Illegal values of between, values can not be null!")
            if compare(high.value, low.value) < 0:
                raise SelectorError(
                    f"Illegal values of between, left value({low.value}) must less than or equal to "
                    f"right value({high.value})"
                )
        return Logic(AND, _ordering(">=", value, low), _ordering("<=", value, high))

    def _in(self, value: Node) -> Node:
        negated = self._at("NOT")
        self._i += 2 if negated else 1
        if not isinstance(value, Property):
            raise SelectorError(f"Expected a property for In expression, got: {value}")
        self._expect("(")
        values = [self._string()]
        while self._at(","):
            self._take()
            values.append(self._string())
        self._expect(")")
        return In(value, frozenset(values), negated)

    def _string(self) -> str:
        if self._peek().kind != "string":
            self._fail("expected a quoted string")
        return _unquote(self._take().text)

    def _unary(self) -> Node:
        if self._at("+"):
            self._take()
            return self._unary()
        if self._at("-"):
            self._take()
            return Negate(self._unary())
        if self._at("NOT"):
            self._take()
            return Not(_as_boolean(self._unary()))
        return self._primary()

    def _primary(self) -> Node:
        token = self._peek()
        if token.kind == "string":
            return Constant(_unquote(self._take().text))
        if token.kind == "int":
            return Constant(_integer(self._take().text))
        if token.kind == "float":
            return Constant(_float(self._take().text))
        if token.kind == "id":
            return Property(self._take().text)
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE", "NULL"):
            self._take()
            return Constant({"TRUE": True, "FALSE": False, "NULL": None}[token.text])
        if self._at("("):
            self._take()
            node = self._or()
            self._expect(")")
            return node
        self._fail("expected a value, a property or '('")
        raise AssertionError("unreachable")


def _unquote(text: str) -> str:
    return text[1:-1].replace("''", "'")


def _integer(text: str) -> int:
    value = int(text.rstrip("lL"))
    if value > _LONG_MAX:
        raise SelectorError(f"{text} does not fit a long")
    return value if value <= _INT_MAX else Long(value)


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise SelectorError(f"{text} is greater than {1.7976931348623157e308}")
    if value < _DOUBLE_MIN:
        raise SelectorError(f"{text} is less than {_DOUBLE_MIN}")
    return value


def _describe(node: Node) -> str:
    if isinstance(node, Constant):
        return "NULL" if node.value is None else repr(node.value)
    if isinstance(node, Property):
        return node.name
    if isinstance(node, Not):
        return f"NOT {_describe(node.operand)}"
    if isinstance(node, BooleanCast):
        return _describe(node.operand)
    return type(node).__name__.upper()


def _as_boolean(node: Node) -> Node:
    if node.boolean:
        return node
    if isinstance(node, Property):
        return BooleanCast(node)
    raise SelectorError(f"Expression will not result in a boolean value: {_describe(node)}")


def _ordering(op: str, left: Node, right: Node) -> Node:
    for side in (left, right):
        constant_number = isinstance(side, Constant) and not side.boolean and not isinstance(side.value, str)
        if (isinstance(side, Constant) and not constant_number) or (side.boolean and not isinstance(side, Constant)):
            hint = " (NOT binds tighter than a comparison: write NOT (a > 5))" if isinstance(side, Not) else ""
            raise SelectorError(f"Value '{_describe(side)}' cannot be compared.{hint}")
    return Ordering(op, left, right)


def _check_equal_operands(left: Node, right: Node) -> None:
    for side in (left, right):
        if isinstance(side, Constant) and side.value is None:
            raise SelectorError("'NULL' cannot be compared.")
    if isinstance(left, Constant) and isinstance(right, Constant) and left.boolean and not right.boolean:
        raise SelectorError(f"'{_describe(left)}' cannot be compared with '{_describe(right)}'")


# -- public API ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector; :meth:`matches` is safe to call from any thread."""

    expression: str
    root: Node

    def evaluate(self, props: Properties) -> Value:
        """True, False or None (unknown); :raises EvaluationError: as Java throws."""
        return self.root.evaluate(props)

    def matches(self, props: Properties) -> bool:
        """True when the message with ``props`` is selected (unknown and errors are not)."""
        try:
            return self.root.evaluate(props) is True
        except (ValueError, TypeError, ArithmeticError, RecursionError):  # Java throws: no match
            return False


def compile_selector(expression: str) -> Selector:
    """Parse ``expression``.

    :raises SelectorError: with RocketMQ's ``Invalid MessageSelector.`` prefix and the reason.
    """
    try:
        return Selector(expression, _Parser(expression).selector())
    except (SelectorError, EvaluationError) as e:
        raise SelectorError(f"Invalid MessageSelector. {e}") from None
    except RecursionError:
        raise SelectorError("Invalid MessageSelector. the expression is nested too deeply") from None
