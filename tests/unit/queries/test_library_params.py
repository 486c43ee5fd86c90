"""The analyst library's parameter contract: the ``params`` header line, read and enforced.

Before, a value of the wrong type reached Neo4j and came back as an empty answer (``depth`` as
a string: every ``hops <= '3'`` is null) or as Neo4j's message with offsets (``limit`` -1 or
``'abc'``); a misspelt name was ignored; a trajectory id typed as digits became an integer.
"""

from __future__ import annotations

from typing import Any

import pytest

from trajgraph.core.errors import ConfigError
from trajgraph.queries import library


def test_every_header_declares_typed_params() -> None:
    for name in library.names():
        params = library.load(name).params
        assert params["tenant"].kind == "string" and not params["tenant"].nullable, name
        for p in params.values():
            assert p.kind in ("int", "string") and p.description, (name, p)


def test_header_types_and_bounds() -> None:
    why = library.load("why_chain").params
    assert (why["depth"].kind, why["depth"].low, why["depth"].high) == ("int", 1, 10)
    assert (why["turn"].kind, why["turn"].low, why["turn"].nullable) == ("int", 0, True)
    assert (why["state"].kind, why["state"].nullable) == ("string", True)
    assert not why["trajectory"].nullable
    limit = library.load("longest_causal_chains").params["limit"]
    assert (limit.low, limit.high) == (1, 1000)
    assert library.load("repeated_actions").params["min_runs"].low == 2


def _good(name: str) -> dict[str, Any]:
    values = {"int": 2, "string": "x"}
    return {p.name: values[p.kind] for p in library.load(name).params.values()}


@pytest.mark.parametrize("name", library.names())
def test_well_typed_params_pass(name: str) -> None:
    library.check_params(library.load(name), _good(name))


@pytest.mark.parametrize("name", library.names())
def test_each_param_left_out_misspelt_or_mistyped_is_named(name: str) -> None:
    query = library.load(name)
    for pname, param in query.params.items():
        missing = _good(name)
        del missing[pname]
        with pytest.raises(ConfigError, match=f"'{pname}'.*--param"):
            library.check_params(query, missing)
        wrong = dict(_good(name), **{pname: "3" if param.kind == "int" else 3})
        with pytest.raises(ConfigError, match=f"{pname} must be"):
            library.check_params(query, wrong)
        for value in (True, [1], {"a": 1}, 2.5):
            with pytest.raises(ConfigError, match=f"{pname} must be"):
                library.check_params(query, dict(_good(name), **{pname: value}))
        if not param.nullable:
            with pytest.raises(ConfigError, match=f"{pname} cannot be null"):
                library.check_params(query, dict(_good(name), **{pname: None}))
    with pytest.raises(ConfigError, match="no parameter 'trajectroy'"):
        library.check_params(query, dict(_good(name), trajectroy="x"))


@pytest.mark.parametrize(
    ("name", "param", "value"),
    [
        ("why_chain", "depth", 0),
        ("why_chain", "depth", 11),
        ("effects_of", "turn", -1),
        ("longest_causal_chains", "limit", -1),
        ("longest_causal_chains", "limit", 10**9),
        ("repeated_actions", "min_runs", 1),
        ("recurring_failures", "min_runs", 2**70),  # beyond Neo4j's 64-bit integers
    ],
)
def test_ints_out_of_their_range_are_refused(name: str, param: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"{param} must be between") as e:
        library.check_params(library.load(name), dict(_good(name), **{param: value}))
    assert len(str(e.value)) < 200


def test_command_line_values_are_read_by_the_header() -> None:
    got = library.coerce_text_params(
        "why_chain",
        {"trajectory": "123", "turn": "7", "state": "null", "depth": "3", "tenant": '"a b"'},
    )
    assert got == {"trajectory": "123", "turn": 7, "state": None, "depth": 3, "tenant": "a b"}
    # What is not an integer stays text, for check_params to refuse with the param's name.
    got = library.coerce_text_params("longest_causal_chains", {"limit": "abc", "extra": "[1]"})
    assert got == {"limit": "abc", "extra": [1]}
    with pytest.raises(ConfigError, match="limit must be an integer"):
        library.check_params(
            library.load("longest_causal_chains"),
            {"tenant": "t", "trajectory": "x", "limit": "abc"},
        )
