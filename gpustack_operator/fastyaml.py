"""Loading large YAML node dumps fast, with exactly ``yaml.safe_load_all``'s result.

``kubectl get nodes -o yaml`` of a few thousand nodes is tens of megabytes in one document.
PyYAML's safe loader composes the whole document into a graph of node objects first (several
hundred MiB for 5,000 Nodes), then spends most of its time in Python per scalar: resolving
the implicit tag (a regular expression per value, though label keys and values repeat across
nodes) and dispatching the constructor. This loader keeps libyaml's parser (``CSafeLoader``,
where PyYAML has it) and builds the Python objects straight from its events: no node graph,
tags of plain scalars cached by value, strings, mappings and sequences built directly, other
scalars (ints, bools, nulls, floats, timestamps) constructed once per distinct value by the
safe constructor. What a dump of the API never holds (anchors, aliases, merge keys, explicit
tags, unhashable keys) sends the text back through the composing path, which handles them
as the safe loader does. Measured in docs/performance.md ("plan on large inputs").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import yaml
from yaml.events import (
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
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


class _Unusual(Exception):
    """The document holds something only the composing path handles."""


class _EventBuilder:
    """Python objects straight from a loader's parser events (one document at a time)."""

    def __init__(self, loader: FastSafeLoader) -> None:
        self._loader = loader
        self._get = loader.get_event
        self._scalars: dict[tuple[str, str], Any] = {}

    def document(self) -> Any:
        """The next document's value (the DocumentStart event is consumed here)."""
        self._get()
        value = self._value(self._get())
        self._get()  # DocumentEnd
        return value

    def _value(self, event: Any) -> Any:
        kind = event.__class__
        if event.anchor is not None:  # an anchor to refer back to, or an alias
            raise _Unusual
        if kind is ScalarEvent:
            return self._scalar(event)
        if kind is MappingStartEvent and event.tag is None:
            mapping: dict[Any, Any] = {}
            while True:
                key_event = self._get()
                if key_event.__class__ is MappingEndEvent:
                    return mapping
                key = self._value(key_event)
                if key.__class__ is not str:
                    try:
                        hash(key)
                    except TypeError:
                        raise _Unusual from None
                mapping[key] = self._value(self._get())
        if kind is SequenceStartEvent and event.tag is None:
            sequence: list[Any] = []
            while True:
                item_event = self._get()
                if item_event.__class__ is SequenceEndEvent:
                    return sequence
                sequence.append(self._value(item_event))
        raise _Unusual  # an alias, or a collection with an explicit tag

    def _scalar(self, event: Any) -> Any:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self._loader.resolve(ScalarNode, event.value, event.implicit)
        if tag == _STR:
            return event.value
        if tag == _MERGE or not tag.startswith("tag:yaml.org,2002:"):
            raise _Unusual
        key = (tag, event.value)
        try:
            return self._scalars[key]
        except KeyError:
            pass
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        # What the safe constructor builds from a scalar is immutable (int, float, bool,
        # None, datetime, bytes), so one value per distinct scalar can be shared.
        value = self._scalars[key] = self._loader._fallback(node)
        return value


def load_all(text: str | bytes) -> Iterator[Any]:
    """Every document of *text*, as ``yaml.safe_load_all`` gives them."""
    data = text.encode() if isinstance(text, str) else text
    loader = FastSafeLoader(data)
    done = 0
    try:
        builder = _EventBuilder(loader)
        loader.get_event()  # StreamStart
        while not loader.check_event(StreamEndEvent):
            document = builder.document()
            done += 1
            yield document
    except _Unusual:
        pass
    else:
        return
    finally:
        loader.dispose()
    yield from _compose_all(data, skip=done)


def _compose_all(data: bytes, skip: int) -> Iterator[Any]:
    """The documents of *data* after the first *skip*, through the composing loader."""
    loader = FastSafeLoader(data)
    try:
        index = 0
        while loader.check_data():
            document = loader.get_data()
            if index >= skip:
                yield document
            index += 1
    finally:
        loader.dispose()
