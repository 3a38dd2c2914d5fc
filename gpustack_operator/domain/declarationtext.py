"""A person's declaration text read with limits (docs/teams.md, "Limits of a declaration").

The teams and declared-pools declarations are YAML a person writes into a ConfigMap (or a
file given to ``plan``, ``sim`` and the worker). Whatever the text holds, reading it must end
quickly and say what is wrong: a text larger than :data:`MAX_BYTES`, nesting deeper than
:data:`MAX_DEPTH`, or more than :data:`MAX_VALUES` values once aliases are expanded (an alias
bomb under 1 KB expands to a billion) is refused before it is built. The document is built
straight from libyaml's parser events, without PyYAML's recursive composer, so no input
reaches Python's recursion limit. Every message is short: it never repeats the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode

MAX_BYTES: Final = 256 * 1024
"""The largest declaration read (UTF-8 bytes); a real one is a few KiB."""
MAX_DEPTH: Final = 16
"""The deepest nesting of mappings and lists (a teams declaration needs 5)."""
MAX_VALUES: Final = 20_000
"""The most values (scalars, mappings, lists) a declaration may hold, aliases expanded."""
MAX_MESSAGE: Final = 600
"""The longest refusal message; longer ones are cut."""

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STANDARD: Final = "tag:yaml.org,2002:"
_MERGE: Final = "tag:yaml.org,2002:merge"
_COLLECTION_TAGS: Final = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


class DeclarationError(ValueError):
    """A declaration refused; the message says what is wrong and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(shorten(message))


def shorten(message: str, limit: int = MAX_MESSAGE) -> str:
    """*message* on one line, cut to *limit* characters."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)`` for a message, cut to *limit* characters (a value can be huge)."""
    if isinstance(value, (Mapping, list, tuple)):
        kind = "a map" if isinstance(value, Mapping) else "a list"
        return f"{kind} of {len(value)}"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def configmap_text(configmap: Mapping[str, Any], key: str) -> str:
    """The text under *key* of *configmap*'s ``data``; :class:`DeclarationError` naming the
    fix when the key is missing or only under ``binaryData`` (a file that is not UTF-8)."""
    meta = configmap.get("metadata") or {}
    name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
    data = configmap.get("data")
    data = data if isinstance(data, Mapping) else {}
    binary = configmap.get("binaryData")
    binary = binary if isinstance(binary, Mapping) else {}
    text = data.get(key)
    if isinstance(text, str):
        return text
    if key in binary:
        raise DeclarationError(
            f"ConfigMap {name} holds {key} under binaryData (the file is not UTF-8 text): save "
            f"it as UTF-8 and create the ConfigMap again with --from-file={key}=FILE"
        )
    keys = sorted(str(k) for k in [*data, *binary])[:10]
    found = f" (it has {', '.join(keys)})" if keys else " (it is empty)"
    raise DeclarationError(
        f"ConfigMap {name} has no key {key}{found}: put the declaration under {key}, or "
        "delete the ConfigMap to declare nothing"
    )


def load_declaration(text: str | bytes, what: str) -> Any:
    """The one YAML document of *text* as Python values (``None`` when empty), within the
    limits above; :class:`DeclarationError` naming *what* and the fix otherwise."""
    if isinstance(text, bytes):
        size = len(text)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise DeclarationError(f"the {what} is not UTF-8 text: save it as UTF-8") from None
    else:
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise DeclarationError(
            f"the {what} is {size} bytes, more than the {MAX_BYTES // 1024} KiB allowed: "
            "declare less, or split it"
        )
    loader = _LOADER(text)
    try:
        return _Builder(loader, what).stream()
    except yaml.YAMLError as exc:
        raise DeclarationError(f"the {what} is not valid YAML ({exc}): fix its syntax") from None
    except RecursionError:  # not expected (the builder stops at MAX_DEPTH); never a crash
        raise DeclarationError(f"the {what} nests too deeply: flatten it") from None
    finally:
        loader.dispose()


