"""Command-palette providers: pick a model for the plan form by name.

On the plan view, Ctrl+P finds models as well as actions, and Ctrl+L opens a palette of
models only: the catalogue (with parameter counts) and models in the local Hugging Face cache.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Provider

from trainmem.core.units import fmt_count
from trainmem.sources import catalog

if TYPE_CHECKING:
    from trainmem.app.dashboard import Dashboard


class ModelCommands(Provider):
    async def startup(self) -> None:
        app: Dashboard = self.app  # type: ignore[assignment]
        app.want_model_list()

    def _models(self) -> list[tuple[str, str]]:
        """(model id, help text) for every model the form can be given by name."""
        app: Dashboard = self.app  # type: ignore[assignment]
        known = {
            e.hf_id: f"catalogue · {fmt_count(e.transformers_params)} params"
            for e in catalog.catalog()
        }
        models = list(known.items())
        models += [
            (m, "local Hugging Face cache") for m in app.state.model_names() if m not in known
        ]
        return models

    def _pick(self, model: str) -> None:
        set_model = getattr(self.screen, "set_model", None)
        if set_model is not None:
            set_model(model)

    async def discover(self) -> AsyncIterator[DiscoveryHit]:
        for model, help_text in self._models():
            yield DiscoveryHit(f"Model: {model}", partial(self._pick, model), help=help_text)

    async def search(self, query: str) -> AsyncIterator[Hit]:
        matcher = self.matcher(query)
        for model, help_text in self._models():
            text = f"Model: {model}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(text), partial(self._pick, model), help=help_text
                )
