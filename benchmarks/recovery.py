"""Restart time after kill -9 of a broker writing at full speed, for stores of several sizes.

Usage::

    python benchmarks/recovery.py [--files 2 8 24] [--file-size-mib 64] [--kills 5] [--load-seconds 2]
                                  [--code DIR] [--dir DIR]

For each store size N it starts ``python -m twisted rocketpy`` (name server + broker, free loopback
ports, a fresh store in a scratch directory under ``--dir``) with commit-log files of
``--file-size-mib``, and writes SEND_BATCH_MESSAGE requests of 32 messages of 1 KiB (64 in flight)
from a thread until the commit log has N files. Then, ``--kills`` times: SIGKILL the broker while
the writes go on, start it again on the same store, and time until it accepts a TCP connection and
until it answers a send with SEND_OK; then write for ``--load-seconds`` more before the next kill.
``--code`` picks the rocketpy source tree to run (default: this one), so one command measures
another branch (a "before" figure). ``--reboot`` marks each kill as a machine restart (the abort
file names another boot), so recovery cannot trust the dead process's page cache and walks from the
checkpoint. Prints each restart (with ``--reboot``, how far the dead broker's checkpoint trailed the
log's end) and, per store size, the median and maximum.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from rocketpy.common.message import Message, encode_batch  # noqa: E402
from rocketpy.remoting.codec import decode, encode  # noqa: E402
from rocketpy.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402
from tests.ports import free_port  # noqa: E402  (below the ephemeral range: the ports are reused across restarts)

TOPIC = "BenchRecovery"
QUEUES = 8
BATCH = 32
IN_FLIGHT = 64
BODY = b"r" * 1024


class Broker:
    """One rocketpy process (name server + broker) on a store directory kept across restarts."""

    def __init__(self, code: str, workdir: str, file_size: int) -> None:
        self.code, self.workdir, self.file_size = code, workdir, file_size
        self.namesrv_port, self.port = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def commit_log_files(self) -> int:
        path = os.path.join(self.workdir, "store", "commitlog")
        return len([n for n in os.listdir(path) if n.isdigit()]) if os.path.isdir(path) else 0

    @property
    def store_bytes(self) -> int:
        return self.commit_log_files * self.file_size

    def checkpoint_offset(self) -> int:
        """The recovery offset of the store's checkpoint (@40; 0 where the code under test has none)."""
        try:
            with open(os.path.join(self.workdir, "store", "checkpoint"), "rb") as f:
                f.seek(40)
                data = f.read(8)
        except FileNotFoundError:
            return 0
        return struct.unpack(">q", data)[0] if len(data) == 8 else 0

    def start(self) -> tuple[float, float]:
        """Start and wait until it serves; returns seconds until it accepted a connection and until
        it answered a send with SEND_OK."""
        args = [sys.executable, "-m", "twisted", "rocketpy",
                "--namesrv-listen", f"tcp:{self.namesrv_port}:interface=127.0.0.1",
                "--listen", f"tcp:{self.port}:interface=127.0.0.1",
                "--ha-listen", f"tcp:{free_port()}:interface=127.0.0.1",
                "--store-dir", os.path.join(self.workdir, "store"),
                "--namesrv-config-dir", os.path.join(self.workdir, "namesrv"),
                "--commit-log-file-size", str(self.file_size)]
        env = dict(os.environ, PYTHONPATH=self.code)
        log = open(os.path.join(self.workdir, "rocketpy.log"), "ab")
        began = time.perf_counter()
        self.process = subprocess.Popen(args, cwd=self.code, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = began + 120
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"rocketpy exited with {self.process.returncode}, see {log.name}")
            if time.perf_counter() > deadline:
                raise SystemExit("rocketpy did not start listening in 120 s")
            try:
                connection = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                break
            except OSError:
                time.sleep(0.005)
        accepted = time.perf_counter() - began
        with connection:
            connection.sendall(encode(send_request(1, 0)))
            response = read_frame(connection)
        if response.code != ResponseCode.SUCCESS:
            raise SystemExit(f"first send after the restart: {response.code} {response.remark}")
        return accepted, time.perf_counter() - began

    def kill(self, reboot: bool = False) -> None:
        """SIGKILL; with ``reboot``, recover as after a machine restart (the abort file names another
        boot, so the page cache of the dead process is not trusted: the checkpoint path)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        if reboot:
            with open(os.path.join(self.workdir, "store", "abort"), "w") as abort:
                abort.write("another-boot")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


def send_request(opaque: int, queue_id: int, batch: int = 0) -> RemotingCommand:
    """SEND_MESSAGE_V2 (one message) or SEND_BATCH_MESSAGE (``batch`` messages), Java's header names."""
    fields = {"a": "PID_RECOVERY", "b": TOPIC, "c": "TBW102", "d": str(QUEUES), "e": str(queue_id), "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false"}
    if batch:
        fields["m"] = "true"
        body = encode_batch([Message(TOPIC, BODY, 0, {"KEYS": f"k{i}"}) for i in range(batch)])
        request = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, fields, body)
    else:
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, BODY)
    request.opaque = opaque
    return request


