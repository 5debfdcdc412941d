"""Reading YAML input for the CLI: files, folders or stdin, with errors users can act on.

Every problem is reported as ``FILE: document N: path: message`` and the command exits with
status 2 (unreadable input) before anything is written.

Input is bounded before it can cost memory or time (``Limits``): the bytes read, how deep
collections nest (checked while composing, so a pathological file is refused instead of ending
in a ``RecursionError``), and how many nodes a document has once its aliases are expanded,
counted on the composed graph before any Python object is built (a few hundred bytes of YAML
aliases can stand for gigabytes).

Where PyYAML has libyaml (its wheels do), values are built straight from libyaml's events
(``yaml_builder``, with the same limits and errors); input it leaves aside (explicit tags,
recursive aliases) and PyYAML without libyaml go through the node-based loader here, whose limits
hold as nodes are composed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.events import MappingStartEvent, SequenceStartEvent

from admission.cli import yaml_builder
from admission.cli.yaml_builder import Limits, TooLarge
from queues import errors


class Unreadable(Exception):
    """Input that cannot be read at all (missing file, malformed YAML): exit status 2."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


@dataclass(frozen=True, slots=True)
class Document:
    source: str  # file name or "-"
    index: int  # 0-based position in its file
    body: Any

    @property
    def where(self) -> str:
        return f"{self.source}: document {self.index + 1}"


# Kueue objects: each is at most 1.5 MiB once stored (Kubernetes' own limit); a file of 10,000
# ClusterQueues is ~6 MiB and applies in seconds; 20,000 objects are a few hundred MB to read.
# Scenarios: Kueue's large-scale benchmark is ~25 MiB, 50,000 workloads and ~4 million nodes.
OBJECTS = Limits(max_bytes=32 * 1024 * 1024, max_nodes=200_000, max_items=100_000, max_documents=20_000)
SCENARIO = Limits(max_bytes=64 * 1024 * 1024, max_nodes=40_000_000, max_items=100_000, max_documents=1)


if TYPE_CHECKING:
    _Base = yaml.SafeLoader  # (as typed: the same interface)
else:
    try:  # libyaml's parser (events), with PyYAML's own composer, constructor and resolver
        from yaml._yaml import CParser
        from yaml.composer import Composer
        from yaml.constructor import SafeConstructor
        from yaml.resolver import Resolver

        class _Base(Composer, CParser, SafeConstructor, Resolver):
            def __init__(self, stream):
                CParser.__init__(self, stream)
                Composer.__init__(self)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)

    except ImportError:  # a PyYAML built without libyaml: the pure-Python scanner and parser
        _Base = yaml.SafeLoader


