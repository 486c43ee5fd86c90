"""The steps a question names: "Why did X fail at step 412?": the steps it names, and what
they produced, are better seeds than anything similarity finds (a long run has many
look-alikes). The graph walk starts from them alone when there are any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajgraph.graph import node_ids
from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.base import Found
from trajgraph.queries.retrieval.strategy import Strategy

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.router import Route
    from trajgraph.queries.retrieval.run import Run

MAX_NAMED = 6  # steps named in a question ("at step 412", "turns 8-9") taken as seeds


class NamedSteps(Strategy):
    name = "anchors"

    def applies(self, run: Run) -> bool:
        return run.tuid is not None

    def find(self, run: Run, route: Route) -> Found:
        """The states the named turns produced, then the turns (the walk's starts, in
        this order)."""
        anchors = run.named
        idxs = list(anchors.points)
        for lo, hi in anchors.ranges:
            idxs += [lo, hi]
        idxs = list(dict.fromkeys(idxs))[:MAX_NAMED]
        found = Found()
        if not idxs:
            return found
        trajectory = run.ask.trajectory or ""
        uids = [node_ids.turn_uid(run.ask.tenant, trajectory, i) for i in idxs]
        for r in run.read(cypher.STATES_AT_TURNS, uids=uids):
            found.hit(r["uid"], "anchor", "a result of the turn the question names", 1.0)
        for uid in uids:  # one that does not exist stays pending and is dropped
            found.hit(uid, "anchor", "the turn the question names", 1.0)
        return found
