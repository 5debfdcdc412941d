"""Python values built straight from libyaml's events: the fast path for reading YAML.

PyYAML composes a node graph and then constructs values from it, in Python, with a resolver
that runs regular expressions on every plain scalar; on a 6.7 MB scenario that is ~12 s, while
libyaml's parser alone yields every event in ~0.6 s. This builder turns the events into dicts,
lists and scalars in one pass and keeps everything ``documents`` promises:

- the same values as PyYAML's ``SafeLoader`` (YAML 1.1, as Kubernetes reads it): a plain
  scalar's type comes from PyYAML's own resolver and constructors, remembered per distinct text;
  anchors and aliases (an alias is the same object, as PyYAML's); ``<<`` merge keys as the merge
  spec and Kubernetes' go-yaml have them (in a list the earlier mapping wins, own keys win over
  merged ones), where PyYAML 6.0.4 decides repeated keys by the identity of their strings;
- the same refusals with line numbers: duplicate keys, unhashable keys, undefined or duplicate
  anchors, nesting deeper than ``Limits.max_depth``, lists longer than ``max_items``, and
  documents whose aliases expand to more than ``max_nodes`` values, counted as each collection
  closes (an alias counts as what it stands for; nothing is copied).

Anything rarer (an explicit tag such as ``!!binary``, a recursive alias, a tag without a
constructor) raises ``Fallback``: the caller reads that input with the node-based loader, so
rare input keeps PyYAML's exact behaviour and common input is fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
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
)

_CParser: Any
try:
    from yaml._yaml import CParser as _CParser
except ImportError:  # a PyYAML built without libyaml: no fast path
    _CParser = None

STR = "tag:yaml.org,2002:str"
MERGE = "tag:yaml.org,2002:merge"


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one input may hold (``admission.cli.documents`` names the limits of each kind)."""

    max_bytes: int  # of one file (or stdin)
    max_nodes: int  # of one document, aliases expanded
    max_items: int  # in one list (checked while reading: a huge timeline is refused early)
    max_depth: int = 64  # collections nested in collections
    max_documents: int = 20_000  # in one file (or stdin)

    def describe_bytes(self) -> str:
        return f"{self.max_bytes // (1024 * 1024)} MiB"


class Fallback(Exception):
    """Input the fast path leaves to PyYAML's node-based loader (explicit tags, recursive aliases)."""


class TooLarge(yaml.YAMLError):
    """Input beyond ``Limits``: refused while it is read."""


class _Scalars:
    """Plain scalars' values by text, resolved and constructed once each by PyYAML itself."""

    def __init__(self) -> None:
        self.loader = yaml.SafeLoader("")
        self.known: dict[str, Any] = {}

    def plain(self, text: str, event: Any) -> Any:
        try:
            return self.known[text]
        except KeyError:
            pass
        tag = self.loader.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
        if tag == MERGE:
            value: Any = _MERGE_KEY
        elif tag == STR:
            value = text
        else:
            construct = self.loader.yaml_constructors.get(tag)
            if construct is None:
                raise Fallback(tag)  # e.g. "=" (tag:yaml.org,2002:value): PyYAML refuses it
            value = construct(self.loader, yaml.ScalarNode(tag, text, _mark(event), event.end_mark))
        self.known[text] = value
        return value


class _MergeKey:
    """The ``<<`` key of a mapping (a marker: merged, never stored)."""


_MERGE_KEY = _MergeKey()


class _Open:
    """A collection being built: its value, size with aliases expanded, height, and pending key."""

    __slots__ = ("anchor", "count", "event", "height", "key", "key_event", "merges", "value")

    def __init__(self, value: dict[Any, Any] | list[Any], event: Any) -> None:
        self.value = value
        self.event = event
        self.anchor: str | None = event.anchor
        self.count = 1
        self.height = 1
        self.key: Any = None
        self.key_event: Any = None
        self.merges: list[list[dict[Any, Any]]] | None = None  # per ``<<`` key, what it merges


def load_all(text: str, limits: Limits) -> Iterator[Any]:
    """Every document of ``text``; raises ``Fallback`` (before yielding any) for input to read the slow way."""
    if _CParser is None:
        raise Fallback("no libyaml")
    parser = _CParser(text)
    scalars = _Scalars()
    out: list[Any] = []
    event: Any
    while not isinstance(event := parser.get_event(), StreamEndEvent):
        if isinstance(event, DocumentStartEvent):
            if len(out) >= limits.max_documents:
                raise TooLarge(f"more than {limits.max_documents:,} documents (line {_line(event)})")
            out.append(_document(parser, scalars, limits))
    return iter(out)


