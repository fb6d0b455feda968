"""The ``rocketpy_broker`` pytest fixture (loaded through the ``pytest11`` entry point).

A test that names it gets the ``ip:port`` of a name server whose broker runs in the test
process (:func:`rocketpy.testing.broker`), started for that test and gone after it::

    from rocketpy.blocking import Message, Producer

    def test_send(rocketpy_broker):
        with Producer("PG", rocketpy_broker) as producer:
            producer.send(Message("TopicTest", b"hello"))
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rocketpy.testing import broker


@pytest.fixture
def rocketpy_broker() -> Iterator[str]:
    """The name server address of a fresh in-process name server and broker."""
    with broker() as namesrv_addr:
        yield namesrv_addr
