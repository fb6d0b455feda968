from twisted.application.reactors import Reactor
from twisted.application.service import ServiceMaker

rocketpy = ServiceMaker(
    "rocketpy", "rocketpy.tap", "RocketMQ-compatible name server and broker", "rocketpy"
)

rocketpy_reactor = Reactor(
    "rocketpy", "rocketpy.remoting.reactor", "epoll with less Python per wake-up (rocketpy's default)"
)
