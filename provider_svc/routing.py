"""Model names -> configured models: `<backend>/<model>`, `<backend>` alone, an alias, or a task tag.

Resolution order for a request: its `model` (a name or an alias), else the route of its
`task_tag` (`code`, `summarize`, `intent`, ...), else `default_model`. A tag's route is a model (or
alias), or a price route (`{choose: cheapest, tags: [...]}`): its candidates are the models carrying
every tag it names, and the ones it lists; `Providers` picks the cheapest healthy one per request.
An unknown task tag falls back to the default model (tags are hints); an unknown model name is
NOT_FOUND and names the known ones. The fallback chain of a request is looked up by what it asked
for, then by the resolved name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agentmesh.config import PriceRouteSettings, ProviderBackendSettings, ProviderModelSettings, ProvidersSettings
from agentmesh.errors import NotFoundError

__all__ = ["ResolvedModel", "Router"]

log = logging.getLogger("provider_svc.routing")


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A configured model: its full name, backend and (if listed) its own settings."""

    name: str
    backend: ProviderBackendSettings
    model_id: str
    settings: ProviderModelSettings | None


class Router:
    """Resolves names, aliases and task tags against the providers configuration."""

    def __init__(self, settings: ProvidersSettings) -> None:
        self.settings = settings
        self.aliases = settings.all_aliases()

    def known(self) -> list[str]:
        names = [f"{b.name}/{m.name}" for b in self.settings.backends for m in b.models]
        return sorted({*names, *self.aliases})

    def resolve(self, name: str) -> ResolvedModel:
        """The model `name` (an alias, `<backend>/<model>` or `<backend>`) designates."""
        target = self.aliases.get(name, name)
        backend_name, sep, model_id = target.partition("/")
        backend = self.settings.backend(backend_name)
        if backend is not None and not sep:
            model_id = backend.default_model or (backend.models[0].name if backend.models else "")
        if backend is None or not model_id:
            raise NotFoundError(
                f"unknown model {name!r}; known: {', '.join(self.known())}", metadata={"model": name[:200]}
            )
        listed = backend.model_settings(model_id)
        if listed is None and not backend.allow_unlisted_models:
            raise NotFoundError(
                f"backend {backend.name} lists no model {model_id!r}; known: {', '.join(self.known())}",
                metadata={"model": name[:200]},
            )
        return ResolvedModel(name=f"{backend.name}/{model_id}", backend=backend, model_id=model_id, settings=listed)

    def route(self, model: str = "", task_tag: str = "") -> str:
        """The name a request should use: its model, else its tag's route, else the default (a price
        route is resolved by `price_route` and `candidates` instead)."""
        if model:
            return model
        if task_tag:
            routed = self.settings.routing.get(task_tag)
            if isinstance(routed, str):
                return routed
            if routed is None:
                log.info("no route for task tag %r; using the default model", task_tag[:64])
        return self.settings.default_model

    def price_route(self, model: str = "", task_tag: str = "") -> PriceRouteSettings | None:
        """The price route a request without a model takes by its tag, if that tag has one."""
        if model or not task_tag:
            return None
        routed = self.settings.routing.get(task_tag)
        return routed if isinstance(routed, PriceRouteSettings) else None

    def candidates(self, route: PriceRouteSettings) -> list[ResolvedModel]:
        """The models a price route chooses among, in configuration order (each once)."""
        found: list[ResolvedModel] = []
        wanted = set(route.tags)
        if wanted:
            for backend in self.settings.backends:
                for listed in backend.models:
                    if wanted <= set(listed.tags):
                        found.append(self.resolve(f"{backend.name}/{listed.name}"))
        for name in route.models:
            resolved = self.resolve(name)
            if all(r.name != resolved.name for r in found):
                found.append(resolved)
        return found

    def chain(self, requested: str) -> list[ResolvedModel]:
        """The requested model followed by its configured fallbacks (duplicates removed)."""
        first = self.resolve(requested)
        fallbacks = self.settings.fallbacks.get(requested)
        if fallbacks is None:
            fallbacks = self.settings.fallbacks.get(first.name, [])
        chain = [first]
        for name in fallbacks:
            resolved = self.resolve(name)
            if all(r.name != resolved.name for r in chain):
                chain.append(resolved)
        return chain
