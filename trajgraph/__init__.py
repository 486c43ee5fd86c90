"""trajgraph: agent trajectories as a causality graph in Neo4j."""

__version__ = "0.1.0"
