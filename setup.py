from setuptools import Extension, find_packages, setup

setup(
    name="rocketpy",
    version="0.1.0",
    description="A lightweight Apache RocketMQ 4.x compatible broker, name server and client on Twisted",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(exclude=["tests", "tests.*"]) + ["twisted.plugins"],
    # the dashboard's pages (doc/dashboard.md): served from the package, no CDN
    package_data={"rocketpy.web": ["static/*"]},
    install_requires=[
        "twisted>=24.7",
        "zope.interface>=6",
        "msgpack>=1.0",
        # JSON headers: orjson decodes one in less than half the stdlib's time (doc/benchmarks.md).
        "orjson>=3.8",
        # /metrics (doc/observability.md): pure Python, no dependencies, a ~60 kB wheel.
        "prometheus_client>=0.17",
    ],
    extras_require={
        # rocketmq==0.4.4 bundles the official Apache RocketMQ C++ client
        # (librocketmq.so): the interop tests drive it against our broker.
        # selenium drives the Debian chromium + chromium-driver in the dashboard's browser test.
        "test": ["rocketmq==0.4.4", "PyYAML>=5.1", "twisted[tls]>=24.7", "pytest", "hdrhistogram>=0.10", "lz4>=4",
                 "zstandard>=0.22", "hypothesis>=6", "grpcio>=1.85.1", "protobuf>=7.35.1,<8",
                 "uvloop>=0.19; sys_platform != 'win32'",
                 "selenium>=4.10",
                 "PyHamcrest>=2"],  # Twisted's own reactor tests (tests/remoting/test_reactor.py) import it
        # The RocketMQ 5.x gRPC endpoint (doc/grpc.md); rocketpy/grpc/v2 was generated for these.
        "grpc": ["grpcio>=1.85.1", "protobuf>=7.35.1,<8", "uvloop>=0.19; sys_platform != 'win32'"],
        # --acl-enable reads plain_acl.yml; --tls-* and clients' tls=True need pyOpenSSL (doc/security.md)
        "acl": ["PyYAML>=5.1"],
        "tls": ["twisted[tls]>=24.7"],
        # LZ4 and ZSTD message bodies (RocketMQ 5 clients; doc/features.md).
        "compression": ["lz4>=4", "zstandard>=0.22"],
        "dev": ["rocketmq==0.4.4", "mypy", "mypy-zope", "types-PyYAML", "grpcio-tools>=1.85.1"],
        # rocketpy-bench: latency percentiles from an HDR histogram; benchmarks/peers.py drives
        # Redis Streams (the Debian redis-server) through redis-py.
        "bench": ["hdrhistogram>=0.10", "redis>=5", "hiredis"],
    },
    entry_points={
        "console_scripts": ["rocketpy-admin = rocketpy.admin.cli:main", "rocketpy-bench = rocketpy.bench.cli:main"],
        # the rocketpy_broker fixture (doc/testing.md)
        "pytest11": ["rocketpy = rocketpy.testing.pytest_plugin"],
    },
    # Optional C versions of the hot pure functions (doc/store.md, "Compiled accelerator"):
    # built when a compiler is present; without one pip warns and the Python code runs.
    ext_modules=[Extension("rocketpy._speedups", ["rocketpy/_speedups.c"],
                           depends=["rocketpy/_speedups_client.h", "rocketpy/_speedups_store.h", "rocketpy/_speedups_request.h",
                                    "rocketpy/_speedups_remoting.h", "rocketpy/_speedups_pull.h",
                                    "rocketpy/_speedups_aio.h", "rocketpy/_speedups_uring.h",
                                    "rocketpy/_speedups_storeput.h",
                                    "rocketpy/_speedups_crc.h", "rocketpy/_speedups_batch.h",
                                    "rocketpy/_speedups_producer.h", "rocketpy/_speedups_table.h",
                                    "rocketpy/_speedups_syncanswer.h", "rocketpy/_speedups_answerfirst.h",
                                    "rocketpy/_speedups_clientsend.h", "rocketpy/_speedups_reactor.h",
                                    "rocketpy/_speedups_syncwrite.h", "rocketpy/_speedups_mapped.h",
                                    "rocketpy/_speedups_chunkput.h",
                                    "rocketpy/_speedups_loneread.h",
                                    "rocketpy/_speedups_lonestore.h",
                                    "rocketpy/_speedups_attrs.h"],
                           optional=True)],
    zip_safe=False,
)
