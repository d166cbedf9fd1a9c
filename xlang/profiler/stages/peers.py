"""Peers, in the parent: public kernels of the task (Task.peers) timed beside the vendor when their packages are
installed. What the judge is told of them (peer_specs) and what they add to the check stage's limit (check_limit);
the judge times them (judge/peers.py time_peers). A peer never changes the verdict."""

from __future__ import annotations

from xlang.profiler.options import EvalOptions


def peer_specs(task, options: EvalOptions) -> list[dict]:
    """What the judge is told of the task's peers: name, display, and `skip` (why no process is to be started for
    it) where its package is not installed in this Python (found without importing it: well under a second) or
    peers are off. The judge's own runner still decides for the others (its load fails if the import does)."""
    out = []
    for peer in task.peers:
        skip = "skipped (--no-peers)" if not options.peers else peer.missing()
        out.append({"name": peer.name, "display": peer.display, **({"skip": skip} if skip else {})})
    return out


PEER_CLOSE_S = 30.0  # a peer's process is given this long to leave after its budget (Runner.close)


def check_limit(options: EvalOptions, peers: list[dict]) -> float:
    """The check stage's limit: its own, plus each peer's budget for the peers it is to start."""
    running = sum(1 for p in peers if not p.get("skip"))
    return options.check_timeout_s + running * (options.peer_timeout_s + PEER_CLOSE_S)
