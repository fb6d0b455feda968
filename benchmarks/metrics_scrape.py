"""The cost of one ``/metrics`` scrape on the reactor thread, for a broker with many topics and groups.

Usage::

    python benchmarks/metrics_scrape.py [--topics 1000] [--groups 100] [--topics-per-group 10] [--inline]

Starts a real ``BrokerService`` (temporary store, no name server), creates ``--topics`` topics of
8 queues and has each of ``--groups`` groups commit offsets on ``--topics-per-group`` of them,
then renders the page five times as ``twistd rocketpy --http`` does (families read on the
reactor thread, formatted in the HTTP pool; ``--inline`` formats on the reactor thread too).
Prints the best reactor-thread CPU time per scrape and the page's size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import reactor  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.threads import deferToThreadPool  # noqa: E402
from twisted.python.threadpool import ThreadPool  # noqa: E402

from rocketpy.broker.config import BrokerConfig  # noqa: E402
from rocketpy.broker.controller import BrokerService  # noqa: E402
from rocketpy.broker.topicconfig import TopicConfig  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.web.metrics import render_metrics  # noqa: E402

QUEUES = 8


async def scrape(options: argparse.Namespace, root: str) -> None:
    config = BrokerConfig(listen="tcp:0:interface=127.0.0.1", advertised_address="127.0.0.1:1", namesrv_addr=[],
                          ha_listen="tcp:0:interface=127.0.0.1")
    store = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=4 << 20,
                               mapped_file_size_consume_queue=6000, max_hash_slot_num=100, max_index_num=400)
    broker = BrokerService(reactor, config, store)
    broker.startService()
    pool = ThreadPool(1, 1, "rocketpy-http")
    pool.start()
    try:
        await broker.when_started()
        for t in range(options.topics):
            broker.topics.update_topic_config(TopicConfig(f"T{t}", QUEUES, QUEUES))
        for g in range(options.groups):
            for t in range(options.topics_per_group):
                for q in range(QUEUES):
                    topic = f"T{(g * options.topics_per_group + t) % options.topics}"
                    broker.offsets.commit_offset("bench", f"G{g}", topic, q, 0)
        in_thread = None if options.inline else partial(deferToThreadPool, reactor, pool)
        times = []
        for _ in range(5):
            start = time.thread_time()
            page, _ = await render_metrics(broker, "", in_thread)
            times.append(time.thread_time() - start)
        print(f"{options.topics} topics x {QUEUES} queues, {options.groups} groups x {options.topics_per_group} "
              f"topics ({'inline' if options.inline else 'formatted in a thread'}): "
              f"{min(times) * 1000:.1f} ms reactor-thread CPU per scrape, {len(page) // 1024} KiB, "
              f"{page.count(bytes([10]))} lines")
    finally:
        pool.stop()
        await broker.stopService()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--topics-per-group", type=int, default=10)
    parser.add_argument("--inline", action="store_true")
    options = parser.parse_args()
    root = tempfile.mkdtemp(prefix="rocketpy-scrape-")

    def run() -> None:
        d = Deferred.fromCoroutine(scrape(options, root))
        d.addErrback(lambda f: print(f.getTraceback(), file=sys.stderr))
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(run)
    reactor.run()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
