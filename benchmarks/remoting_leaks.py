"""A reference-leak loop over the remoting path's C functions (rocketpy/_speedups_remoting.h).

Usage::

    python benchmarks/remoting_leaks.py [--loops 20000]

Each function runs ``--loops`` times over usual input and over input that takes each of its
other exits (the orjson fallback, the Python fallback, refusals, errors), twice. Over the second
time (the first warms caches, free lists and the log's buffer), a
leaked object per call shows as growth of ``sys.getallocatedblocks()`` proportional to the
loops, and a leaked reference to a shared object (None, True, the JSON serialize type, the
interned names) as growth of its reference count; both are printed, and the exit status is 1
when any grows by a tenth of the calls or more (a leak per call grows by at least one per call).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import struct
import sys
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import msgpack  # type: ignore[import-untyped]  # noqa: E402
from twisted.internet.task import Clock  # noqa: E402

from rocketpy.broker import send  # noqa: E402
from rocketpy.broker.sendheader import SendHeader  # noqa: E402
from rocketpy.broker.topicconfig import TopicConfigManager  # noqa: E402
from rocketpy.remoting import codec, node  # noqa: E402
from rocketpy.remoting.codes import SerializeType  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402
from rocketpy.store.status import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus  # noqa: E402
from tests.broker.test_send import ALI_V2, STORE_HOST, send_request  # noqa: E402
from tests.fakes import FakeStoreService  # noqa: E402


def frame(header: bytes, body: bytes = b"b", serialize_type: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), serialize_type << 24 | len(header)) + header + body


USUAL = {"code": 310, "extFields": dict(ALI_V2), "flag": 0, "language": "JAVA", "opaque": 7,
         "serializeTypeCurrentRPC": "JSON", "version": 401}
FRAMES = [
    frame(json.dumps(USUAL).encode()),                                              # usual, with \\u escapes
    frame(json.dumps(dict(USUAL, remark="\u00e9" * 300), ensure_ascii=False).encode()),  # non-ASCII, > 512 bytes
    frame(json.dumps(dict(USUAL, remark="\u00e9\n" * 300)).encode()),             # escapes, heap buffer
    frame(json.dumps(dict(USUAL, flag=1)).encode()),                                # a response ends the list
    frame(json.dumps(dict(USUAL, other=[1])).encode()),                             # another key: orjson
    frame(json.dumps(dict(USUAL, language=0)).encode()),                            # not the usual shape: Python
    frame(b'{"code":1,"remark":"\x01"}'),                                          # raw control: orjson refuses
    frame(json.dumps(dict(USUAL, remark="\ud800")).encode()),                       # lone surrogate escape
    frame(msgpack.packb(USUAL), serialize_type=SerializeType.MSGPACK),              # not JSON
    frame(b'{"code":1,"opaque":99999999999}'),                                      # opaque out of range
    struct.pack(">i", 100) + b"x",                                                  # incomplete
]


def checks(loops: int) -> list[tuple[str, Callable[[], Any]]]:
    assert codec.read_frames is not None and node._response_frames is not None
    assert send._put_response_c is not None and send._put_responses_c is not None
    assert send._single_message_c is not None
    read_frames, response_frames = codec.read_frames, node._response_frames
    put_response, put_responses, single_message = send._put_response_c, send._put_responses_c, send._single_message_c
    processor = send.SendMessageProcessor(FakeStoreService(), TopicConfigManager(Clock()), STORE_HOST)
    request = send_request(310, ALI_V2, b"x" * 100)
    stored = PutMessageResult(PutMessageStatus.PUT_OK, AppendMessageResult(AppendMessageStatus.PUT_OK, 0, 1, ["ID"], 5))
    batch = PutMessageResult(PutMessageStatus.PUT_OK, AppendMessageResult(AppendMessageStatus.PUT_OK, 0, 1,
                                                                          ["A", "B"], 5))
    refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
    header = SendHeader.parse(request)
    headers = [header, dataclasses.replace(header, topic="%RETRY%G"), dataclasses.replace(header, sys_flag=4),
               dataclasses.replace(header, properties="TRAN_MSG\x01true"), dataclasses.replace(header, properties="\u00e9")]
    answers = [request.make_response(0, None, {"a": "b"}), request.make_response(0, "\u00e9")]
    data = b"".join(FRAMES)

    def read_all() -> None:
        position = 0
        for data_frame in FRAMES:
            read_frames(data_frame, 0, 1 << 20)
        while True:
            commands, position = read_frames(data, position, 1 << 20)
            if not commands:
                break

    def responses() -> None:
        for answer in answers:
            response_frames([request], [answer])
        response_frames([request], [None])

    def puts() -> None:
        for result in (stored, batch, refused):
            put_response(result, request, 3, send._STORED_CODES, processor._trace_fields)
        put_responses([stored, refused, batch], [(0, request, 1), (1, request, 2), (2, request, 3)], [None] * 3,
                      processor._put_response, send._STORED_CODES, processor._trace_fields)

    def messages() -> None:
        for h in headers:
            single_message(h, b"body", 1, ("10.0.0.1", 5), STORE_HOST, "C", 1000, 1024)
        single_message(header, b"x" * 2000, 1, ("10.0.0.1", 5), STORE_HOST, "C", 1000, 1024)

    send_run = send._send_run
    assert send_run is not None
    run = [send_request(310, ALI_V2, b"x" * 100), send_request(310, {}), send_request(310, dict(ALI_V2, e="1")),
           send_request(310, dict(ALI_V2, e="99")), send_request(310, dict(ALI_V2, b="%RETRY%G")),
           send_request(310, dict(ALI_V2, m="true"), b"bad batch")]

    def runs() -> None:
        puts: list[Any] = []
        send_run(run, None, {}, {}, STORE_HOST, "C", 1000, 1024, processor._prepare, puts, [], [], {}, {},
                 lambda channel: ("10.0.0.1", 5))

    return [("read_frames (json_command, orjson, fallbacks)", read_all), ("response_frames", responses),
            ("put_response / put_responses", puts), ("single_message", messages), ("send_run", runs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", type=int, default=20_000)
    args = parser.parse_args()
    if codec.read_frames is None:
        print("rocketpy._speedups is not built (or ROCKETPY_NO_SPEEDUPS is set): nothing to check")
        return 0
    shared = {"None": None, "True": True, "False": False, "JSON": SerializeType.JSON, "'JAVA'": "JAVA",
              "'msgId'": "msgId", "0": 0, "1": 1}
    failed = False
    for name, check in checks(args.loops):
        for _ in range(args.loops):  # warm-up: caches, free lists, interned names, the log's buffer
            check()
        gc.collect()
        blocks, counts = sys.getallocatedblocks(), {k: sys.getrefcount(v) for k, v in shared.items()}
        for _ in range(args.loops):
            check()
        gc.collect()
        grew = sys.getallocatedblocks() - blocks
        refs = {k: sys.getrefcount(v) - counts[k] for k, v in shared.items()}
        bad = grew > args.loops // 10 or any(abs(r) > args.loops // 10 for r in refs.values())  # a leak: ≥ 1 per call
        failed |= bad
        print(f"{name:48} {args.loops} loops: blocks {grew:+d}, refs "
              + " ".join(f"{k}{r:+d}" for k, r in refs.items()) + ("  LEAK?" if bad else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
