"""The ground floor: what every stage and front end shares, importing nothing of theirs.

Errors (one root, ``TrajgraphError``), settings (read from the environment only at the edge
and passed in), limits, redaction of secrets in what is printed, token counting, the local
processes trajgraph starts (pid files, Java and Maven for the JVM ones) and the SQLite stores.
The import contracts in pyproject.toml (``lint-imports``) keep it at the bottom.
"""
