"""Command palette (ctrl+p) providers: candidates, runs, nodes, themes."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .app_api import RunApp


class CandidatesProvider(Provider):
    """Jump to a candidate of the visible window: `#123`, an operator, a status."""

    async def search(self, query: str) -> Hits:
        app = self.app
        if not isinstance(app, RunApp):
            return
        matcher = self.matcher(query)
        for cid, label in app.palette_candidates()[-2000:]:
            text = f"candidate {label}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(text), partial(app.select_candidate, cid), help="select this candidate"
                )


class RunsProvider(Provider):
    async def search(self, query: str) -> Hits:
        app = self.app
        if not isinstance(app, RunApp):
            return
        matcher = self.matcher(query)
        for text, help_text in (("Runs: show runs and forks", "the fork tree"),):
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), app.action_show_runs, help=help_text)
        for run_id in app.palette_runs():
            text = f"Run {run_id}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(text), app.action_show_runs, help=f"attach with: cuco attach {run_id}"
                )

    async def discover(self) -> Hits:
        if isinstance(self.app, RunApp):
            yield DiscoveryHit("Runs: show runs and forks", self.app.action_show_runs, help="the fork tree")


class NodesProvider(Provider):
    async def search(self, query: str) -> Hits:
        app = self.app
        if not isinstance(app, RunApp):
            return
        matcher = self.matcher(query)
        names = ["Nodes: show GPU slots and jobs"] + [f"Node {n}" for n in app.palette_nodes()]
        for text in names:
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), app.action_show_nodes, help="nodes screen")

    async def discover(self) -> Hits:
        if isinstance(self.app, RunApp):
            yield DiscoveryHit("Nodes: show GPU slots and jobs", self.app.action_show_nodes, help="nodes screen")


class ThemesProvider(Provider):
    async def search(self, query: str) -> Hits:
        app = self.app
        matcher = self.matcher(query)
        for name in sorted(app.available_themes):
            text = f"Theme: {name}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(text), partial(setattr, app, "theme", name), help="switch the theme now"
                )

    async def discover(self) -> Hits:
        for name in ("cuco-dark", "cuco-light"):
            yield DiscoveryHit(f"Theme: {name}", partial(setattr, self.app, "theme", name))
