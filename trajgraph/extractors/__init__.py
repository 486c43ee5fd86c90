"""Extractors turn windows into states, objects and edges (see schemas/extraction.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import LLMSettings, LocalLLMSettings, local_llm_endpoint
from trajgraph.core.stages import refuse_bare_name

if TYPE_CHECKING:
    from trajgraph.extractors.base import Extractor

refuse_bare_name(__name__)  # loads only as trajgraph.extractors (trajgraph/core/stages.py)

EXTRACTORS = ("auto", "heuristic", "llm")


def resolve(name: str, llm: LLMSettings) -> str:
    """``auto`` is the LLM when one is configured (TRAJGRAPH_LLM_MODEL), else the heuristic."""
    if name == "auto":
        return "llm" if llm.configured else "heuristic"
    if name not in EXTRACTORS:
        raise ConfigError(f"unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}")
    return name


def llm_for(name: str, llm: LLMSettings, local: LocalLLMSettings) -> LLMSettings:
    """The LLM settings for extractor ``name``: ``--extractor llm`` with no model configured
    uses the embedded server (`trajgraph llm start`) when it has been started."""
    if name == "llm" and not llm.configured and (local.run_dir / "server.json").is_file():
        return local_llm_endpoint(llm, local)
    return llm


def get_extractor(
    name: str, *, llm: LLMSettings | None = None, use_cache: bool = True
) -> Extractor:
    """The extractor called ``name``; ConfigError for an unknown name or a missing model."""
    llm = llm or LLMSettings()
    name = resolve(name, llm)
    if name == "llm":
        from trajgraph.extractors.llm import LLMExtractor

        return LLMExtractor(llm, use_cache=use_cache)
    from trajgraph.extractors.heuristic import HeuristicExtractor

    return HeuristicExtractor()
