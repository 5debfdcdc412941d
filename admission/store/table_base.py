"""What every table of the schema is made of: the declarative base with its constraint naming
convention, exact milli-unit quantities (NUMERIC(38,0), never floats), server-side timestamps,
and among(), the one-parameter ANY that replaces IN for large batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    MetaData,
    Numeric,
    any_,
    func,
    literal,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


NAME = 253  # Kubernetes object names (RFC 1123 subdomain)


class Milli(TypeDecorator[int]):
    """An exact quantity in milli-units: NUMERIC(38,0) in PostgreSQL, ``int`` in Python."""

    impl = Numeric(38, 0)
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: Any) -> Decimal | None:
        return None if value is None else Decimal(value)

    def process_result_value(self, value: Any, dialect: Any) -> int | None:
        return None if value is None else int(value)


def timestamp_column() -> Any:
    """A timestamp column the database fills with now() when a row is made."""
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


def among(column: Any, values: Iterable[Any]) -> ColumnElement[bool]:
    """``column = ANY($1)``: one array parameter however many values. ``IN (...)`` binds one
    parameter per value, and PostgreSQL refuses more than 32,767 in a statement, which a cycle
    that admits 50,000 workloads at once would exceed, forever."""
    condition: ColumnElement[bool] = column == any_(literal(list(values), ARRAY(column.type)))
    return condition


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSONB, int: BigInteger}