class _Builder:
    """Python values from parser events, counting depth and values as it goes."""

    def __init__(self, loader: Any, what: str) -> None:
        self._get = loader.get_event
        self._resolve = loader.resolve
        self._constructor = SafeConstructor()
        self._what = what
        self._values = 0
        self._anchors: dict[str, tuple[Any, int]] = {}

    def stream(self) -> Any:
        event = self._get()
        if not isinstance(event, StreamStartEvent):  # pragma: no cover - libyaml's contract
            raise DeclarationError(f"the {self._what} is not a YAML stream")
        event = self._get()
        if isinstance(event, StreamEndEvent):
            return None
        if not isinstance(event, DocumentStartEvent):  # pragma: no cover
            raise DeclarationError(f"the {self._what} is not a YAML document")
        value, _ = self._value(self._get(), 1)
        if not isinstance(self._get(), DocumentEndEvent):  # pragma: no cover
            raise DeclarationError(f"the {self._what} is not one YAML document")
        if not isinstance(self._get(), StreamEndEvent):
            raise DeclarationError(
                f"the {self._what} holds more than one YAML document: keep one (no '---')"
            )
        return value

    def _count(self, values: int) -> None:
        self._values += values
        if self._values > MAX_VALUES:
            raise DeclarationError(
                f"the {self._what} holds more than {MAX_VALUES} values (aliases expanded): "
                "declare less, and do not repeat large parts through YAML aliases"
            )

    def _value(self, event: Any, depth: int) -> tuple[Any, int]:
        """The value starting with *event* and how many values it holds."""
        if isinstance(event, AliasEvent):
            known = self._anchors.get(str(event.anchor))
            if known is None:
                raise DeclarationError(
                    f"the {self._what} uses the alias *{brief(event.anchor)[1:-1]} before "
                    "its anchor: define the anchor first"
                )
            value, size = known
            self._count(size)
            return value, size
        if isinstance(event, ScalarEvent):
            value = self._scalar(event)
            size = 1
        elif isinstance(event, (MappingStartEvent, SequenceStartEvent)):
            if depth > MAX_DEPTH:
                raise DeclarationError(
                    f"the {self._what} nests deeper than {MAX_DEPTH} levels: flatten it"
                )
            if event.tag is not None and event.tag not in _COLLECTION_TAGS:
                raise DeclarationError(
                    f"the {self._what} uses the tag {brief(event.tag)}: leave tags out"
                )
            value, size = (
                self._mapping(depth) if isinstance(event, MappingStartEvent) else self._list(depth)
            )
        else:  # pragma: no cover - libyaml's contract
            raise DeclarationError(f"the {self._what} is not well formed YAML")
        if event.anchor is not None:
            self._anchors[event.anchor] = (value, size)
        return value, size

    def _mapping(self, depth: int) -> tuple[dict[Any, Any], int]:
        self._count(1)
        mapping: dict[Any, Any] = {}
        size = 1
        while True:
            event = self._get()
            if isinstance(event, MappingEndEvent):
                return mapping, size
            key, key_size = self._value(event, depth + 1)
            try:
                hash(key)
            except TypeError:
                raise DeclarationError(
                    f"the {self._what} has a map or list as a key: keys are names"
                ) from None
            if key in mapping:
                raise DeclarationError(
                    f"the {self._what} gives the key {brief(key)} twice in one map: keep one"
                )
            value, value_size = self._value(self._get(), depth + 1)
            mapping[key] = value
            size += key_size + value_size

    def _list(self, depth: int) -> tuple[list[Any], int]:
        self._count(1)
        items: list[Any] = []
        size = 1
        while True:
            event = self._get()
            if isinstance(event, SequenceEndEvent):
                return items, size
            value, value_size = self._value(event, depth + 1)
            items.append(value)
            size += value_size

    def _scalar(self, event: Any) -> Any:
        self._count(1)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self._resolve(ScalarNode, event.value, event.implicit)
        if tag == _MERGE:
            raise DeclarationError(f"the {self._what} uses a merge key (<<): write the entries out")
        if not str(tag).startswith(_STANDARD):
            raise DeclarationError(f"the {self._what} uses the tag {brief(tag)}: leave tags out")
        if tag == _STANDARD + "str":
            return event.value
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            return self._constructor.construct_object(node)
        except yaml.YAMLError as exc:
            raise DeclarationError(f"the {self._what} has a bad value: {exc}") from None
