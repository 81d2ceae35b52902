"""No import circles among our modules (issue 47): every package reads bottom-up.

The graph is grimp's (import-linter's own parser), over agentmesh and the four services, without the
generated stubs (agentmesh/v1). It counts every import a module makes, those inside functions too: an
import moved into a function to dodge a circle is still a circle. Imports under `if TYPE_CHECKING:`
are left out (grimp's exclude_type_checking_imports): they never run, and naming a type of the module
above is how a lower module stays below it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import grimp
import pytest

PACKAGES = ("agentmesh", "context_svc", "tool_svc", "provider_svc", "dispatcher_svc")
GENERATED = "agentmesh.v1"


def _ours(module: str) -> bool:
    return not (module == GENERATED or module.startswith(GENERATED + "."))


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)


def edges_of(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    modules = {m for m in graph.modules if _ours(m)}
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules} for m in modules}


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _describe(graph: grimp.ImportGraph, edges: Mapping[str, set[str]], circle: list[str]) -> str:
    lines = [" <-> ".join(circle)]
    for importer in circle:
        for imported in sorted(edges[importer] & set(circle)):
            where = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
            lines.append(f"    {importer} -> {imported} (line {', '.join(map(str, where))})")
    return "\n".join(lines)


def test_the_graph_covers_every_package(graph: grimp.ImportGraph) -> None:
    edges = edges_of(graph)
    for package in PACKAGES:
        assert sum(1 for m in edges if m.startswith(package + ".")) >= 10, package
    assert "agentmesh.store" in edges["agentmesh.apikeys"]  # a known edge: the walk parsed imports
    assert not any(m.startswith(GENERATED) for m in edges)


def test_no_module_imports_its_way_back_to_itself(graph: grimp.ImportGraph) -> None:
    edges = edges_of(graph)
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(_describe(graph, edges, c) for c in found)


def test_a_planted_circle_is_reported(graph: grimp.ImportGraph) -> None:
    """The check can fail: a function-level import back (store -> apikeys) closes a circle."""
    planted = copy.deepcopy(graph)
    planted.add_import(importer="agentmesh.store", imported="agentmesh.apikeys", line_number=1, line_contents="x")
    found = circles(edges_of(planted))
    assert any({"agentmesh.store", "agentmesh.apikeys"} <= set(c) for c in found), found


def test_circles_finds_each_component() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"f"}, "g": set()}
    # a self-import is not a circle of modules; d <-> e reaches the a-b-c circle but is a circle of its own
    assert circles(edges) == [["a", "b", "c"], ["d", "e"]]
