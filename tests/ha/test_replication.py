"""A master and a slave store on loopback (real reactor, threads, sockets and temp dirs)."""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from rocketpy.common.message import MessageExt
from rocketpy.ha.client import HAClient
from rocketpy.ha.config import HAConfig
from rocketpy.ha.protocol import ACK
from rocketpy.ha.service import HAService
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus

FILE = 64 * 1024
FAST = HAConfig(reconnect_interval=0.1, slave_timeout=0.5)
PATIENT = HAConfig(reconnect_interval=0.1, slave_timeout=30.0)  # acks on a loaded machine
LOG_DIRS: dict[StoreService, str] = {}


def message(i: int, wait: bool = True) -> MessageExt:
    properties = {} if wait else {"WAIT": "false"}
    return MessageExt(topic="T", body=os.urandom(100 + i % 300), queue_id=i % 4, properties=properties,
                      born_timestamp=1_700_000_000_000 + i, born_host=("192.0.2.9", 40000))


async def until(condition: Any, timeout: float = 30.0) -> None:
    """Poll ``condition()`` every 10 ms (integration tests only)."""
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await deferLater(reactor, 0.01, lambda: None)
    raise AssertionError("condition not reached in time")


def caught_up(slave: StoreService, master: StoreService, topic: str = "T", queues: int = 4) -> bool:
    """The slave's log and its consume queues (dispatched after the bytes land) reach the master's."""
    return slave.max_physical_offset == master.max_physical_offset and all(
        slave.get_max_offset_in_queue(topic, q) == master.get_max_offset_in_queue(topic, q) for q in range(queues))


def read_log(store: StoreService) -> dict[str, bytes]:
    """Every commit-log file of a stopped store (made by ``ReplicationTestCase.store``), by name."""
    directory = LOG_DIRS[store]
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


class Silent(Protocol):
    """A slave that reports once and never again."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(ACK.pack(self.offset))


class ReplicationTestCase(TestCase):
    timeout = 120

    async def store(self, root: str, role: str) -> StoreService:
        config = MessageStoreConfig(
            store_path_root_dir=root, mapped_file_size_commit_log=FILE, mapped_file_size_consume_queue=2000 * 20,
            max_hash_slot_num=256, max_index_num=2048, broker_role=role,
            os_page_cache_busy_timeout=30.0)
        # a loaded machine must not turn puts away (OS_PAGECACHE_BUSY is tests/store's business)
        service = StoreService(MessageStore(config), reactor, max_queue_wait=30.0)
        LOG_DIRS[service] = config.commit_log_dir
        self.addCleanup(LOG_DIRS.pop, service)
        await service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        return service

    async def master(self, role: str = "ASYNC_MASTER", config: HAConfig = FAST) -> tuple[StoreService, HAService]:
        store = await self.store(self.mktemp(), role)
        ha = HAService(reactor, store, config, FILE, "tcp:0:interface=127.0.0.1", role == "SYNC_MASTER")
        await ha.startService()
        self.addCleanup(lambda: ha.stopService() if ha.running else None)
        return store, ha

    async def slave(self, ha: HAService, root: str | None = None) -> tuple[StoreService, HAClient]:
        store = await self.store(root or self.mktemp(), "SLAVE")
        port = ha.listening_port
        assert port is not None
        client = HAClient(reactor, store, FAST, f"127.0.0.1:{port.getHost().port}")  # type: ignore[attr-defined]
        client.startService()
        self.addCleanup(lambda: client.stopService() if client.running else None)
        # The slave's first report decides where the copy starts (an empty slave: the master's
        # last file then): the tests' loads come after it.
        await until(lambda: client.connected and len(ha.slave_offsets) == 1 and ha.slave_offsets[0] >= 0)
        return store, client

    async def load(self, store: StoreService, count: int, start: int = 0, wait: bool = True) -> list[PutMessageResult]:
        results: list[PutMessageResult] = []
        for first in range(start, start + count, 100):
            batch = [store.put_message(message(i, wait)) for i in range(first, min(first + 100, start + count))]
            results += await gatherResults(batch)
        return results

    async def stop(self, *services: Any) -> None:
        for service in services:
            await service.stopService()


class CopyTests(ReplicationTestCase):
    async def test_byte_identical_commit_logs(self) -> None:
        """3000 messages over ~15 files of 64 KiB: the slave's files equal the master's, byte for byte,
        and its consume queues serve the same messages."""
        master, ha = await self.master()
        slave, client = await self.slave(ha)
        results = await self.load(master, 3000)
        self.assertEqual({r.status for r in results}, {PutMessageStatus.PUT_OK})
        await until(lambda: caught_up(slave, master))
        self.assertEqual([slave.get_max_offset_in_queue("T", q) for q in range(4)], [750] * 4)
        found = await slave.get_message("g", "T", 2, 700, 32)
        self.assertEqual(found.records, (await master.get_message("g", "T", 2, 700, 32)).records)
        await self.stop(client, ha, slave, master)
        mine, theirs = read_log(master), read_log(slave)
        self.assertGreater(len(mine), 10)
        self.assertEqual(list(mine), list(theirs))
        self.assertTrue(all(mine[name] == theirs[name] for name in mine))

    async def test_empty_slave_starts_at_last_file(self) -> None:
        """A new slave of a master with history starts at the master's last file and serves queues from there."""
        master, ha = await self.master()
        await self.load(master, 1000)
        last_file = master.max_physical_offset // FILE * FILE
        slave, client = await self.slave(ha)
        await until(lambda: caught_up(slave, master))
        low = slave.get_min_offset_in_queue("T", 1)
        self.assertGreater(low, 0)
        found = await slave.get_message("g", "T", 1, low, 4)
        self.assertEqual(found.records, (await master.get_message("g", "T", 1, low, 4)).records)
        await self.stop(client, ha, slave, master)
        mine, theirs = read_log(master), read_log(slave)
        self.assertEqual(list(theirs), [f"{last_file:020d}"] + [n for n in mine if int(n) > last_file])
        self.assertTrue(all(mine[name] == theirs[name] for name in theirs))

    async def test_slave_restart_resumes_from_its_offset(self) -> None:
        """A slave stopped and restarted on its directory continues at its own end, ending identical."""
        master, ha = await self.master()
        root = self.mktemp()
        slave, client = await self.slave(ha, root)
        await self.load(master, 800)
        await until(lambda: caught_up(slave, master))
        await self.stop(client, slave)
        await self.load(master, 800, start=800)
        slave, client = await self.slave(ha, root)
        await until(lambda: caught_up(slave, master))
        self.assertEqual(slave.get_max_offset_in_queue("T", 3), 400)
        await self.stop(client, ha, slave, master)
        self.assertEqual(read_log(master), read_log(slave))


