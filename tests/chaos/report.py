"""What a chaos run found: `ChaosReport`, printed by `table()`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SERVICES = ("dispatcher", "tool", "context", "provider")
TARGETS = (*SERVICES, "redis")
INVARIANTS = {
    "lost": "1 every task terminal (none lost)",
    "twice": "2 no side effect twice",
    "events": "3 no event lost or duplicated",
    "appends": "4 no tool result appended twice",
    "outcomes": "5 SUCCEEDED: each call ran once, as told",
}
EXAMPLES = 5


@dataclass
class Action:
    """One disruption: kill -9 then restart, or SIGSTOP then SIGCONT."""

    round: int
    kind: str
    """"kill -9" or "SIGSTOP"."""
    service: str
    """dispatcher, tool, context, provider or redis."""
    label: str
    start_s: float
    """Wall clock of the kill or the SIGSTOP."""
    back_s: float = 0.0
    """Wall clock when the target was back: restarted and SERVING (Redis: answering PING), or SIGCONT sent."""
    error: str = ""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass
class ChaosReport:
    seed: int
    rounds: int
    tasks_per_round: int
    kills_per_round: int
    pauses_per_round: int
    dispatchers: int = 1
    tool_replicas: int = 1
    config_keys: list[str] = field(default_factory=list)
    """The issue-18 configuration keys the run could set (the config model accepts them)."""
    contexts: int = 1
    providers: int = 1
    cluster: bool = False
    """Redis was a Redis Cluster (3 primaries, 3 replicas)."""
    rolling: bool = False
    """One replica of each service killed and restarted per round, instead of random disruptions."""
    owners: Counter[str] = field(default_factory=Counter)
    """Tasks per dispatcher replica that ran them last (the task's `owner`)."""
    wall_s: float = 0.0
    workdir: str = ""
    actions: list[Action] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    resumes: Counter[str] = field(default_factory=Counter)
    settlements: Counter[str] = field(default_factory=Counter)
    approvals: int = 0
    recovery_s: list[float] = field(default_factory=list)
    stall_s: list[float] = field(default_factory=list)
    unmeasured: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    invariants: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in INVARIANTS})
    notes: list[str] = field(default_factory=list)
    max_resumes: int = 5
    """Resumes of one FAILED task the driver makes at most (0: `--no-resume`)."""
    durations_s: list[float] = field(default_factory=list)
    """Per terminal task, from its first event to its last."""
    outage_waits: Counter[str] = field(default_factory=Counter)
    """Outage waits the tasks' events report ("context_svc unavailable, retrying in 2.0 s"), by service."""

    @property
    def tasks(self) -> int:
        return sum(self.statuses.values())

    @property
    def violations(self) -> int:
        return sum(len(v) for v in self.invariants.values())

    @property
    def outcome_unknown(self) -> int:
        """Settlement requests seen (each an OUTCOME_UNKNOWN the dispatcher parked a task on)."""
        return sum(self.settlements.values())

    def count(self, kind: str, service: str | None = None) -> int:
        return sum(1 for a in self.actions if a.kind == kind and (service is None or a.service == service))

    def table(self) -> str:
        lines = [
            f"chaos seed {self.seed}: {self.rounds} round(s) x {self.tasks_per_round} tasks, "
            f"{self.kills_per_round} kill -9 + {self.pauses_per_round} SIGSTOP per round, {self.wall_s:.0f} s wall",
            f"mesh: {self.dispatchers} dispatcher(s), {self.tool_replicas} tool_svc, {self.contexts} context_svc, "
            f"{self.providers} provider_svc replica(s); Redis {'Cluster (3+3)' if self.cluster else 'standalone'}"
            f"{'; rolling: one replica of each restarted per round' if self.rolling else ''}",
            f"issue-18 config keys in use: {', '.join(self.config_keys) or 'none (not in the config model yet)'}",
            f"workdir (logs, redis AOF): {self.workdir}",
            "",
            f"{'target':<12}{'kill -9':>9}{'SIGSTOP':>9}",
        ]
        for target in TARGETS:
            lines.append(f"{target:<12}{self.count('kill -9', target):>9}{self.count('SIGSTOP', target):>9}")
        lines.append(f"{'total':<12}{self.count('kill -9'):>9}{self.count('SIGSTOP'):>9}")
        failed = [a for a in self.actions if a.error]
        if failed:
            lines.append(f"disruptions that failed to restore: {len(failed)}")
        lines += [
            "",
            "recovery: from the target being back (restarted and SERVING, or SIGCONT) to the next event of any",
            "task that was running (not terminal) at the kill; stall: the same from the kill itself",
            f"  recovery p50 {percentile(self.recovery_s, 50):.2f} s  p99 {percentile(self.recovery_s, 99):.2f} s"
            f"  max {max(self.recovery_s, default=float('nan')):.2f} s  (n={len(self.recovery_s)},"
            f" unmeasured {self.unmeasured})",
            f"  stall    p50 {percentile(self.stall_s, 50):.2f} s  p99 {percentile(self.stall_s, 99):.2f} s"
            f"  max {max(self.stall_s, default=float('nan')):.2f} s",
            f"OUTCOME_UNKNOWN settlements: {self.outcome_unknown} ({_counts(self.settlements)})",
            f"ordinary approvals approved: {self.approvals}",
            f"resumes of FAILED tasks: {sum(self.resumes.values())} ({_counts(self.resumes)})"
            + ("; the driver never resumes (--no-resume)" if not self.max_resumes else ""),
            f"outage waits in the tasks' events: {sum(self.outage_waits.values())} ({_counts(self.outage_waits)})",
            f"task duration (first to last event): p50 {percentile(self.durations_s, 50):.2f} s"
            f"  p99 {percentile(self.durations_s, 99):.2f} s  max {max(self.durations_s, default=float('nan')):.2f} s",
            f"tasks: {self.tasks} ({_counts(self.statuses)}); answers: {_counts(self.answers)}",
            f"tasks per dispatcher (last owner): {_counts(self.owners)}",
            f"upstream requests: {_counts(self.requests)}",
            "",
            f"{'invariant':<48}{'violations':>10}",
        ]
        for key, title in INVARIANTS.items():
            found = self.invariants[key]
            lines.append(f"{title:<48}{len(found):>10}")
            lines.extend(f"    - {example}" for example in found[:EXAMPLES])
            if len(found) > EXAMPLES:
                lines.append(f"    ... and {len(found) - EXAMPLES} more")
        lines.append(f"{'total':<48}{self.violations:>10}")
        if self.notes:
            lines += ["", "notes:", *(f"  {n}" for n in self.notes[:20])]
            if len(self.notes) > 20:
                lines.append(f"  ... and {len(self.notes) - 20} more")
        return "\n".join(lines)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.most_common()) or "none"