def _document(parser: Any, scalars: _Scalars, limits: Limits) -> Any:
    anchors: dict[str, tuple[Any, int, int]] = {}  # anchor -> (value, count, height)
    open_anchors: set[str] = set()
    stack: list[_Open] = []
    result: Any = None
    while True:
        event: Any = parser.get_event()
        if isinstance(event, DocumentEndEvent):
            return result
        if isinstance(event, (MappingStartEvent, SequenceStartEvent)):
            if event.tag is not None:
                raise Fallback(event.tag)
            if len(stack) >= limits.max_depth:
                line = _line(event)
                raise TooLarge(f"collections nested more than {limits.max_depth} deep (line {line})")
            opened = _Open({} if isinstance(event, MappingStartEvent) else [], event)
            if opened.anchor is not None:
                _new_anchor(opened.anchor, anchors, open_anchors, event)
                open_anchors.add(opened.anchor)
            stack.append(opened)
            continue
        if isinstance(event, (MappingEndEvent, SequenceEndEvent)):
            closed = stack.pop()
            value: Any = closed.value
            if closed.merges is not None:
                value = _merged(closed.merges, value)
            count, height = closed.count, closed.height
            if count > limits.max_nodes:
                raise TooLarge(
                    f"the document expands to more than {limits.max_nodes:,} values "
                    f"(line {_line(closed.event)}: aliases that repeat large parts?)"
                )
            if height > limits.max_depth:
                raise TooLarge(f"collections nested more than {limits.max_depth} deep once aliases are expanded")
            if closed.anchor is not None:
                open_anchors.discard(closed.anchor)
                anchors[closed.anchor] = (value, count, height)
        elif isinstance(event, ScalarEvent):
            if event.tag is not None:
                raise Fallback(event.tag)
            value = scalars.plain(event.value, event) if event.implicit[0] else event.value
            count, height = 1, 1
            if event.anchor is not None:
                _new_anchor(event.anchor, anchors, open_anchors, event)
                anchors[event.anchor] = (value, 1, 1)
        elif isinstance(event, AliasEvent):
            if event.anchor in open_anchors:
                raise Fallback("recursive alias")
            if event.anchor not in anchors:
                raise yaml.composer.ComposerError(None, None, f"found undefined alias {event.anchor!r}", _mark(event))
            value, count, height = anchors[event.anchor]
        else:
            raise Fallback(type(event).__name__)
        if not stack:
            result = value
            continue
        _add(stack[-1], value, count, height, event, limits)


def _mark(event: Any) -> Any:
    """Where an event starts (libyaml's marks and PyYAML's are alike but typed apart)."""
    return event.start_mark


def _line(event: Any) -> int:
    return int(event.start_mark.line) + 1


def _new_anchor(name: str, anchors: dict[str, Any], open_anchors: set[str], event: Any) -> None:
    if name in anchors or name in open_anchors:
        raise yaml.composer.ComposerError(None, None, f"found duplicate anchor {name!r}", _mark(event))


def _add(parent: _Open, value: Any, count: int, height: int, event: Any, limits: Limits) -> None:
    """Put ``value`` into the collection being built (as a key, or as the value of the pending key)."""
    parent.count += count
    parent.height = max(parent.height, height + 1)
    if isinstance(parent.value, list):
        if len(parent.value) >= limits.max_items:
            raise TooLarge(f"a list of more than {limits.max_items:,} items (line {_line(event)})")
        parent.value.append(value)
        return
    if parent.key_event is None:  # a key
        if value is not _MERGE_KEY:
            try:
                hash(value)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", _mark(parent.event), "found unhashable key", _mark(event)
                ) from None
            if value in parent.value:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {value!r} (line {_line(event)})", _mark(event)
                )
        parent.key, parent.key_event = value, event
        return
    key, parent.key, parent.key_event = parent.key, None, None
    if key is _MERGE_KEY:
        parent.merges = [*(parent.merges or []), _merge_sources(value, event)]
    else:
        parent.value[key] = value


def _merge_sources(value: Any, event: Any) -> list[dict[Any, Any]]:
    """What a ``<<`` merges: one mapping, or a list of them (earlier ones win, as PyYAML)."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return list(value)
    raise yaml.constructor.ConstructorError(
        "while constructing a mapping", None, "expected a mapping or list of mappings for merging", _mark(event)
    )


def _merged(merges: list[list[dict[Any, Any]]], own: dict[Any, Any]) -> dict[Any, Any]:
    """PyYAML's order: each ``<<`` in turn (a later one wins), within one the earlier mapping wins,
    and the mapping's own keys win over everything merged."""
    out: dict[Any, Any] = {}
    for sources in merges:
        for source in reversed(sources):
            out.update(source)
    out.update(own)
    return out
