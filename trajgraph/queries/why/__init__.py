"""Why-chains: the upstream causal chain of a turn or state, as text, JSON or a picture."""

from trajgraph.queries.why.chain import MAX_DEPTH, render_text, why_chain
from trajgraph.queries.why.render import render_dot, render_html, render_mermaid

__all__ = ["MAX_DEPTH", "render_dot", "render_html", "render_mermaid", "render_text", "why_chain"]
