"""`trajgraph eval`: retrieval scored against baselines on episodes with known answers.

``harness`` runs the methods and scores them; ``synthetic`` generates episodes whose simulator
knows every answer; ``judge`` asks an LLM to grade answers (``--judge``).
"""
