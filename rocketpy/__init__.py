"""rocketpy: an Apache RocketMQ 4.x compatible broker, name server and client on Twisted."""

__version__ = "0.1.0"
