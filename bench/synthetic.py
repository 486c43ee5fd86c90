"""Synthetic agent trajectories with exact ground truth, for the evaluation harness.

A small simulated project (config keys, source files, a test suite whose result follows from
the config) is worked on by a scripted agent: it reads files, changes config values, runs the
tests (which fail or pass by the simulator's own rule), hits and fixes errors, and in between
does a lot of ordinary reading (directory listings, log files) that pads the trajectory to a
target size. Because the simulator holds the true state at every turn, every question comes
with its exact answer and the turns that hold the evidence ("needles"), labelled by the
capability it tests (as in AMA-Bench):

* ``recall``: a verbatim detail from one turn (an error message, a checksum);
* ``causal``: why something failed: the turn that set the wrong value, and the failing run;
* ``state_updating``: the current value of a key after several changes;
* ``state_abstraction``: counts over the whole trajectory (runs of a command).

Episodes are AMA-Bench-shaped: ``{"id", "task", "turns", "qa_pairs": [{question, answer,
type, needles}]}``; the same seed gives the same episode.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from pipelines.tokens import count_tokens

KEYS = ("retries", "timeout", "pool_size", "batch", "port")
GOOD = {"retries": "5", "timeout": "30", "pool_size": "8", "batch": "64", "port": "8080"}
WORDS = [
    *("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"),
    *("lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi"),
    *("chi", "psi", "omega"),
]


@dataclass
class _Sim:
    rng: random.Random
    config: dict[str, str] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)
    # key -> [(turn, value)] every time the key was set
    history: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    runs: list[tuple[int, str, bool]] = field(default_factory=list)  # (turn, test, passed)
    tokens: int = 0  # of every action and observation so far

    def add(self, action: str, observation: str) -> int:
        idx = len(self.turns)
        self.turns.append({"idx": idx, "action": action, "observation": observation})
        self.tokens += count_tokens(action) + count_tokens(observation)
        return idx

    def set_key(self, key: str, value: str, *, how: str = "sed") -> int:
        old = self.config.get(key)
        if how == "sed" and old is not None:
            action = f"sed -i 's/^{key}=.*/{key}={value}/' config.ini"
        else:
            action = f"echo '{key}={value}' >> config.ini"
        self.config[key] = value
        idx = self.add(action, "")
        self.history.setdefault(key, []).append((idx, value))
        return idx

    def test(self, key: str) -> tuple[int, bool]:
        """Run the test of ``key``: it passes exactly when the key has its good value."""
        passed = self.config.get(key) == GOOD[key]
        name = f"tests/test_{key}.py"
        if passed:
            obs = f"{name} .\n1 passed in 0.{self.rng.randint(10, 99)}s"
        else:
            got = self.config.get(key, "unset")
            obs = (
                f"{name} F\nFAILED {name}::test_{key} - AssertionError: expected {key}="
                f"{GOOD[key]}, got {key}={got}\n1 failed in 0.{self.rng.randint(10, 99)}s"
            )
        idx = self.add(f"pytest {name} -q", obs)
        self.runs.append((idx, key, passed))
        return idx, passed

    def filler(self, tokens: int) -> None:
        """Ordinary reading that holds no answer: listings and log pages of ~tokens."""
        kind = self.rng.choice(("ls", "log", "cat"))
        lines: list[str] = []
        while count_tokens("\n".join(lines)) < tokens:
            w = self.rng.choice(WORDS)
            n = self.rng.randint(1, 999)
            if kind == "ls":
                lines.append(f"-rw-r--r-- 1 dev dev {n * 17:>6} src/{w}/{w}_{n}.py")
            elif kind == "log":
                lines.append(f"INFO worker-{n % 7} processed batch {n} of {w} in {n % 90} ms")
            else:
                lines.append(f"def {w}_{n}(x):\n    return x * {n}  # {w} helper")
        action = {
            "ls": "ls -l src/*",
            "log": "tail -n 200 logs/worker.log",
            "cat": "cat src/util.py",
        }
        self.add(action[kind], "\n".join(lines))


def generate(seed: int, target_tokens: int, *, filler_tokens: int = 350) -> dict[str, Any]:
    """One episode of about ``target_tokens`` tokens (task, actions and observations)."""
    rng = random.Random(seed)
    sim = _Sim(rng)
    keys = list(KEYS)
    rng.shuffle(keys)
    wrong = {k: str(int(GOOD[k]) + rng.choice((-3, -2, -1, 1, 2, 7))) for k in keys}
    checksum = f"{rng.getrandbits(64):016x}"
    crash = f"ConnectionRefusedError: [Errno 111] connect to db-{rng.randint(10, 99)}:5432 refused"

    sim.add("cat config.ini", "\n".join(f"{k}={wrong[k]}" for k in keys[:3]) + "\n")
    for k in keys[:3]:
        sim.history[k] = [(0, wrong[k])]
        sim.config[k] = wrong[k]
    crash_turn = sim.add(
        "python scripts/migrate.py",
        f'Traceback (most recent call last):\n  File "scripts/migrate.py", line 12\n{crash}',
    )
    sum_turn = sim.add("sha256sum dist/app.tar.gz", f"{checksum}  dist/app.tar.gz")

    script: list[tuple[str, str]] = []
    for k in keys:
        script += [("test", k), ("set_wrong", k), ("test", k), ("set_good", k), ("test", k)]
    rng.shuffle(script)
    # Filler between events spreads the events (and so the needles) over the whole horizon.
    gap = max(filler_tokens, target_tokens // (len(script) + 1))
    for op, k in script:
        goal = sim.tokens + gap
        while sim.tokens < goal - filler_tokens // 2:
            sim.filler(filler_tokens)
        if op == "test":
            sim.test(k)
        elif op == "set_wrong":
            sim.set_key(k, wrong[k], how="sed" if k in sim.config else "echo")
        else:
            sim.set_key(k, GOOD[k], how="sed" if k in sim.config else "echo")
    while sim.tokens < target_tokens:
        sim.filler(filler_tokens)
    # The final state of every key, then a last run of each test, so answers are settled.
    for k in keys:
        sim.test(k)

    return {
        "id": f"synthetic-{target_tokens // 1000}k-s{seed}",
        "task": "Make every test in tests/ pass by fixing config.ini.",
        "turns": sim.turns,
        "qa_pairs": _questions(sim, keys, crash, crash_turn, checksum, sum_turn),
    }


def _questions(
    sim: _Sim, keys: list[str], crash: str, crash_turn: int, checksum: str, sum_turn: int
) -> list[dict[str, Any]]:
    qa: list[dict[str, Any]] = [
        {
            "question": "What exact error did scripts/migrate.py raise?",
            "answer": crash,
            "type": "recall",
            "needles": [crash_turn],
        },
        {
            "question": "What was the sha256 checksum of dist/app.tar.gz?",
            "answer": checksum,
            "type": "recall",
            "needles": [sum_turn],
        },
    ]
    for k in keys:
        sets = sim.history.get(k, [])
        if sets:
            last_turn, last_value = sets[-1]
            qa.append(
                {
                    "question": f"What is the current value of {k} in config.ini?",
                    "answer": f"{k}={last_value}",
                    "type": "state_updating",
                    "needles": [last_turn],
                }
            )
        failed = [(t, kk) for t, kk, ok in sim.runs if kk == k and not ok]
        if failed:
            fail_turn = failed[-1][0]
            setter = max((t for t, _ in sets if t < fail_turn), default=None)
            needles = [fail_turn] + ([setter] if setter is not None else [])
            value = dict((t, v) for t, v in sets).get(setter, "") if setter is not None else ""
            qa.append(
                {
                    "question": f"Why did tests/test_{k}.py fail at turn {fail_turn}?",
                    "answer": f"{k}={value}",
                    "type": "causal",
                    "needles": sorted(needles),
                }
            )
    runs = [t for t, _, _ in sim.runs]
    qa.append(
        {
            "question": "How many times did the agent run pytest?",
            "answer": str(len(runs)),
            "type": "state_abstraction",
            "needles": runs,
        }
    )
    return qa
