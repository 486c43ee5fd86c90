"""The public surface: ``trajgraph.__all__`` (the client, settings loading, the errors),
loaded on first use so that ``import trajgraph`` stays cheap; ``trajgraph.core.errors.__all__``
names every error class, all under the one root."""

from __future__ import annotations

import inspect
import json
import pickle
import subprocess
import sys

import trajgraph
from trajgraph.client import TrajGraph
from trajgraph.core import errors
from trajgraph.core.settings import Settings, load


def test_every_public_name_resolves_to_where_it_lives() -> None:
    assert trajgraph.TrajGraph is TrajGraph
    assert trajgraph.Settings is Settings
    assert trajgraph.load_settings is load
    assert isinstance(trajgraph.load_settings({}), Settings)
    for name in trajgraph.__all__:
        assert getattr(trajgraph, name) is not None, name
    assert set(trajgraph.__all__) <= set(dir(trajgraph))
    assert isinstance(trajgraph.__version__, str) and trajgraph.__version__


def test_every_error_class_is_public_and_under_the_one_root() -> None:
    classes = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException)
    }
    assert classes <= set(errors.__all__)
    assert classes <= set(trajgraph.__all__)
    for name in classes:
        assert issubclass(getattr(errors, name), errors.TrajgraphError), name
        assert getattr(trajgraph, name) is getattr(errors, name)


def test_an_api_error_answers_with_its_own_status_and_pickles() -> None:
    e = errors.ApiError(504, "timeout", "no answer within 30s")
    m = errors.meaning(e)
    assert (m.http_status, m.code, m.exit_code) == (504, "timeout", errors.EXIT_FAILED)
    assert errors.meaning(errors.ApiError(401, "unauthorized", "x")).exit_code == 2
    again = pickle.loads(pickle.dumps(e))
    assert (again.status, again.code, again.message) == (504, "timeout", "no answer within 30s")


def test_import_trajgraph_loads_none_of_them() -> None:
    probe = (
        "import json, sys, trajgraph; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('trajgraph', 'neo4j', "
        "'numpy', 'pydantic', 'apache_beam')))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(out.stdout) == ["trajgraph"]
