"""What every model of a stored file is made of: the strict base, the bounds every
stored number obeys, the serialiser that leaves unset optional fields out, and the
matrix's cell (:class:`Case`), which every result is keyed by."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler

#: Bounds every stored number obeys: a file that breaks them was hand-edited or corrupted,
#: and would otherwise drive a verdict (a NaN median compares as "unchanged", a negative
#: count makes a rate above 1). Non-finite floats are refused model-wide (allow_inf_nan).
NonNegative = Annotated[float, Field(ge=0)]
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: Rates compared with each other; tolerance for the float sums they are made of.
RATE_SLACK = 1e-9


class StoredModel(BaseModel):
    # allow_inf_nan=False: Python's json reads `NaN`, `Infinity` and 1e999; none of them is
    # a measurement.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def without_unset(model: BaseModel, handler: SerializerFunctionWrapHandler,
                  names: tuple[str, ...]) -> Any:
    """Serialise, leaving out the optional fields in ``names`` that are None, False or an
    empty mapping: files written without the feature they record stay byte-identical to older
    ones."""
    data = handler(model)
    if isinstance(data, dict):
        for name in names:
            value = getattr(model, name)
            if value is None or value is False or (isinstance(value, (dict, list)) and not value):
                data.pop(name, None)
    return data


class Case(StoredModel):
    """One (server config × concurrency) cell of the matrix."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    config_id: str = Field(min_length=1)
    concurrency: int = Field(ge=1)

    @property
    def id(self) -> str:
        return f"{self.config_id}-c{self.concurrency}"

    def __str__(self) -> str:
        return self.id
