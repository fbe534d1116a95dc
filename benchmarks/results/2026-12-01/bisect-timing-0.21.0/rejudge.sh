#!/bin/bash
# Re-judge each candidate start against 0.21.0's starts pooled as kept runs (specperf compare --history)
set -u
export PATH=/work/main/.nox/tests/bin:$PATH
export PYTHONPATH=/work/main/src
A=$(ls -t /tmp/b17/bi/*-r*/draft-k2/r*-A/run.json /tmp/b17/bi2/*-r*/draft-k2/r*-A/run.json)
NEWEST=$(echo "$A" | head -1); REST=$(echo "$A" | tail -n +2)
echo "0.21.0 starts: $(echo "$A" | wc -l); baseline $NEWEST"
for B in /tmp/b17/bi/*-r*/draft-k2/r*-B/run.json /tmp/b17/bi2/*-r*/draft-k2/r*-B/run.json; do
  v=$(python -c "import json,sys;print(json.load(open('$B'))['provenance']['vllm_version'])")
  n=$(python -c "import json,sys;print(len(json.load(open('$B'))['cases']))")
  [ "$n" = 0 ] && { echo "== $v $B: no case (did not serve)"; continue; }
  echo "== vLLM $v  ($B)"
  specperf compare "$B" "$NEWEST" --history $REST 2>&1 | grep -A1 -E "↓ TPOT ms|throughput tok|exit|^c1 .*acceptance_rate  " | grep -v "^--"
done
