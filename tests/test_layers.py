"""The import layers of ``rocketpy/`` (doc/architecture.md): nothing imports up, nothing imports in a circle."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

import rocketpy

#: Each package (top-level modules count as packages) → the packages it builds on directly. A
#: module may import its own package and what its package builds on, directly or through others;
#: doc/architecture.md draws the same graph. Read upwards: common → util → remoting → store →
#: namesrv → ha → broker → client, then tap and blocking on top; the client stands on remoting
#: alone (no store, name server or broker in a client process).
BUILDS_ON: dict[str, tuple[str, ...]] = {
    "common": (),  # message layout, headers, topics, routes, JSON
    "interfaces": ("common",),  # the zope interfaces between the layers
    "util": ("common",),  # files, config files, the ordered service tree
    "remoting": ("util", "interfaces"),  # the wire protocol, client and server
    "acl": ("remoting",),  # request signing and checking
    "store": ("util", "interfaces"),  # the message store
    "namesrv": ("remoting",),  # the name server
    "ha": ("remoting", "store"),  # master/slave replication of a store
    "broker": ("ha", "acl"),  # the broker's processors and wiring
    "client": ("acl",),  # the Deferred producer and consumers
    "blocking": ("client",),  # the blocking facade over the client
    "web": ("broker", "admin"),  # the HTTP endpoint: /metrics, the dashboard and its API (admin calls)
    "grpc": ("broker",),  # the RocketMQ 5.x gRPC endpoint over the broker
    "tap": ("broker", "namesrv", "web", "grpc"),  # twistd options and the service tree
    "testing": ("tap", "blocking"),  # doubles and harnesses for users' tests
    "admin": ("client",),  # the admin command line
    "bench": ("client",),  # the rocketpy-bench load generator
}


def below(package: str) -> set[str]:
    """Every package ``package`` builds on, directly or not."""
    found: set[str] = set()
    todo = list(BUILDS_ON.get(package, ()))
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(BUILDS_ON[p])
    return found


ROOT = Path(rocketpy.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """``rocketpy.broker.send`` → ``broker``; ``rocketpy.tap`` → ``tap``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(tree: ast.AST, modules: set[str]) -> set[str]:
    """The rocketpy modules ``tree`` imports anywhere (functions included) but under ``if TYPE_CHECKING``."""
    found: set[str] = set()
    for node in _outside_type_checking(ast.iter_child_nodes(tree)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "rocketpy" or name.startswith("rocketpy.")}


def _outside_type_checking(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    for node in nodes:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _outside_type_checking(node.orelse)
        else:
            yield node
            yield from _outside_type_checking(ast.iter_child_nodes(node))


@cache
def import_graph() -> dict[str, set[str]]:
    """Every module of rocketpy/ → the rocketpy modules it imports."""
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(ast.parse(path.read_text(), str(path)), modules) - {name} for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


class LayerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.graph = import_graph()

    def test_every_package_has_a_layer(self) -> None:
        """Each package and top-level module of rocketpy/ is placed in BUILDS_ON."""
        unplaced = {layer_of(m) for m in self.graph} - set(BUILDS_ON) - {""}
        self.assertEqual(unplaced, set(), "add these to BUILDS_ON in tests/test_layers.py and doc/architecture.md")

    def test_no_import_up_the_layers(self) -> None:
        """Every module imports only its own package and the packages that package builds on."""
        upward = sorted(
            f"{module} imports {target}"
            for module, targets in self.graph.items()
            for target in targets
            if layer_of(target) not in below(layer_of(module)) | {layer_of(module), ""}
        )
        self.assertEqual(upward, [])

    def test_no_import_cycle(self) -> None:
        """No circle of imports, counting imports inside functions; only ``if TYPE_CHECKING`` ones are free."""
        self.assertEqual(cycles(self.graph), [])

    def test_checks_can_fail(self) -> None:
        """The walk sees a lazy upward import and a circle, and ignores TYPE_CHECKING imports."""
        tree = ast.parse(
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from rocketpy.client import producer\n"
            "def f():\n    from rocketpy.broker.send import X\n"
        )
        modules = {"rocketpy.client.producer", "rocketpy.broker.send"}
        self.assertEqual(imports_of(tree, modules), {"rocketpy.broker.send"})
        self.assertEqual(cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}), [["a", "b", "c"]])
        self.assertEqual(below("ha"), {"common", "interfaces", "util", "remoting", "store"})
        self.assertNotIn("namesrv", below("client"))
