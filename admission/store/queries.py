"""The store's hand-written SQL, by name: one file (``queries.sql``) with each statement's locking.

Why one place (issue 33): raw SQL used to sit in a dozen store modules, some built with
f-strings, so a reviewer could not see at once what the store says to PostgreSQL and what each
statement locks. Now SQLAlchemy Core builds what it can (``select``/``insert`` over
``admission.store.tables``); everything else is a named entry of ``queries.sql`` whose header
says what it locks (procrastinate's ``sql/queries.sql`` is the model), and the store modules ask
for it by name: ``query("intake_upsert")``. A name that does not exist fails at import.

The file's format (its header says it too): ``-- name:``, ``-- fragment:`` or ``-- template:``,
then ``-- locks:`` (a statement or template) and any comment, then the text. A fragment is an expression several
statements share, written ``{name}`` in them and expanded here; a template is text that one
builder formats itself (right-sizing writes one column per GPU resource, so its report cannot be
one fixed statement) and is returned as a string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from sqlalchemy import TextClause, text

_HEADER = re.compile(r"^-- (name|fragment|template): ([a-z_]+)\s*$")
_REFERENCE = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str  # name, fragment or template
    name: str
    comment: str  # the header's comment lines, ``locks:`` included
    sql: str  # the text, fragments expanded, without a trailing semicolon


def parse(source: str) -> dict[str, Entry]:
    """The entries of a queries file by name; ``ValueError`` naming the entry for one without a
    ``-- locks:`` line, a name given twice, or a statement referring to no known fragment."""
    entries: dict[str, Entry] = {}
    fragments: dict[str, str] = {}
    current: tuple[str, str] | None = None
    comment: list[str] = []
    body: list[str] = []

    def close() -> None:
        if current is None:
            return
        kind, name = current
        if name in entries:
            raise ValueError(f"queries.sql: {name!r} is defined twice")
        if kind != "fragment" and not any(line.startswith("locks:") for line in comment):
            raise ValueError(f"queries.sql: {kind} {name!r} has no '-- locks:' line saying what it locks")
        sql = "\n".join(body).strip().removesuffix(";").strip()
        if kind != "template":  # (a template's {placeholders} are its builder's)
            sql = _expand(name, sql, fragments)
        if kind == "fragment":
            fragments[name] = sql
        entries[name] = Entry(kind, name, "\n".join(comment), sql)

    for line in source.splitlines():
        header = _HEADER.match(line)
        if header:
            close()
            current, comment, body = (header.group(1), header.group(2)), [], []
        elif current is not None and not body and line.startswith("--"):
            comment.append(line.removeprefix("--").strip())
        elif current is not None and (body or line.strip()):
            if line.startswith("-- ----"):  # (a section's rule ends the entry before it)
                close()
                current = None
            else:
                body.append(line)
    close()
    return entries


def _expand(name: str, sql: str, fragments: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        found = fragments.get(match.group(1))
        if found is None:
            raise ValueError(
                f"queries.sql: {name!r} refers to {{{match.group(1)}}}, which no fragment above it defines"
            )
        return found

    return _REFERENCE.sub(replace, sql)


@cache
def entries() -> dict[str, Entry]:
    """Every entry of the store's ``queries.sql``."""
    return parse(resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8"))


def _entry(name: str, kind: str) -> Entry:
    entry = entries().get(name)
    if entry is None or entry.kind != kind:
        raise KeyError(f"admission/store/queries.sql has no {kind} {name!r}")
    return entry


@cache
def query(name: str) -> TextClause:
    """Statement ``name``, ready to execute."""
    return text(_entry(name, "name").sql)


def template(name: str) -> str:
    """Template ``name``'s text, for its one builder to format."""
    return _entry(name, "template").sql


def built(name: str, **fields: str) -> TextClause:
    """Template ``name`` with its ``{fields}`` filled by its builder, ready to execute."""
    return text(template(name).format(**fields))
