"""specperf: performance regression suite for vLLM speculative decoding."""

__version__ = "0.1.0"
