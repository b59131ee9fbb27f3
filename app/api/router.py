"""The ASGI front's router: the route table (``app.api.routes``) compiled once into a tree
of path segments (a parameter is one non-empty segment; a literal segment wins over a
parameter)."""

from __future__ import annotations

from collections.abc import Iterable

from app.api.routes import Route


class _Node:
    __slots__ = ("literals", "param", "param_name", "routes")

    def __init__(self) -> None:
        self.literals: dict[str, _Node] = {}
        self.param: _Node | None = None
        self.param_name = ""
        self.routes: dict[str, Route] = {}  # method → route, where a path ends here


class Router:
    def __init__(self, routes: Iterable[Route]) -> None:
        self._root = _Node()
        for route in routes:
            node = self._root
            for segment in route.path.split("/")[1:]:
                if segment.startswith("{"):
                    if node.param is None:
                        node.param = _Node()
                        node.param_name = segment[1:-1]
                    elif node.param_name != segment[1:-1]:
                        raise ValueError(f"{route.path}: one name per parameter position")
                    node = node.param
                else:
                    node = node.literals.setdefault(segment, _Node())
            if route.method in node.routes:
                raise ValueError(f"{route.method} {route.path} is in the table twice")
            node.routes[route.method] = route

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route and its parameters; None when no route has this path and method (404,
        or 405 with the path's ``methods``)."""
        params: dict[str, str] = {}
        node = self._node(path, params)
        route = None if node is None else node.routes.get(method)
        return None if route is None else (route, params)

    def methods(self, path: str) -> frozenset[str]:
        """The methods of the routes with this path (none: no route has it)."""
        node = self._node(path, {})
        return frozenset(() if node is None else node.routes)

    def _node(self, path: str, params: dict[str, str]) -> _Node | None:
        if not path.startswith("/"):
            return None
        return self._walk(self._root, path.split("/"), 1, params)

    def _walk(self, node: _Node, segments: list[str], i: int, params: dict[str, str]
              ) -> _Node | None:
        if i == len(segments):
            return node if node.routes else None
        segment = segments[i]
        literal = node.literals.get(segment)
        if literal is not None:
            found = self._walk(literal, segments, i + 1, params)
            if found is not None:
                return found
        if node.param is not None and segment:
            found = self._walk(node.param, segments, i + 1, params)
            if found is not None:
                params[node.param_name] = segment
                return found
        return None
