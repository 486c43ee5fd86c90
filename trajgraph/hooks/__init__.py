"""Agent hooks: trajgraph inside the agent's own loop (docs/hooks.md)."""
