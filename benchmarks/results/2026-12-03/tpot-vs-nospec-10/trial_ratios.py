"""Each trial's TPOT vs no-spec (median over its interleaved request pairs) for the spec
configs at c = 1, in the kept baseline, its history and the saved runs given: when it ran,
on which server start, and the two sides' median TPOTs."""
import sys
from pathlib import Path

import numpy as np

from specperf.analysis.samples import paired_requests, relative_tpot
from specperf.store.baselines import load_baseline, load_history
from specperf.store.files import load_result

bf = Path("/work/ov31/base/cpu-tiny/cpu-amd-epyc-2c.json")
runs = {"baseline": load_baseline(bf)}
runs.update({f"history-{i}": h for i, h in enumerate(load_history(bf))})
runs.update({p.split("/")[-3]: load_result(p) for p in sys.argv[1:]})
for cid in ("draft-k1-c1", "draft-k2-c1", "draft-k3-c1", "self-k3-c1", "ngram-k3-c1"):
    print(cid)
    for name, run in runs.items():
        case = next((c for c in run.cases if c.case.id == cid), None)
        nospec = run.paired_nospec.get(cid)
        if case is None or nospec is None:
            continue
        for t, u in zip(case.trials, nospec.trials, strict=True):
            one, other = (case.model_copy(update={"trials": [t]}),
                          nospec.model_copy(update={"trials": [u]}))
            s, n = paired_requests(one, other, "tpot")
            rel = relative_tpot(one, other, False)
            print(f"  {name:10s} {t.started_at:%m-%d %H:%M} start={t.server_start} "
                  f"spec={np.nanmedian(s):5.1f} ms nospec={np.nanmedian(n):5.1f} ms "
                  f"ratio={np.median(rel):.3f}")
