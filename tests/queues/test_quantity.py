"""Kubernetes quantities as exact milli-unit integers."""

import pytest

from queues import quantity


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("8", 8000),
        ("500m", 500),
        ("1.5", 1500),
        ("64Gi", 64 * 2**30 * 1000),
        ("1Ti", 2**40 * 1000),
        ("2k", 2_000_000),
        ("1e3", 1_000_000),
        ("0.0001", 1),  # rounded up to one milli, as Quantity.MilliValue
        (4, 4000),
        ("+3", 3000),
        ("-1", -1000),
        (".5", 500),
    ],
    ids=lambda v: str(v),
)
def test_parses_exactly(text: str | int, milli: int) -> None:
    assert quantity.parse_milli(text) == milli


@pytest.mark.parametrize("bad", ["abc", "12Qi", "1e400", "", "1.2.3", "Gi", "9" * 30, True, None, [1]], ids=repr)
def test_refuses_what_kubernetes_refuses(bad: object) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse_milli(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("milli", "text"),
    [(8000, "8"), (500, "500m"), (64 * 2**30 * 1000, "64Gi"), (2**40 * 1000, "1Ti"), (2_000_000, "2k"), (0, "0")],
    ids=str,
)
def test_formats_canonically(milli: int, text: str) -> None:
    assert quantity.format_milli(milli) == text
    assert quantity.parse_milli(text) == milli
