"""The base of every table of a profile file: unknown keys, nan and inf are errors.

A typo in a key silently disabling a gate is the worst failure a regression suite can
have, and nan and inf are valid TOML floats that turn a floor or a tolerance off (every
comparison with nan is false), so no table of a profile takes either.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ProfileTable(BaseModel):
    """A table of a profile: strict keys, finite numbers, frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
