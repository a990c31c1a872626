"""The LLM mutator: a model (picked by a UCB bandit) proposes a child as SEARCH/REPLACE diffs, a full
rewrite of the EVOLVE-BLOCKs, or a crossover of two parents. Answers that are malformed, edit outside
the blocks, carry preprocessor lines, or repeat what the island has are rejected and the reason is fed
back to the model, a bounded number of times.

The engine builds it with `build_llm_mutator(models, budget_usd, workload, home=...)`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from remote.errors import InputError

from ...contract import Strategies
from ...llm import strategies as strat
from ...llm.bandit import Bandit
from ...llm.budget import Budget, BudgetExhausted
from ...llm.clients import ChatRequest
from ...llm.edits import EditError, apply_blocks_answer, apply_diff, check_child, parse_diff
from ...llm.errors import LLMError
from ...llm.failure_memory import failures_section, repair_prompt
from ...llm.keys import redact
from ...llm.meta import MetaSummarizer, load_recommendations
from ...llm.models import ModelSpec, parse_model, parse_models
from ...llm.novelty import EmbeddingNovelty, NoveltyCheck, ShingleNovelty
from ...llm.pricing import Pricing
from ...llm.prompts import mutate_prompt, novelty_message, rejection_message, scrub, system_prompt
from ...llm.retry import RetryPolicy
from ...llm.service import LLMService
from ...llm.strategy_meta import evolve as evolve_strategies
from .base import Proposal, ProposalContext

if TYPE_CHECKING:
    from ...config import RunConfig
    from ...store.store import Store
    from ...workload import Workload

log = logging.getLogger("cuco.llm.mutator")

OPERATORS = {"diff": "llm-diff", "full": "llm-full", "cross": "llm-cross", "repair": "llm-repair"}
# The explore-then-exploit schedule: kind weights and temperature per phase. A repair is drawn only while a
# failed child no one has repaired yet is on offer; a repair is a fix, so it runs cool.
SCHEDULE = {
    "explore": ({"diff": 0.35, "full": 0.35, "cross": 0.15, "repair": 0.15}, 1.0),
    "exploit": ({"diff": 0.6, "full": 0.1, "cross": 0.1, "repair": 0.2}, 0.6),
}
REPAIR_TEMPERATURE = 0.3


@dataclass
class LLMSettings:
    max_tokens_diff: int = 4096
    max_tokens_full: int = 8192
    novelty_threshold: float = 0.99  # token-shingle Jaccard; 0.995 cosine with embeddings
    embedding_threshold: float = 0.995
    meta_every: int = 10  # finished evaluations between recommendations (0: off)
    timeout_s: float = 180.0  # one LLM request
    max_attempts: int = 4  # per request, with backoff (429 / 5xx / timeouts)
    strategies: list[str] = field(default_factory=list)  # starting strategies (none: from the workload)
    strategy_exploration: float = 0.5
    strategy_retire_after: int = 3  # failed children in a row that retire a strategy (0: never)
    strategy_rewrites: int = 1  # weakest strategies rewritten per meta step
    repair_rate: float | None = None  # the repair operator's weight (none: the schedule's)


def settings_from_config(config: RunConfig) -> LLMSettings:
    """The run config's LLM settings (stored with the run, so a fork or a resume keeps them)."""
    return LLMSettings(
        max_tokens_diff=config.max_tokens_diff,
        max_tokens_full=config.max_tokens_full,
        novelty_threshold=config.novelty_threshold,
        embedding_threshold=config.embedding_threshold,
        meta_every=config.meta_every,
        timeout_s=config.llm_timeout_s,
        max_attempts=config.llm_max_attempts,
        strategies=list(config.strategies),
        strategy_exploration=config.strategy_exploration,
        strategy_retire_after=config.strategy_retire_after,
        strategy_rewrites=config.strategy_rewrites,
        repair_rate=config.repair_rate,
    )


def choose_kind(ctx: ProposalContext, repair_weight: float | None = None) -> tuple[str, float]:
    """The operator of this proposal and its temperature; `repair_weight` overrides the schedule's (the run
    setting `repair_rate`)."""
    weights, temperature = SCHEDULE.get(ctx.phase, SCHEDULE["exploit"])
    weights = dict(weights)
    if repair_weight is not None:
        weights["repair"] = repair_weight
    offered = {"cross": ctx.second_parent is not None, "repair": bool(ctx.repairable)}
    kinds = [k for k in weights if offered.get(k, True) and weights[k] > 0]
    kind = ctx.rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
    return kind, REPAIR_TEMPERATURE if kind == "repair" else temperature


def _note(answer: str) -> str:
    """The model's own one-line explanation (text before its first edit), for the candidate's note."""
    head = answer.split("<<<<<<<", 1)[0].split("```", 1)[0].strip()
    return " ".join(head.split())[:300]