class _Loader(_Base):
    """A safe loader that keeps Kubernetes' YAML 1.1 quirks but refuses duplicate keys, nesting
    deeper than its limit, and documents whose aliases expand beyond its limit."""

    limits = OBJECTS

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > self.limits.max_depth and self.check_event(MappingStartEvent, SequenceStartEvent):
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise TooLarge(f"collections nested more than {self.limits.max_depth} deep (line {mark.line + 1})")
            if isinstance(index, int) and index >= self.limits.max_items:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise TooLarge(f"a list of more than {self.limits.max_items:,} items (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expansion(node, self.limits)
        return super().construct_document(node)


def _check_expansion(root: yaml.Node, limits: Limits) -> None:
    """Count the nodes and depth of ``root`` with every alias expanded, on the composed graph (an
    alias is the same node object as its anchor), without building anything: memoized, iterative."""
    memo: dict[int, tuple[int, int]] = {}  # node -> (nodes below and itself, height)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in memo:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in memo)
            continue
        count = 1 + sum(memo[id(c)][0] for c in children)
        height = 1 + max((memo[id(c)][1] for c in children), default=0)
        if count > limits.max_nodes:
            line = node.start_mark.line + 1
            raise TooLarge(
                f"the document expands to more than {limits.max_nodes:,} values (line {line}: "
                "aliases that repeat large parts?)"
            )
        if height > limits.max_depth:
            raise TooLarge(f"collections nested more than {limits.max_depth} deep once aliases are expanded")
        memo[id(node)] = (count, height)


def _no_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` merges; explicit keys may override merged ones
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
            ) from None
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (line {mark.line + 1})", mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _read_text(path: str, limits: Limits) -> str:
    too_big = f"{path}: larger than {limits.describe_bytes()}; split it into several files"
    if path == "-":
        data = sys.stdin.buffer.read(limits.max_bytes + 1)
        if len(data) > limits.max_bytes:
            raise Unreadable([too_big])
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Unreadable([f"{path}: cannot be read: {exc}"]) from None
    p = Path(path)
    if not p.exists():
        raise Unreadable([f"{path}: no such file or folder"])
    if p.is_dir():
        raise Unreadable([f"{path}: is a folder; name a YAML file"])
    try:
        if p.stat().st_size > limits.max_bytes:
            raise Unreadable([too_big])
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Unreadable([f"{path}: cannot be read: {exc}"]) from None


def _loader(limits: Limits) -> type[_Loader]:
    return type("_BoundedLoader", (_Loader,), {"limits": limits})


def load_documents(path: str, limits: Limits = OBJECTS) -> list[Document]:
    """Every YAML document of a file, of each ``*.yaml``/``*.yml`` in a folder, or of stdin."""
    if path != "-" and Path(path).is_dir():
        files = sorted(p for p in Path(path).rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise Unreadable([f"{path}: the folder holds no .yaml or .yml files"])
        out: list[Document] = []
        problems: list[str] = []
        for f in files:
            try:
                out.extend(load_documents(str(f), limits))
            except Unreadable as exc:
                problems.extend(exc.lines)
        if problems:
            raise Unreadable(problems)
        return out
    bodies = parse(_read_text(path, limits), path, limits)
    docs = [Document(path, i, b) for i, b in enumerate(bodies) if b is not None]
    for doc in list(docs):
        if isinstance(doc.body, dict) and doc.body.get("kind") == "List" and isinstance(doc.body.get("items"), list):
            docs.remove(doc)
            docs.extend(Document(path, doc.index, item) for item in doc.body["items"])
    return docs


def parse(text: str, path: str, limits: Limits, *, fast: bool = True) -> list[Any]:
    """The documents of YAML ``text`` read from ``path``; ``fast=False`` forces the node-based loader
    (the reference the fast path is tested against)."""
    try:
        try:
            if not fast:
                raise yaml_builder.Fallback("asked")
            return list(yaml_builder.load_all(text, limits))
        except yaml_builder.Fallback:  # an explicit tag, a recursive alias: PyYAML's own nodes
            out: list[Any] = []
            for body in yaml.load_all(text, Loader=_loader(limits)):
                if len(out) >= limits.max_documents:
                    raise TooLarge(f"more than {limits.max_documents:,} documents") from None
                out.append(body)
            return out
    except TooLarge as exc:
        split = "; split it into several files" if "documents" in str(exc) else ""
        raise Unreadable([f"{path}: refused: {exc}{split}"]) from None
    except RecursionError:
        raise Unreadable([f"{path}: refused: nested too deeply"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "maximum nesting depth" in problem:  # libyaml's own bound (1,000), met before ours
            raise Unreadable(
                [f"{path}: refused: collections nested more than {limits.max_depth} deep{where}"]
            ) from None
        raise Unreadable([f"{path}: not valid YAML{where}: {problem}"]) from None


def load_single(path: str) -> Any:
    """The one YAML document of ``path`` (scenario files)."""
    docs = load_documents(path, SCENARIO)
    if len(docs) != 1:
        raise Unreadable([f"{path}: expected one YAML document, found {len(docs)}"])
    return docs[0].body


def invalid_lines(where: str, exc: errors.Invalid) -> list[str]:
    return [f"{where}: {e}" for e in exc.errors]
