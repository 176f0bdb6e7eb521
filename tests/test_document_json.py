"""The JSON document's text: indented, one compact line per compare node, the same data."""

from __future__ import annotations

import contextlib
import json

from pytest_accuracy.report.document import document_text


def test_nodes_are_one_line_each_and_the_data_is_unchanged() -> None:
    nodes = [{"npu_name": name, "step": 0, "rank": 0, "max_diff": 1.5e-3, "findings": [],
              "tolerance": {"rel_err": 1e-4}} for name in
             ('Tensor.add.0.forward', 'odd "quoted"\nname', '"nodes-0"', "\u2028sep")]
    doc = {"version": 1, "inputs": {"npu": "nodes-ffff"},
           "compare": {"first_divergence": None, "nodes": nodes}, "loss": {"nodes": "x"}}
    text = document_text(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    start = lines.index('    "nodes": [')
    assert lines[start + 1 : start + 5] == ["      " + json.dumps(n) + ("," if i < 3 else "")
                                            for i, n in enumerate(nodes)]
    assert lines[start + 5] == "    ]"


def test_without_compare_nodes_it_is_plain_indented_json() -> None:
    doc = {"version": 1, "compare": {"nodes": []}, "loss": {"verdict": "pass"}}
    assert document_text(doc) == json.dumps(doc, indent=2)


def test_records_kept_in_process_are_exactly_what_json_gives_back() -> None:
    """In process a record skips the JSON round trip only when the trip would not change it."""
    import numpy as np

    from pytest_accuracy.report.records import json_native

    native = {"a": [1, 2.5, None, True, "x", {"b": [], "c": {"d": -3}}]}
    assert json_native(native) and json.loads(json.dumps(native)) == native
    for changed in ({"a": (1, 2)}, {1: "x"}, {"a": np.float32(0.5)}, {"a": [{"b": np.int64(3)}]},
                    {"a": {"b": {1, 2}}}):
        assert not json_native(changed)
        with contextlib.suppress(TypeError):  # not even JSON: it would travel as text
            assert json.loads(json.dumps(changed, default=str)) != changed
