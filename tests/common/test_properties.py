"""Java-properties text."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.properties import format_properties, parse_properties


class PropertiesTests(SynchronousTestCase):
    def test_properties_helpers(self) -> None:
        """Properties text parses ``=``, ``:`` and bare keys and formats back sorted."""
        self.assertEqual(parse_properties("!c\na=1=2\nb:x\nc\n"), {"a": "1=2", "b": "x", "c": ""})
        self.assertEqual(format_properties({"b": "2", "a": "1"}), "a=1\nb=2\n")
