"""Loading large YAML node dumps fast, with exactly ``yaml.safe_load_all``'s result.

``kubectl get nodes -o yaml`` of a few thousand nodes is tens of megabytes. PyYAML's safe
loader spends most of its time in Python, per scalar: resolving the implicit tag (a regular
expression per value, though label keys and values repeat across nodes) and dispatching the
constructor. This loader keeps libyaml's parser and composer (``CSafeLoader``, where PyYAML
has it) and takes two shortcuts: tags of plain scalars are cached by value, and strings,
mappings and sequences are built directly; every other tag (ints, bools, nulls, floats,
timestamps, merge keys) goes through the safe constructor as before. Measured in
docs/performance.md ("plan on large inputs").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR: Final = "tag:yaml.org,2002:str"
_MAP: Final = "tag:yaml.org,2002:map"
_SEQ: Final = "tag:yaml.org,2002:seq"
_MERGE: Final = "tag:yaml.org,2002:merge"


class FastSafeLoader(_BASE):  # type: ignore[misc]
    """``CSafeLoader`` (or ``SafeLoader``) with cached scalar tags and direct construction."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._tags: dict[str, str] = {}

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        # No path resolvers are registered on the safe loader, so a plain scalar's tag
        # depends on its value alone.
        if kind is ScalarNode and implicit[0]:
            tag = self._tags.get(value)
            if tag is None:
                tag = self._tags[value] = super().resolve(kind, value, implicit)
            return tag
        result: str = super().resolve(kind, value, implicit)
        return result

    def construct_document(self, node: Node) -> Any:
        return self._build(node, {})

    def _build(self, node: Node, seen: dict[int, Any]) -> Any:
        tag = node.tag
        if tag == _STR and isinstance(node, ScalarNode):
            return node.value
        known = seen.get(id(node))
        if known is not None:
            return known
        if tag == _MAP and isinstance(node, MappingNode):
            if any(key.tag == _MERGE for key, _ in node.value):
                return self._fallback(node)
            mapping: dict[Any, Any] = {}
            seen[id(node)] = mapping
            for key_node, value_node in node.value:
                key = self._build(key_node, seen)
                try:
                    hash(key)
                except TypeError:
                    return self._fallback(node)  # the safe constructor says what is wrong
                mapping[key] = self._build(value_node, seen)
            return mapping
        if tag == _SEQ and isinstance(node, SequenceNode):
            sequence: list[Any] = []
            seen[id(node)] = sequence
            sequence.extend(self._build(item, seen) for item in node.value)
            return sequence
        return self._fallback(node)

    def _fallback(self, node: Node) -> Any:
        value = self.construct_object(node, deep=True)
        self.constructed_objects: dict[Any, Any] = {}
        self.recursive_objects: dict[Any, Any] = {}
        return value


def load_all(text: str | bytes) -> Iterator[Any]:
    """Every document of *text*, as ``yaml.safe_load_all`` gives them."""
    loader = FastSafeLoader(text.encode() if isinstance(text, str) else text)
    try:
        while loader.check_data():
            yield loader.get_data()
    finally:
        loader.dispose()
