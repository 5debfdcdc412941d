"""The fast YAML path (values built from libyaml's events) against the node-based loader it stands
in for: the same values for every YAML file in this repository and for the corners of YAML 1.1
that Kubernetes files meet (merge keys, anchors, implicit types), and a refusal wherever the
reference refuses, with the line."""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import pytest

from admission.cli import documents, yaml_builder

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    p
    for folder in ("examples", "manifests", "tests", "docs")
    for p in (ROOT / folder).rglob("*.y*ml")
    if p.suffix in (".yaml", ".yml")
)

CORNERS = {
    "merge one": "base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\n",
    "merge list, earlier wins": "p: &p {a: 1}\nq: &q {a: 2, c: 3}\nx: {<<: [*p, *q], d: 4}\n",
    "merge inline": "x:\n  <<: {a: 1, b: 2}\n  a: 0\n",
    "anchored scalar": "a: &v 42\nb: *v\nc: [*v, *v]\n",
    "shared object": "a: &l [1, 2]\nb: *l\n",
    "implicit types": (
        "i: 12\nneg: -3\nhex: 0x1F\noct: 017\nsep: 1_000\nsexa: 1:20\nf: 1.5\nexp: 6.8e+3\ninf: .inf\n"
        "nan: .NaN\nt: yes\nf2: Off\nn: ~\nn2: null\nempty:\nd: 2001-12-14\nts: 2001-12-14t21:59:43.10-05:00\n"
        "s: '12'\nq: \"yes\"\nplain: hello world\nver: 1.20\nzero: 0\ntilde_str: '~'\n"
    ),
    "keys of all kinds": "1: one\nfalse: no\n~: null\n2.5: f\n'1': str\n",
    "block scalars": "a: |\n  line 1\n  line 2\nb: >\n  folded\n  text\nc: |-\n  keep\n",
    "flow": "a: {b: [1, {c: d}], e: []}\nf: {}\n",
    "several documents": "a: 1\n---\n# only a comment\n---\n- 1\n- 2\n---\n",
    "unicode": 'name: "caf\\u00e9"\nemoji: 🚀\n',
    "a List": "kind: List\nitems:\n- {kind: A}\n- {kind: B}\n",
    "explicit tags (slow path)": "a: !!str 123\nb: !!binary aGVsbG8=\nc: !!set {x, y}\nd: !!int '7'\n",
    "quoted merge key is a key": "'<<': 1\nb: 2\n",
    "deep but allowed": "a: " + "[" * 60 + "1" + "]" * 60 + "\n",
}

REFUSED = {
    "duplicate key": "a: 1\nb: 2\na: 3\n",
    "duplicate key by value": "1: a\n1.0: b\n",
    "undefined alias": "a: *nope\n",
    "duplicate anchor": "a: &x 1\nb: &x 2\n",
    "unhashable key": "? [1, 2]\n: x\n",
    "value tag": "a: =\n",
    "unknown tag": "a: !foo 1\n",
    "bad merge": "a:\n  <<: 3\n",
    "too deep": "a: " + "[" * 70 + "]" * 70 + "\n",
    "malformed": "a: [1, 2\nb: 3\n",
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _both(text: str, limits: documents.Limits = documents.OBJECTS) -> tuple[Any, Any]:
    out = []
    for fast in (True, False):
        try:
            out.append(documents.parse(text, "f.yaml", limits, fast=fast))
        except documents.Unreadable as exc:
            out.append(exc)
    return out[0], out[1]


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_yaml_file_of_the_repository_reads_the_same(path: Path) -> None:
    fast, slow = _both(path.read_text(), documents.SCENARIO)
    if isinstance(slow, documents.Unreadable):
        assert isinstance(fast, documents.Unreadable), fast
    else:
        assert _same(fast, slow)


@pytest.mark.parametrize("name", list(CORNERS))
def test_yaml_corners_read_the_same(name: str) -> None:
    fast, slow = _both(CORNERS[name])
    assert not isinstance(slow, documents.Unreadable), slow
    assert _same(fast, slow), (fast, slow)


def test_the_corners_mean_what_kubernetes_yaml_means() -> None:
    """Spot checks that the reference itself is YAML 1.1, as Kubernetes reads it."""
    (doc,) = documents.parse(CORNERS["implicit types"], "f.yaml", documents.OBJECTS)
    assert doc["oct"] == 15 and doc["sexa"] == 80 and doc["t"] is True and doc["f2"] is False
    assert doc["ver"] == 1.2 and doc["s"] == "12" and doc["q"] == "yes" and doc["empty"] is None
    assert doc["d"] == datetime.date(2001, 12, 14)
    (merged,) = [d["x"] for d in documents.parse(CORNERS["merge list, earlier wins"], "f", documents.OBJECTS)]
    assert merged == {"a": 1, "c": 3, "d": 4}


def test_merge_keys_follow_the_yaml_merge_spec() -> None:
    """In a ``<<`` list the earlier mapping wins and the mapping's own keys win over merged ones (the
    merge spec; Kubernetes' go-yaml does the same). PyYAML 6.0.4 decides repeated keys across merged
    mappings by the identity of the key's string, so for keys longer than one character its answer
    flips; the fast path does not copy that."""
    text = (
        "p: &p {abc: 1}\nq: &q {abc: 2, d: 4}\nx: {<<: [*p, *q]}\ny:\n  <<: *p\n  <<: *q\nz: {<<: [*p, *q], abc: 3}\n"
    )
    (doc,) = list(yaml_builder.load_all(text, documents.OBJECTS))
    assert doc["x"] == {"abc": 1, "d": 4}
    assert doc["y"] == {"abc": 2, "d": 4}  # two ``<<`` keys: each in turn, the later one wins
    assert doc["z"] == {"abc": 3, "d": 4}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_reference_refuses_is_refused_with_the_line(name: str) -> None:
    fast, slow = _both(REFUSED[name])
    assert isinstance(slow, documents.Unreadable), f"the reference accepts it: {slow}"
    assert isinstance(fast, documents.Unreadable), f"the fast path accepts it: {fast}"
    assert "line" in fast.lines[0], fast.lines


def test_limits_hold_on_the_fast_path() -> None:
    small = documents.Limits(max_bytes=1 << 20, max_nodes=50, max_items=10)
    bomb = "a: &a [1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a]\nc: [*b, *b, *b]\n"
    with pytest.raises(documents.Unreadable, match="expands to more than 50 values"):
        documents.parse(bomb, "f", small)
    with pytest.raises(documents.Unreadable, match="a list of more than 10 items"):
        documents.parse("a: [" + ", ".join(["1"] * 11) + "]\n", "f", small)
    # nothing about these needs the slow path: the fast path refused them itself
    with pytest.raises(yaml_builder.TooLarge):
        list(yaml_builder.load_all(bomb, small))


def test_rare_input_is_left_to_the_node_based_loader() -> None:
    for text in ("a: !!binary aGVsbG8=\n", "a: &x [*x]\n", "a: =\n"):
        with pytest.raises(yaml_builder.Fallback):
            list(yaml_builder.load_all(text, documents.OBJECTS))
