"""`specperf merge`: combine shard run files (see specperf.merge)."""

from specperf.merge import add_merge_command

__all__ = ["add_merge_command"]
