"""``python -m specperf.cli ARGS``: the `specperf` command, where its script is not on PATH."""

import sys

from specperf.cli import main

sys.exit(main())