class SyncMasterTests(ReplicationTestCase):
    async def test_ack_only_once_the_slave_has_it(self) -> None:
        """Every PUT_OK fires when the slave's log already holds the record; with the slave gone,
        sends are SLAVE_NOT_AVAILABLE (still stored on the master), never PUT_OK."""
        master, ha = await self.master("SYNC_MASTER", PATIENT)
        slave, client = await self.slave(ha)
        early: list[bool] = []

        def check(result: PutMessageResult) -> PutMessageResult:
            early.append(result.append is not None and slave.max_physical_offset < result.append.next_offset)
            return result

        results = await gatherResults([master.put_message(message(i)).addCallback(check) for i in range(500)])
        self.assertEqual({r.status for r in results}, {PutMessageStatus.PUT_OK})
        self.assertEqual((len(early), any(early)), (500, False))
        await client.stopService()
        await until(lambda: ha.slave_count == 0)
        before = master.max_physical_offset
        results = await self.load(master, 50)
        self.assertEqual({r.status for r in results}, {PutMessageStatus.SLAVE_NOT_AVAILABLE})
        self.assertGreater(master.max_physical_offset, before)
        self.assertLess(slave.max_physical_offset, master.max_physical_offset)

    async def test_silent_slave_times_out(self) -> None:
        """A slave that stops acking makes sends FLUSH_SLAVE_TIMEOUT after the slave timeout."""
        master, ha = await self.master("SYNC_MASTER")
        port = ha.listening_port
        assert port is not None
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port)  # type: ignore[attr-defined]
        silent = await connectProtocol(endpoint, Silent(0))
        self.addCleanup(lambda: silent.transport.loseConnection() if silent.transport else None)
        await until(lambda: ha.slave_count == 1 and ha.push_to_slave_max_offset == 0)
        start = reactor.seconds()
        result: PutMessageResult = await master.put_message(message(1))
        self.assertEqual(result.status, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.assertGreaterEqual(reactor.seconds() - start, FAST.slave_timeout - 0.05)

    async def test_no_wait_message_not_held(self) -> None:
        """A message with WAIT=false is acknowledged after the local put, slave or not."""
        master, _ = await self.master("SYNC_MASTER")
        results = await self.load(master, 5, wait=False)
        self.assertEqual({r.status for r in results}, {PutMessageStatus.PUT_OK})
        rejected: Deferred[PutMessageResult] = master.put_message(message(9))
        self.assertEqual((await rejected).status, PutMessageStatus.SLAVE_NOT_AVAILABLE)

    async def test_slave_refuses_puts(self) -> None:
        """A SLAVE store refuses puts: SERVICE_NOT_AVAILABLE."""
        store = await self.store(self.mktemp(), "SLAVE")
        result: PutMessageResult = await store.put_message(message(1))
        self.assertEqual(result.status, PutMessageStatus.SERVICE_NOT_AVAILABLE)
