"""Message and service classes generated from apache/rocketmq-apis v2 (Apache License 2.0).

``definition.proto`` and ``service.proto`` are copied from apache/rocketmq-apis at commit
3e60073c6dab3430feaec443824802e23ecda681, with only their ``import`` lines pointed at this
package; the ``*_pb2*.py`` files are grpcio-tools output (doc/grpc.md tells how to regenerate).
"""
