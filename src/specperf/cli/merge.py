"""`specperf merge`: combine shard run files (see specperf.store.merge)."""

from specperf.store.merge import add_merge_command

__all__ = ["add_merge_command"]
