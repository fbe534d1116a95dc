"""How a night's matrix is split into shards: the one home of the rule that
``--perf-shard I/N`` (the plugin) and ``specperf plan --shards N`` both apply.

Server configs are split round-robin over the spec configs in profile order, never a
config's cases (its server starts once per shard that has it); the no-spec config belongs
to shard 1, and every shard that needs it as a reference measures it too.
"""

from __future__ import annotations

from specperf.config.profile import Profile

__all__ = ["parse_shard", "shard_config_ids"]


def parse_shard(text: str) -> tuple[int, int]:
    """(I, N) of "I/N", 1 ≤ I ≤ N; ValueError naming the expected form otherwise."""
    try:
        i_txt, n_txt = text.split("/")
        i, n = int(i_txt), int(n_txt)
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise ValueError(f"{text!r}: expected I/N with 1 ≤ I ≤ N, e.g. 2/4")
    return i, n


def shard_config_ids(profile: Profile, i: int, n: int) -> list[str]:
    """The server configs of shard ``i`` of ``n`` (1-based), in profile order."""
    if not 1 <= i <= n:
        raise ValueError(f"shard {i} of {n}: expected 1 ≤ I ≤ N")
    spec = [c.id for c in profile.server_configs if c.is_spec]
    mine = {cid for k, cid in enumerate(spec) if k % n == i - 1}
    if i == 1 and profile.nospec is not None:
        mine.add(profile.nospec.id)
    return [c.id for c in profile.server_configs if c.id in mine]
