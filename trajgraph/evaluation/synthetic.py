"""Synthetic agent trajectories with exact ground truth, for the evaluation harness.

A small simulated project (config keys, a test per key whose result follows from the config,
a staging copy of the config) is worked on by a scripted agent: it changes config values,
runs the tests (which fail or pass by the simulator's own rule), re-runs them, edits the
staging file, hits an error, and in between does a lot of ordinary reading (directory
listings, log pages, source files) that pads the trajectory to a target size. The number of
events grows with the horizon, so a longer trajectory holds more changes of the same key,
more runs of the same test and more look-alike lines, which is what makes long horizons hard
for similarity search. Because the simulator holds the true state at every turn, every
question comes with its exact answer and the turns that hold the evidence ("needles"),
labelled by the capability it tests (as in AMA-Bench):

* ``recall``: a verbatim detail from one turn (an error message, a checksum);
* ``causal``: why a test started failing: the failing run, and the turn that set the value
  that broke it (several other edits and runs may lie in between);
* ``state_updating``: the current value of a key in ``config.ini`` after many changes (the
  same key also changes in ``deploy/staging.ini``, a distractor);
* ``state_abstraction``: counts over the whole trajectory (no needles: the answer is scored
  by coverage only).

Episodes are AMA-Bench-shaped: ``{"id", "task", "turns", "qa_pairs": [{question, answer,
type, needles}]}``; the same seed gives the same episode.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from trajgraph.core.tokens import count_tokens

KEYS = ("retries", "timeout", "pool_size", "batch", "port")
GOOD = {"retries": "5", "timeout": "30", "pool_size": "8", "batch": "64", "port": "8080"}
CONFIG = "config.ini"
STAGING = "deploy/staging.ini"
WORDS = [
    *("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"),
    *("lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi"),
    *("chi", "psi", "omega"),
]
TOKENS_PER_EVENT = 1500  # one event (a change, a run, ...) per this many tokens of horizon
_RULE = "=" * 30


@dataclass
class _Sim:
    rng: random.Random
    config: dict[str, str] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)
    # key -> [(turn, value)] every time config.ini's key was set (or first shown)
    history: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    runs: list[tuple[int, str, bool]] = field(default_factory=list)  # (turn, test, passed)
    tokens: int = 0  # of every action and observation so far

    def add(self, action: str, observation: str) -> int:
        idx = len(self.turns)
        self.turns.append({"idx": idx, "action": action, "observation": observation})
        self.tokens += count_tokens(action) + count_tokens(observation)
        return idx

    def set_key(self, key: str, value: str, *, path: str = CONFIG, known: bool = True) -> int:
        if known:
            action = f"sed -i 's/^{key}=.*/{key}={value}/' {path}"
        else:
            action = f"echo '{key}={value}' >> {path}"
        idx = self.add(action, "")
        if path == CONFIG:
            self.config[key] = value
            self.history.setdefault(key, []).append((idx, value))
        return idx

    def test(self, key: str) -> tuple[int, bool]:
        """Run the test of ``key``: it passes exactly when the key has its good value."""
        passed = self.config.get(key) == GOOD[key]
        name = f"tests/test_{key}.py"
        secs = f"0.{self.rng.randint(10, 99)}s"
        head = (
            f"{_RULE} test session starts {_RULE}\n"
            "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0\n"
            "rootdir: /app\nconfigfile: pytest.ini\ncollected 3 items\n\n"
        )
        if passed:
            obs = head + f"{name} ...{' ' * 50}[100%]\n\n{_RULE} 3 passed in {secs} {_RULE}"
        else:
            got = self.config.get(key, "unset")
            why = f"AssertionError: expected {key}={GOOD[key]}, got {key}={got}"
            obs = head + (
                f"{name} ..F{' ' * 50}[100%]\n\n{_RULE} FAILURES {_RULE}\n"
                f"____ test_{key}_value ____\n\n    def test_{key}_value():\n"
                f'        cfg = load_config("{CONFIG}")\n'
                f'>       assert cfg["{key}"] == "{GOOD[key]}"\nE       {why}\n\n'
                f"{name}:{self.rng.randint(9, 40)}: AssertionError\n"
                f"{_RULE} short test summary info {_RULE}\n"
                f"FAILED {name}::test_{key}_value - {why}\n"
                f"{_RULE} 1 failed, 2 passed in {secs} {_RULE}"
            )
        idx = self.add(f"pytest {name} -q", obs)
        self.runs.append((idx, key, passed))
        return idx, passed

    def filler(self, tokens: int) -> None:
        """Ordinary reading that holds no answer: listings, log pages, source of ~tokens."""
        kind = self.rng.choice(("ls", "log", "cat"))
        lines: list[str] = []
        while count_tokens("\n".join(lines)) < tokens:
            w = self.rng.choice(WORDS)
            n = self.rng.randint(1, 999)
            if kind == "ls":
                lines.append(f"-rw-r--r-- 1 dev dev {n * 17:>6} src/{w}/{w}_{n}.py")
            elif kind == "log" and self.rng.random() < 0.1:
                # Look-alikes of the config's key=value lines that are not the config's state.
                k = self.rng.choice(KEYS)
                lines.append(
                    f"WARN worker-{n % 7} ignored env override {k}={_wrong(self.rng, k)} "
                    f"(config.ini wins)"
                )
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


def _wrong(rng: random.Random, key: str, not_: str | None = None) -> str:
    while True:
        v = str(int(GOOD[key]) + rng.choice((-3, -2, -1, 1, 2, 4, 7, 12)))
        if v != not_:
            return v


def generate(seed: int, target_tokens: int, *, filler_tokens: int = 350) -> dict[str, Any]:
    """One episode of about ``target_tokens`` tokens (task, actions and observations)."""
    rng = random.Random(seed)
    sim = _Sim(rng)
    keys = list(KEYS)
    rng.shuffle(keys)
    checksum = f"{rng.getrandbits(64):016x}"
    crash = f"ConnectionRefusedError: [Errno 111] connect to db-{rng.randint(10, 99)}:5432 refused"

    initial = {k: (_wrong(rng, k) if i < 3 else GOOD[k]) for i, k in enumerate(keys)}
    sim.add(f"cat {CONFIG}", "\n".join(f"{k}={v}" for k, v in initial.items()) + "\n")
    for k, v in initial.items():
        sim.history[k] = [(0, v)]
        sim.config[k] = v
    staged = {k: _wrong(rng, k) for k in keys}
    sim.add(f"cat {STAGING}", "\n".join(f"{k}={v}" for k, v in staged.items()) + "\n")

    n_events = max(4 * len(keys), target_tokens // TOKENS_PER_EVENT)
    # Every key is broken and mended at least once; the rest is drawn at random.
    script: list[tuple[str, str]] = [(op, k) for k in keys for op in ("break", "mend")]
    while len(script) < n_events:
        r = rng.random()
        op = "change" if r < 0.3 else "stage" if r < 0.45 else "rerun"
        script.append((op, rng.choice(keys)))
    rng.shuffle(script)
    script.insert(rng.randrange(len(script) // 2), ("crash", ""))
    script.insert(rng.randrange(len(script) // 2, len(script)), ("checksum", ""))
    crash_turn = sum_turn = -1

    # Filler between events spreads the events (and so the needles) over the whole horizon.
    event_tokens = 200  # about what one event adds (a test run is ~300, an edit ~25)
    gap = max(filler_tokens, (target_tokens - event_tokens * len(script)) // (len(script) + 1))
    for op, k in script:
        goal = sim.tokens + gap
        while sim.tokens < goal - filler_tokens // 2:
            sim.filler(filler_tokens)
        if op == "crash":
            crash_turn = sim.add(
                "python scripts/migrate.py",
                'Traceback (most recent call last):\n  File "scripts/migrate.py", line 12\n'
                + crash,
            )
        elif op == "checksum":
            sum_turn = sim.add("sha256sum dist/app.tar.gz", f"{checksum}  dist/app.tar.gz")
        elif op == "stage":
            staged[k] = _wrong(rng, k, staged[k])
            sim.set_key(k, staged[k], path=STAGING)
        elif op == "rerun":
            sim.test(k)
        else:
            if op == "mend" or (op == "change" and rng.random() < 0.4):
                value = GOOD[k]
            else:
                value = _wrong(rng, k, sim.config[k])
            sim.set_key(k, value)
            if rng.random() < 0.7:  # the agent usually checks its change at once
                sim.test(k)
    final_runs = len(keys) * 250  # about what the last runs below add
    while sim.tokens < target_tokens - final_runs:
        sim.filler(filler_tokens)
    # A last run of each test, so the final results are on record.
    for k in keys:
        sim.test(k)

    return {
        "id": f"synthetic-{target_tokens // 1000}k-s{seed}",
        "horizon": target_tokens,
        "task": f"Make every test in tests/ pass by fixing {CONFIG}.",
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
        sets = sim.history[k]
        last_turn, last_value = sets[-1]
        qa.append(
            {
                "question": f"What is the current value of {k} in {CONFIG}?",
                "answer": f"{k}={last_value}",
                "type": "state_updating",
                "needles": [last_turn],
            }
        )
        for fail_turn, setter, value in _breakages(sim, k)[-2:]:
            qa.append(
                {
                    "question": f"Why did tests/test_{k}.py fail at turn {fail_turn}?",
                    "answer": f"{k}={value}",
                    "type": "causal",
                    "needles": [setter, fail_turn],
                }
            )
    runs = [t for t, _, _ in sim.runs]
    changes = [t for k in keys for t, _ in sim.history[k] if t > 0]
    qa += [
        {
            "question": "How many times did the agent run pytest?",
            "answer": str(len(runs)),
            "type": "state_abstraction",
            "needles": [],
        },
        {
            "question": f"How many times did the agent change {CONFIG}?",
            "answer": str(len(changes)),
            "type": "state_abstraction",
            "needles": [],
        },
    ]
    return qa


def _breakages(sim: _Sim, key: str) -> list[tuple[int, int, str]]:
    """Runs of ``key``'s test that failed right after passing (or on the first run), with the
    turn that set the value they failed on: (failing run, setter, value)."""
    out = []
    previous_passed: bool | None = None
    for turn, k, passed in sim.runs:
        if k != key:
            continue
        if not passed and previous_passed in (True, None):
            setter, value = max((s for s in sim.history[key] if s[0] < turn), default=(0, ""))
            if setter > 0:  # set by the agent, not found in the first listing
                out.append((turn, setter, value))
        previous_passed = passed
    return out
