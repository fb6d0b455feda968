"""What a user's pytest file looks like (run by test_fixture.PytestTests in a pytest subprocess)."""

from rocketpy.blocking import Producer, PushConsumer, new_message

seen: list[str] = []


def test_produce_and_consume(rocketpy_broker: str) -> None:
    seen.append(rocketpy_broker)
    with Producer("PG", rocketpy_broker) as producer:
        sent = producer.send(new_message("Orders", b"order-1", tags="new"))
    with PushConsumer("CG", rocketpy_broker).subscribe("Orders", "new") as consumer:
        received = consumer.receive(timeout=10)
    assert received is not None, "nothing received in 10 s"
    assert received.body == b"order-1"
    assert received.msg_id == sent.offset_msg_id


def test_each_test_gets_a_new_broker(rocketpy_broker: str) -> None:
    seen.append(rocketpy_broker)
    assert len(set(seen)) == len(seen) == 2, seen
