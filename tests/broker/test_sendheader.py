"""SendHeader.parse in Python (``parse_fields``) and in C (``send_header``): the same headers, the
same HeaderError field names and remarks, on fixed and random (hostile) headers (doc/store.md)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker import sendheader
from rocketpy.broker.sendheader import SendHeader, parse_fields
from rocketpy.common.headers import SEND_V1_NAMES, HeaderError
from rocketpy.common.speedups import compiled, why_not
from tests.broker import test_send
from tests.broker.test_send import ALI_V2, CPP_V1

C_PARSE: Callable[[dict[str, str]], SendHeader] = compiled.send_header if compiled is not None else parse_fields
C_SKIP = None if compiled is not None else f"no compiled accelerator: {why_not()}"

LONG_NAMES = list(SEND_V1_NAMES)
KEYS = st.sampled_from(LONG_NAMES + [SEND_V1_NAMES[n] for n in LONG_NAMES])
NUMBER = st.integers(-(2**64), 2**64).map(str)
HOSTILE = st.sampled_from([
    "", "0", "1", "+1", "-1", "+", "-", "007", "2147483647", "2147483648", "-2147483648", "-2147483649",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "999999999999999999",
    "1000000000000000000", "9" * 40, " 1", "1 ", "1_0", "\uff11", "\u00b2", "true", "TRUE", "tRuE", "false",
    "\u0130", "x\x00", "\ud800",
])
VALUE = HOSTILE | NUMBER | st.text(max_size=6)


def outcome(parse: Callable[[dict[str, str]], SendHeader], fields: Any) -> tuple[Any, ...]:
    """``("ok", header)`` or ``("raised", exception type, message, field name)``."""
    try:
        return "ok", parse(fields)
    except HeaderError as e:
        return "raised", type(e), str(e), e.field_name
    except Exception as e:  # whatever the reference raises, the C must raise too
        return "raised", type(e), str(e), None


class SendHeaderTests(SynchronousTestCase):
    """Fixed headers through the Python reference; ``CSendHeaderTests`` runs them through C."""

    parse = staticmethod(parse_fields)

    def test_client_headers(self) -> None:
        """The C++ client's V1 header and ali-ons' V2 header, every field read."""
        self.assertEqual(self.parse(CPP_V1), SendHeader(
            "PID_EXPLORE", "ExploreTopic", "TBW102", 4, 0, 0, 1795938014763, 0, CPP_V1["properties"], 0, None, False))
        self.assertEqual(self.parse(dict(ALI_V2, l="16", m="true")), SendHeader(
            "PID_ALI_EXPLORE", "AliTopic", "TBW102", 4, 1, 0, 1795938196636, 7, ALI_V2["i"], 0, 16, True))

    def test_defaults_and_either_name(self) -> None:
        """Properties default to "", reconsume times to 0 (also when ""), the retry limit to None; a
        V2 key is read first, its long name when it is absent."""
        fields = {k: v for k, v in ALI_V2.items() if k not in ("i", "j", "b")}
        header = self.parse(dict(fields, topic="Long", j="", batch="1"))
        self.assertEqual((header.topic, header.properties, header.reconsume_times, header.max_reconsume_times,
                          header.batch), ("Long", "", 0, None, True))
        self.assertEqual(self.parse(dict(ALI_V2, e="2", queueId="5")).queue_id, 2)
        self.assertEqual(self.parse(dict(ALI_V2, m="", batch="true")).batch, False)  # "" is present: not read on

    def test_numbers_within_java_types(self) -> None:
        """Signs and leading zeros parse; Integer fields stop at 32 bits and bornTimestamp at 64."""
        header = self.parse(dict(ALI_V2, e="-2147483648", h="+007", g="-9223372036854775808"))
        self.assertEqual((header.queue_id, header.flag, header.born_timestamp), (-(2**31), 7, -(2**63)))
        for key, name, value, problem in (
            ("e", "queueId", "2147483648", "is out of range of a 32-bit integer"),
            ("g", "bornTimestamp", "9223372036854775808", "is out of range of a 64-bit integer"),
            ("d", "defaultTopicQueueNums", "9" * 40, "is out of range of a 32-bit integer"),
            ("e", "queueId", " 1", "is not a number"),
            ("f", "sysFlag", "\uff11", "is not a number"),
            ("h", "flag", "1_0", "is not a number"),
            ("l", "maxReconsumeTimes", "-", "is not a number"),
            ("e", "queueId", "", "is missing"),
        ):
            with self.assertRaises(HeaderError) as raised:
                self.parse(dict(ALI_V2, **{key: value}))
            self.assertEqual(raised.exception.field_name, name)
            self.assertIn(f"'{name}' {problem}", str(raised.exception))

    def test_missing_fields_named(self) -> None:
        """A missing required field is a HeaderError naming its long name."""
        for key, name in (("a", "producerGroup"), ("b", "topic"), ("c", "defaultTopic"), ("g", "bornTimestamp")):
            fields = {k: v for k, v in ALI_V2.items() if k != key}
            with self.assertRaises(HeaderError) as raised:
                self.parse(fields)
            self.assertEqual((raised.exception.field_name, str(raised.exception)),
                             (name, f"header field '{name}' is missing"))


CSendHeaderTests = type("CSendHeaderTests", (SendHeaderTests,),
                        {"parse": staticmethod(C_PARSE), "skip": C_SKIP, "__module__": __name__})


class SendHeaderEquivalenceTests(SynchronousTestCase):
    skip = C_SKIP

    def test_active_implementation(self) -> None:
        """With the module built, SendHeader.parse runs the C version."""
        self.assertIs(sendheader._parse_fields, C_PARSE)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(KEYS, VALUE, max_size=14), st.booleans())
    def test_same_header_or_error(self, random_fields: dict[str, str], base: bool) -> None:
        """Random headers, over a valid one or alone: equal headers or equal HeaderErrors."""
        fields = dict(ALI_V2, **random_fields) if base else random_fields
        self.assertEqual(outcome(C_PARSE, fields), outcome(parse_fields, fields))

    def test_unusual_types_go_to_python(self) -> None:
        """Values that are not plain str, and mappings that are not dicts, get the reference's answer."""
        class Text(str):
            pass

        for fields in (dict(ALI_V2, e=3), dict(ALI_V2, b=None), dict(ALI_V2, m=Text("true")), dict(ALI_V2, a=1),
                       dict(ALI_V2, m="\u0130")):
            self.assertEqual(outcome(C_PARSE, fields), outcome(parse_fields, fields), fields)
        proxy = MappingProxyType(dict(ALI_V2))
        self.assertEqual(outcome(C_PARSE, proxy), outcome(parse_fields, proxy))


class PythonHeaderSendMessageProcessorTests(test_send.SendMessageProcessorTests):
    """The processor's tests with the Python header parser (SendMessageProcessorTests use the active one)."""

    def setUp(self) -> None:
        super().setUp()
        self.patch(sendheader, "_parse_fields", parse_fields)
