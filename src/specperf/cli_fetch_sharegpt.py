"""`specperf fetch-sharegpt DIR` (see specperf.fetch)."""

from specperf.fetch import add_fetch_sharegpt_command

__all__ = ["add_fetch_sharegpt_command"]