class LLMMutator:
    name = "llm"

    def __init__(
        self,
        service: LLMService,
        workload: Workload,
        models: list[str],
        *,
        settings: LLMSettings | None = None,
        novelty: NoveltyCheck | None = None,
        embedding_model: str | None = None,
        node_facts: str | None = None,
    ):
        self.service = service
        self.workload = workload
        self.models = list(models)
        self.settings = settings or LLMSettings()
        self.novelty = novelty or ShingleNovelty(self.settings.novelty_threshold)
        self.embedding_model = embedding_model
        self.node_facts = node_facts  # facts about the GPU node, when the engine knows them
        self.meta = MetaSummarizer(self.settings.meta_every)
        self._bandit: Bandit | None = None
        self._run_id: str | None = None
        self._meta_lock = asyncio.Lock()
        self._recommendations: list[str] | None = None
        self._strategies: strat.Population | None = None

    @property
    def budget(self) -> Budget:
        return self.service.budget

    async def _prepare(self, ctx: ProposalContext) -> Bandit:
        if self._bandit is None or self._run_id != ctx.run_id:
            self._run_id = ctx.run_id
            self._bandit = await Bandit.load(ctx.store, ctx.run_id, self.models)
            self._recommendations = None
            self._strategies = await strat.load(ctx.store, ctx.run_id) or strat.seeded(
                self.workload, self.settings.strategies
            )
            self._strategies.exploration = (
                self.settings.strategy_exploration
            )  # the run's setting (a fork may change it)
            if isinstance(self.novelty, EmbeddingNovelty) and self.embedding_model:
                model, store, run_id = self.embedding_model, ctx.store, ctx.run_id
                self.novelty.embed = lambda texts: self.service.embed(model, texts, store=store, run_id=run_id)
        await self.budget.load(ctx.store, ctx.run_id)
        await self._bandit.sync(ctx.store, ctx.run_id)
        population = self._strategies
        assert population is not None
        population.fold(await strat.marks_after(ctx.store, ctx.run_id, population.marks_seen))
        await population.sync(ctx.store, ctx.run_id, public_reason=lambda text: scrub(redact(text), self.workload))
        return self._bandit

    async def _recommend(self, ctx: ProposalContext, bandit: Bandit) -> list[str]:
        async with self._meta_lock:
            at = await self.meta.due(ctx.store, ctx.run_id)
            if at is not None:
                model = bandit.select(ctx.rng)
                try:
                    self._recommendations = await self.meta.summarize(
                        self.service, model, ctx.store, ctx.run_id, self.workload, at
                    )
                except LLMError as err:
                    log.warning("meta-summarizer: %s", err)
                await self._evolve_strategies(ctx, model, at)
            if self._recommendations is None:
                self._recommendations = await load_recommendations(ctx.store, ctx.run_id)
        return self._recommendations or list(ctx.recommendations)

    async def _evolve_strategies(self, ctx: ProposalContext, model: str, at: int) -> None:
        """The population's meta step, once per meta point (a resumed run does not repeat it)."""
        population = self._strategies
        if population is None or population.meta_at >= at:
            return
        population.meta_at = at
        step = await evolve_strategies(
            population,
            self.service,
            model,
            ctx.store,
            ctx.run_id,
            self.workload,
            retire_after=self.settings.strategy_retire_after,
            rewrites=self.settings.strategy_rewrites,
        )
        async with ctx.store.transaction() as tx:
            await strat.save(tx, ctx.run_id, population)
            if step.retired or step.added:
                await tx.event(
                    ctx.run_id,
                    Strategies(
                        at=at, retired=step.retired, rewritten=step.rewritten, added=step.added, llm_call=step.call_id
                    ),
                )

    async def propose(self, ctx: ProposalContext) -> Proposal | None:
        bandit = await self._prepare(ctx)
        if self.budget.exhausted():
            raise BudgetExhausted(
                f"LLM budget of {self.budget.limit_usd:.4f} USD is committed "
                f"({self.budget.committed_usd:.4f} spent or in flight)"
            )
        try:
            return await self._propose(ctx, bandit)
        finally:
            await bandit.save(ctx.store, ctx.run_id)
            if self._strategies is not None:
                async with ctx.store.transaction() as tx:
                    await strat.save(tx, ctx.run_id, self._strategies)

    async def _propose(self, ctx: ProposalContext, bandit: Bandit) -> Proposal | None:
        recommendations = await self._recommend(ctx, bandit)
        kind, temperature = choose_kind(ctx, self.settings.repair_rate)
        model = bandit.select(ctx.rng)
        bandit.pulled(model)
        strategy = None
        if self._strategies is not None and kind != "repair":  # a repair follows the failed child's idea
            strategy = self._strategies.select(ctx.rng, ctx.parent.descriptor)
            if strategy is not None:
                self._strategies.pulled(strategy)
        parent = ctx.parent
        max_tokens = self.settings.max_tokens_full if kind in ("full", "cross") else self.settings.max_tokens_diff
        system = system_prompt(self.workload, self.node_facts)
        if kind == "repair":
            parent = ctx.repairable[0]  # the newest failure not repaired yet
            content = repair_prompt(parent, self.workload, ctx.parent)
            shown = {"repair_of": parent.id, "failures": [parent.id]}
        else:
            content = mutate_prompt(
                kind,
                parent,
                self.workload,
                second=ctx.second_parent if kind == "cross" else None,
                inspirations=ctx.inspirations,
                rejected=ctx.rejected,
                recommendations=recommendations,
                strategy=strategy.text if strategy is not None else None,
                failures=failures_section(ctx.failures, self.workload),
            )
            shown = {"parent": parent.id, "failures": [f.id for f in ctx.failures]}
        messages = [{"role": "user", "content": content}]
        call_ids: list[int] = []
        for attempt in range(1 + max(0, ctx.feedback_attempts)):
            try:
                out = await self.service.chat(
                    model,
                    ChatRequest(system, list(messages), temperature, max_tokens),
                    store=ctx.store,
                    run_id=ctx.run_id,
                    purpose="mutate",
                    shown=shown,
                )
            except LLMError as err:
                log.warning("%s: no proposal: %s", model, err)
                return None
            bandit.paid(model, out.cost_usd)
            if out.call_id is not None:
                call_ids.append(out.call_id)
            messages.append({"role": "assistant", "content": out.text or "(empty answer)"})
            try:
                if kind in ("diff", "repair"):
                    child = apply_diff(parent.source, parse_diff(out.text))
                else:
                    child = apply_blocks_answer(parent.source, out.text)
                check_child(parent.source, child)
                if redact(child) != child:
                    raise EditError("the program contains something shaped like an API key; remove it")
            except EditError as err:
                log.info("%s: answer %d rejected: %s", model, attempt + 1, err)
                messages.append({"role": "user", "content": rejection_message(str(err), kind)})
                continue
            others = [s for s in ctx.island_sources if s != parent.source]
            if kind != "repair":  # a repair is meant to stay close to the failed child it fixes
                others.append(parent.source)
            try:
                similarity = await self.novelty.max_similarity(child, others)
            except LLMError as err:  # an embedding failure falls back to the local measure
                log.warning("novelty embeddings failed (%s); using token shingles", err)
                similarity = await ShingleNovelty(self.settings.novelty_threshold).max_similarity(child, others)
            if similarity >= self.novelty.threshold:
                log.info("%s: answer %d too similar (%.3f)", model, attempt + 1, similarity)
                messages.append({"role": "user", "content": novelty_message(similarity)})
                continue
            if strategy is not None and out.call_id is not None and self._strategies is not None:
                self._strategies.proposed(out.call_id, strategy)  # credited when the child's result is final
            return Proposal(
                source=child,
                operator=OPERATORS[kind],
                mutator=f"llm:{model}",
                note=_note(redact(out.text)),
                llm_call_ids=call_ids,
                parent_id=parent.id if kind == "repair" else None,
            )
        log.info("%s: no valid, novel answer after %d attempts", model, 1 + max(0, ctx.feedback_attempts))
        return None

    async def settle(self, store: Store, run_id: str) -> None:
        """At the run's end: credit the children that finished since the last proposal to their model and
        strategy (no later proposal will)."""
        if self._bandit is None or self._strategies is None or self._run_id != run_id:
            return
        await self._bandit.sync(store, run_id)
        await self._bandit.save(store, run_id)
        await self._strategies.sync(store, run_id, public_reason=lambda text: scrub(redact(text), self.workload))
        async with store.transaction() as tx:
            await strat.save(tx, run_id, self._strategies)

    def cancel_calls(self) -> None:
        """A stop: the requests in flight end now (recorded as cancelled); their proposals end with nothing."""
        self.service.cancel_calls()

    async def close(self) -> None:
        await self.service.close()


