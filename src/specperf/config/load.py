"""How a profile loads its servers: the [load] table (requests per trial, the contention
guard, how a spec trial and its paired no-spec trial share the machine, where the TPOT
gain's reference is measured)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from specperf.config.strict import ProfileTable


class Load(ProfileTable):
    requests: int = Field(16, ge=1, description="measured requests per case")
    min_requests_per_stream: int = Field(
        0, ge=0, description="at concurrency c, at least c × this many requests are sent"
    )
    warmup_requests: int = Field(2, ge=0, description="sent before each case, not counted")
    error_budget: float = Field(0.0, ge=0.0, le=1.0, description="fraction of requests allowed to fail")
    request_timeout_s: float = Field(300.0, gt=0)
    # The contention guard (specperf.engine.contention): a trial during which other processes
    # used more than this many cores is measured again. 0.25 because on the 2-core CPU
    # runner a quarter core of foreign load already moved TPOT by more than a comparison's
    # minimum effect (measured: docs/validation.md); a GPU host with many idle cores can
    # afford more. 0 or less turns the guard off (--perf-max-outside-cores overrides).
    max_outside_cores: float = Field(
        0.25, description="re-measure a trial when other processes used more cores than this; "
                          "≤ 0 = off")
    contended_retries: int = Field(
        2, ge=0, description="re-measurements of a contended trial before it is kept, flagged")
    # Before a trial (and each re-measurement) the guard waits this long at most for the
    # outside load to fall below max_outside_cores: a neighbour's burst (a compile, a
    # package install) then costs a wait instead of a contended trial whose latency
    # checks cannot be judged. 60 s outlasts a typical burst on a CI runner and stays
    # small beside a run's server starts; a machine still busy after it is busy, and the
    # run stops waiting (specperf.engine.contention.QuietWaiter). 0 = do not wait
    # (--perf-busy-wait overrides).
    busy_wait_s: float = Field(
        60.0, ge=0.0, description="seconds a trial waits at most for outside load to fall "
                                  "below max_outside_cores; 0 = don't wait")

    # How a spec case's trial and its paired no-spec trial (the TPOT gain's) share the
    # machine at concurrency 1. "trials": one whole trial on the no-spec server, then one on
    # the spec server. "requests": one request to each in turn (A B, B A, …), so both see
    # the same seconds of the machine: on a shared VM the host's speed moves a trial's TPOT
    # by ~8 % from one trial to the next, but the two sides' ratio by ~2 % when interleaved
    # request by request (docs/validation.md, "Where the noise comes from on these VMs").
    # Above concurrency 1 the two servers' streams would compete for the cores, so trials
    # alternate there whatever this says. Part of the spec configs' hash: their trials and
    # paired no-spec trials are measured differently.
    pairing: Literal["trials", "requests"] = Field(
        "trials", description="at concurrency 1, a spec case's paired no-spec trial runs before "
                              "its own (trials) or request by request interleaved with it "
                              "(requests)")

    # Where the no-spec reference of the TPOT gain (and of the machine's speed) is measured
    # (#53). "beside": the no-spec server stays up beside each spec server and a paired
    # no-spec trial runs next to each spec trial, as before: two servers resident at once,
    # which a CPU box holds and one GPU never holds for a large target. "bracket": never two
    # servers resident: no-spec is measured on its own server in blocks that bracket the
    # spec configs (first, after every few configs, last); a spec config's gain is judged
    # against the blocks around it. Part of the spec configs' hash where it is not
    # "beside": the gain's reference is measured differently.
    reference: Literal["beside", "bracket"] = Field(
        "beside", description="where the no-spec reference of the TPOT gain is measured: beside "
                              "each spec server (two servers up) or in blocks bracketing the "
                              "spec configs (one server up at a time)")
    # reference = "bracket": a no-spec block after every this many spec configs (and one
    # before the first, one after the last). Three: a spec config's gain is then judged
    # against blocks at most three configs' measurement apart (the drift between them
    # widens its interval: docs/statistics.md, "The bracketed gain"), while a matrix of
    # ten spec configs pays five no-spec blocks instead of ten configs' paired trials. It
    # decides when no-spec is measured, not what a trial measures: not in the hash.
    bracket_every: int = Field(
        3, ge=1, description="reference = \"bracket\": a no-spec block after every this many "
                             "spec configs (and before the first, after the last)")

    # Fewer requests where TPOT is steady (#53): at c = 1 a trial's requests run one after
    # another, so a trial of 64 costs 64 whole requests of wall time (11.8 min at c = 1 on
    # a100-qwen3-32b) while its median TPOT is as steady at 16. Part of the hash only
    # where set (_measured): a trial of other length is another measurement.
    requests_by_concurrency: dict[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] = (
        Field(default_factory=dict, description="measured requests per trial at a given "
                                                "concurrency, instead of `requests` (still "
                                                "at least c × min_requests_per_stream)"))

    def requests_at(self, concurrency: int) -> int:
        base = self.requests_by_concurrency.get(concurrency, self.requests)
        return max(base, concurrency * self.min_requests_per_stream)

    def interleaves(self, concurrency: int) -> bool:
        """Whether a paired trial at this concurrency is interleaved request by request."""
        return self.pairing == "requests" and concurrency == 1

