"""Command palette (ctrl+p) providers: candidates, runs, nodes, themes."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class CandidatesProvider(Provider):
    """Jump to a candidate of the visible window: `#123`, an operator, a status."""

    async def search(self, query: str) -> Hits:
        app = self.app
        matcher = self.matcher(query)
        for cid, label in getattr(app, "palette_candidates", lambda: [])()[-2000:]:
            text = f"candidate {label}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(text), partial(app.select_candidate, cid), help="select this candidate"
                )


class RunsProvider(Provider):
    async def search(self, query: str) -> Hits:
        app = self.app
        matcher = self.matcher(query)
        for text, help_text in (("Runs: show runs and forks", "the fork tree"),):
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), app.action_show_runs, help=help_text)
        for run_id in getattr(app, "palette_runs", lambda: [])():
            text = f"Run {run_id}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(text), app.action_show_runs, help=f"attach with: cuco attach {run_id}"
                )

    async def discover(self) -> Hits:
        yield DiscoveryHit("Runs: show runs and forks", self.app.action_show_runs, help="the fork tree")


class NodesProvider(Provider):
    async def search(self, query: str) -> Hits:
        app = self.app
        matcher = self.matcher(query)
        names = ["Nodes: show GPU slots and jobs"] + [f"Node {n}" for n in getattr(app, "palette_nodes", lambda: [])()]
        for text in names:
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), app.action_show_nodes, help="nodes screen")

    async def discover(self) -> Hits:
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
