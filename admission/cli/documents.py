"""Reading YAML input for the CLI: files, folders or stdin, with errors users can act on.

Every problem is reported as ``FILE: document N: path: message`` and the command exits with
status 2 (unreadable input) before anything is written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

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


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps Kubernetes' YAML 1.1 quirks but refuses duplicate keys."""


def _no_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` merges; explicit keys may override merged ones
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (line {mark.line + 1})", mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.exists():
        raise Unreadable([f"{path}: no such file or folder"])
    if p.is_dir():
        raise Unreadable([f"{path}: is a folder; name a YAML file"])
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Unreadable([f"{path}: cannot be read: {exc}"]) from None


def load_documents(path: str) -> list[Document]:
    """Every YAML document of a file, of each ``*.yaml``/``*.yml`` in a folder, or of stdin."""
    if path != "-" and Path(path).is_dir():
        files = sorted(p for p in Path(path).rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise Unreadable([f"{path}: the folder holds no .yaml or .yml files"])
        out: list[Document] = []
        problems: list[str] = []
        for f in files:
            try:
                out.extend(load_documents(str(f)))
            except Unreadable as exc:
                problems.extend(exc.lines)
        if problems:
            raise Unreadable(problems)
        return out
    text = _read_text(path)
    try:
        bodies = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise Unreadable([f"{path}: not valid YAML{where}: {problem}"]) from None
    docs = [Document(path, i, b) for i, b in enumerate(bodies) if b is not None]
    for doc in list(docs):
        if isinstance(doc.body, dict) and doc.body.get("kind") == "List" and isinstance(doc.body.get("items"), list):
            docs.remove(doc)
            docs.extend(Document(path, doc.index, item) for item in doc.body["items"])
    return docs


def load_single(path: str) -> Any:
    """The one YAML document of ``path`` (scenario files)."""
    docs = load_documents(path)
    if len(docs) != 1:
        raise Unreadable([f"{path}: expected one YAML document, found {len(docs)}"])
    return docs[0].body


def invalid_lines(where: str, exc: errors.Invalid) -> list[str]:
    return [f"{where}: {e}" for e in exc.errors]
