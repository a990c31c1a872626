"""What a call costs: a price list in a data file the user can edit (USD per million tokens).

The shipped list is `engine/llm/pricing.yaml`; `<home>/pricing.yaml` replaces entries model by model.
Unknown models cost 0 with one warning each; local OpenAI-compatible servers cost 0 unless listed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remote.errors import InputError

from .models import PROVIDERS, ModelSpec

SHIPPED = Path(__file__).with_name("pricing.yaml")
USER_FILE = "pricing.yaml"
log = logging.getLogger("cuco.llm.pricing")


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input tokens
    output: float  # USD per million output tokens

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


FREE = Price(0.0, 0.0)


def _read(path: Path) -> dict[str, dict[str, Price]]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InputError(str(path), "(syntax)", f"not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "(top level)", "must map providers to models")
    table: dict[str, dict[str, Price]] = {}
    for provider, models in data.items():
        if provider not in PROVIDERS:
            raise InputError(str(path), str(provider), f"unknown provider (known: {', '.join(PROVIDERS)})")
        if not isinstance(models, dict):
            raise InputError(str(path), provider, "must map model names to {input: USD, output: USD}")
        table[provider] = {}
        for model, price in (models or {}).items():
            where = f"{provider}.{model}"
            if not isinstance(price, dict):
                raise InputError(str(path), where, "must be {input: USD per Mtok, output: USD per Mtok}")
            values = []
            for side in ("input", "output"):
                v: Any = price.get(side, 0.0)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                    raise InputError(str(path), f"{where}.{side}", f"must be a non-negative number (got {v!r})")
                values.append(float(v))
            table[provider][str(model)] = Price(*values)
    return table


@dataclass
class Pricing:
    table: dict[str, dict[str, Price]]
    sources: list[str] = field(default_factory=list)
    _warned: set[str] = field(default_factory=set)

    @classmethod
    def load(cls, home: Path | None = None) -> Pricing:
        table = _read(SHIPPED)
        sources = [str(SHIPPED)]
        user = Path(home) / USER_FILE if home is not None else None
        if user is not None and user.is_file():
            for provider, models in _read(user).items():
                table.setdefault(provider, {}).update(models)
            sources.append(str(user))
        return cls(table, sources)

    def price(self, spec: ModelSpec) -> Price:
        models = self.table.get(spec.provider, {})
        if spec.model in models:
            return models[spec.model]
        prefixes = [m for m in models if spec.model.startswith(m)]
        if prefixes:
            return models[max(prefixes, key=len)]
        if not spec.local and spec.name not in self._warned:
            self._warned.add(spec.name)
            log.warning(
                "no price for %s in %s: its calls are counted as costing 0 USD (add it to <home>/pricing.yaml)",
                spec.name,
                " or ".join(self.sources),
            )
        return FREE

    def cost(self, spec: ModelSpec, input_tokens: int, output_tokens: int) -> float:
        return self.price(spec).cost(input_tokens, output_tokens)
