from twisted.application.service import ServiceMaker

rocketpy = ServiceMaker(
    "rocketpy", "rocketpy.tap", "RocketMQ-compatible name server and broker", "rocketpy"
)