def read_frame(connection: socket.socket) -> RemotingCommand:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = connection.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    (length,) = struct.unpack(">I", exactly(4))
    return decode(exactly(length))


class Writer(threading.Thread):
    """Sends batches with ``IN_FLIGHT`` outstanding until the connection dies (the kill) or ``stop``."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stopping = False
        self.acked = 0

    def run(self) -> None:
        frames = [encode(send_request(i + 1, i % QUEUES, BATCH)) for i in range(IN_FLIGHT)]
        try:
            with socket.create_connection(("127.0.0.1", self.port)) as connection:
                while not self.stopping:
                    connection.sendall(b"".join(frames))
                    for _ in frames:
                        response = read_frame(connection)
                        if response.code == ResponseCode.SUCCESS:
                            self.acked += BATCH
        except OSError:
            pass  # killed


def write_until(broker: Broker, done: Callable[[], bool], reboot: bool = False) -> None:
    writer = Writer(broker.port)
    writer.start()
    while not done() and writer.is_alive():
        time.sleep(0.05)
    broker.kill(reboot)  # while the writer still writes
    writer.stopping = True
    writer.join()


def empty_start(options: argparse.Namespace) -> float:
    """Seconds until a broker on an empty store accepts a connection: the start-up floor, measured
    beside each restart so that both see the same machine load."""
    workdir = tempfile.mkdtemp(prefix="rocketpy-empty-", dir=options.dir)
    broker = Broker(options.code, workdir, options.file_size_mib * 1024 * 1024)
    try:
        return broker.start()[0]
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def bench_size(options: argparse.Namespace, files: int) -> list[tuple[float, float, float]]:
    workdir = tempfile.mkdtemp(prefix="rocketpy-recovery-", dir=options.dir)
    broker = Broker(options.code, workdir, options.file_size_mib * 1024 * 1024)
    times = []
    try:
        broker.start()
        began = time.perf_counter()
        write_until(broker, lambda: broker.commit_log_files >= files, options.reboot)
        print(f"  {files} files ({broker.store_bytes / 2**30:.2f} GiB) written in {time.perf_counter() - began:.0f} s")
        for kill in range(options.kills):
            before = broker.checkpoint_offset()
            accepted, served = broker.start()
            # a restart checkpoints the recovered end at once: how far the dead broker's checkpoint trailed
            # (after a crash of the process alone nothing is checkpointed at load: shown with --reboot only)
            walked = (f", checkpoint {(broker.checkpoint_offset() - before) / 2**20:.1f} MiB behind"
                      if before and options.reboot else "")
            floor = empty_start(options)
            times.append((accepted, served, floor))
            print(f"  restart {kill + 1}: accepts after {accepted:.2f} s, first SEND_OK after {served:.2f} s"
                  f"{walked}; an empty store's broker accepts after {floor:.2f} s", flush=True)
            if kill + 1 < options.kills:
                deadline = time.perf_counter() + options.load_seconds
                write_until(broker, lambda: time.perf_counter() >= deadline, options.reboot)
    except SystemExit:
        with open(os.path.join(workdir, "rocketpy.log"), "rb") as log:
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
        raise
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[2, 8, 24], help="store sizes, in commit-log files")
    parser.add_argument("--file-size-mib", type=int, default=64)
    parser.add_argument("--kills", type=int, default=5, help="kill -9 and restart cycles per store size")
    parser.add_argument("--load-seconds", type=float, default=2.0, help="full-speed writes between kills")
    parser.add_argument("--code", default=os.path.dirname(HERE), help="the rocketpy source tree to run")
    parser.add_argument("--reboot", action="store_true",
                        help="recover as after a machine restart (untrusted page cache: the checkpoint path)")
    parser.add_argument("--dir", default=None, help="scratch directory (a real disk, not tmpfs)")
    options = parser.parse_args()
    print(f"code: {options.code}" + (" (recoveries as after a machine restart)" if options.reboot else ""))
    summary = []
    for files in options.files:
        print(f"store of {files} x {options.file_size_mib} MiB files:", flush=True)
        times = bench_size(options, files)
        accepted = [a for a, _, _ in times]
        served = [s for _, s, _ in times]
        over = [a - f for a, _, f in times]
        summary.append((files, statistics.median(accepted), max(accepted), statistics.median(served), max(served),
                        statistics.median(over), max(over)))
    print("\n| commit-log files | store | accepts p50 | accepts max | first SEND_OK p50 | first SEND_OK max "
          "| over an empty store's start p50 | max |")
    print("|---|---|---|---|---|---|---|---|")
    for files, a50, amax, s50, smax, o50, omax in summary:
        size = files * options.file_size_mib / 1024
        print(f"| {files} x {options.file_size_mib} MiB | {size:.2f} GiB | {a50:.2f} s | {amax:.2f} s "
              f"| {s50:.2f} s | {smax:.2f} s | {o50:+.2f} s | {omax:+.2f} s |")


if __name__ == "__main__":
    main()