def build_llm_mutator(
    models: list[str],
    budget_usd: float | None,
    workload: Workload,
    *,
    home: Path,
    embedding: str | None = None,
    settings: LLMSettings | None = None,
    node_facts: str | None = None,
    require_keys: bool = True,
) -> LLMMutator:
    """The LLM mutator for a run. Raises `InputError` (field `--llm`) for a bad model string or a
    missing key variable, and for a bad `<home>/pricing.yaml`."""
    settings = settings or LLMSettings()
    specs = parse_models(models, require_keys=require_keys)
    all_specs: list[ModelSpec] = list(specs)
    novelty: NoveltyCheck | None = None
    embed_name = None
    if embedding:
        espec = parse_model(embedding)
        if espec.provider == "anthropic":
            raise InputError("--llm", "--llm", f"{embedding!r}: embeddings need openai: or openai-compat:")
        if espec not in all_specs:
            all_specs.append(espec)
        embed_name = espec.name
        novelty = EmbeddingNovelty(embed=None, threshold=settings.embedding_threshold)  # type: ignore[arg-type]
    service = LLMService(
        all_specs,
        Pricing.load(home),
        Budget(budget_usd),
        RetryPolicy(timeout_s=settings.timeout_s, max_attempts=settings.max_attempts),
    )
    return LLMMutator(
        service,
        workload,
        [s.name for s in specs],
        settings=settings,
        novelty=novelty,
        embedding_model=embed_name,
        node_facts=node_facts,
    )
