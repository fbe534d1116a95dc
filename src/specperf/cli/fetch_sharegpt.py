"""`specperf fetch-sharegpt DIR` (see specperf.engine.sharegpt_fetch)."""

from specperf.engine.sharegpt_fetch import add_fetch_sharegpt_command

__all__ = ["add_fetch_sharegpt_command"]
