"""``rocketpy-bench``: produce and consume load against any RocketMQ 4.x name server (doc/bench.md)."""
