"""The RocketMQ 5.x gRPC endpoint (``apache.rocketmq.v2.MessagingService``), beside the 4.x remoting port.

``v2/`` holds the classes generated from apache/rocketmq-apis; the other modules map its RPCs
onto the broker's send path and store (doc/grpc.md).
"""
