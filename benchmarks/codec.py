"""CPU per header on the send path: decoding and encoding one SEND_MESSAGE_V2 exchange.

Usage::

    python benchmarks/codec.py [--rounds 5] [--number 100000]

Measures, in one process and alternating within each round: ``decode_frame`` of the
request the Java client sends (11 one-letter fields, 1 KiB body), the JSON header
parse alone with orjson and with the stdlib's scanner (what ``decode_frame`` used
before), ``encode`` of the broker's response (5 fields), and its JSON header alone with
orjson and with the stdlib's encoder. Prints medians in µs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from broker import BODY, send_header  # noqa: E402
from rocketpy.remoting import codec  # noqa: E402
from rocketpy.remoting.codes import RequestCode  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402


def cases() -> dict[str, object]:
    request = codec.encode(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(3, False), BODY))
    header_length = int.from_bytes(request[4:8], "big") & 0xFFFFFF
    header = request[8 : 8 + header_length]
    text = header.decode("utf-8")
    response = codec.decode(request[4:]).make_response(0, None, {
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "msgId": "7F00000100002A9F0000000000001000",
        "queueId": "3", "queueOffset": "1234",
    })
    stdlib_scan = codec._json_scan  # the stdlib's C scanner, as decode_frame used it before orjson
    return {
        "decode_frame (request)": lambda: codec.decode_frame(request, 4, len(request)),
        "header parse, orjson": lambda: codec._orjson_loads(header),
        "header parse, stdlib": lambda: stdlib_scan(header.decode("utf-8"), 0),
        "header parse, stdlib (text)": lambda: stdlib_scan(text, 0),
        "encode (response)": lambda: codec.encode(response),
        "header build, orjson": lambda: codec._json_header(response),
        "header build, stdlib": lambda: codec._json_encode(codec._header_map(response, "JSON")).encode("utf-8"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=100_000)
    options = parser.parse_args()
    runs = cases()
    results: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(options.rounds):
        for name, run in runs.items():
            seconds = timeit.timeit(run, number=options.number)  # type: ignore[arg-type]
            results[name].append(seconds / options.number * 1e6)
    print(f"medians of {options.rounds} rounds x {options.number:,} calls, python {sys.version.split()[0]}")
    for name, values in results.items():
        print(f"{name:<30}{statistics.median(values):>8.2f} µs")


if __name__ == "__main__":
    main()
