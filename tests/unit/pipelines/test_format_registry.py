"""The format registry (pipelines/adapters/detect.REGISTRY) is the one list of log formats:
the ``--format`` choices, the table of docs/formats.md and the schema's enum follow it."""

from __future__ import annotations

import argparse
import re

from tests.paths import REPO
from trajgraph.pipelines import ingest_pipeline
from trajgraph.pipelines.adapters import FORMATS
from trajgraph.pipelines.adapters.detect import BY_NAME, REGISTRY, docs_table, sniff, tried
from trajgraph.schemas.trajectory import json_schema

DOCS = REPO / "docs" / "formats.md"
_TABLE = re.compile(r"<!-- formats-table:[^>]*-->\n(.*?)\n<!-- /formats-table -->", re.DOTALL)


def test_names_are_unique_and_formats_is_the_registry() -> None:
    assert len(BY_NAME) == len(REGISTRY)
    assert tuple(f.name for f in REGISTRY) == FORMATS


def test_cli_format_choices_are_the_registry() -> None:
    parser = argparse.ArgumentParser()
    ingest_pipeline.add_arguments(parser)
    [action] = [a for a in parser._actions if "--format" in a.option_strings]
    assert tuple(action.choices or ()) == FORMATS


def test_docs_table_lists_exactly_the_registry() -> None:
    found = _TABLE.search(DOCS.read_text(encoding="utf-8"))
    assert found is not None, "docs/formats.md lost its formats-table markers"
    assert found.group(1) == docs_table(), "paste detect.docs_table() into docs/formats.md"
    rows = found.group(1).splitlines()[2:]  # below the header and its rule
    listed = [re.findall(r"^\| `([^`]+)` \|", row)[0] for row in rows]
    assert listed == list(FORMATS)


def test_every_format_has_a_section_or_a_page() -> None:
    headings = re.findall(r"^###.*$", DOCS.read_text(encoding="utf-8"), re.MULTILINE)
    headed = {name for line in headings for name in re.findall(r"`([^`]+)`", line)}
    paged = {p.stem for p in (REPO / "docs" / "formats").glob("*.md")}
    assert [n for n in FORMATS if n not in headed | paged] == []


def test_schema_enum_holds_every_format() -> None:
    enum = json_schema()["properties"]["format"]["enum"]
    assert [n for n in FORMATS if n not in enum] == []


def test_error_messages_name_every_sniffed_shape_in_sniffing_order() -> None:
    names = [part.split(":")[0] for part in tried().split("; ")]
    assert names == [f.name for f in REGISTRY if f.sniffed]
    assert "parquet" not in names  # told by its file type, never sniffed


def test_sniffing_follows_the_registry_order() -> None:
    # An AMA-bench episode also has SWE-agent's 'trajectory' list: the earlier entry wins.
    episode = {"episode_id": "e", "trajectory": [{"action": "a", "observation": "o"}], "info": {}}
    assert BY_NAME["swe-agent"].fits(episode) and BY_NAME["ama-bench"].fits(episode)
    assert sniff(episode) == "ama-bench"
    assert sniff({"turns": [], "messages": [{"role": "user", "content": "x"}]}) == "canonical"
