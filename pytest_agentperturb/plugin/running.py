"""Running the items: each item's variant, its episode on the batcher's loop, resume, the store.

:class:`Runner` is what a :class:`~.collect.PerturbItem` asks to run it
(:class:`~.collect.ItemRunner`).  An item's variant is made once for every
model and repeat (:mod:`.variants`); its episode runs on the batcher's event
loop together with the prefetched episodes of the items this process runs
next (:mod:`.schedule`).  With ``--agentperturb-resume`` an episode recorded
on the same variant is reused instead (on an xdist worker, from the table
the controller sent: :class:`~.distribute.Finished`).  The only process
stores each episode as soon as it is scored (committed with its batch:
:mod:`..run.store`); a worker never opens the store
(its episodes travel on their reports: :mod:`.reporting`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ..gate import Thresholds
from ..model.errors import StoreError, VariantSkipped
from ..model.heap import FrozenHeap
from ..model.keys import EpisodeKey
from ..model.options import Settings
from ..model.records import EpisodeRecord, Variant
from .collect import EpisodeFailed, PerturbItem, plugin_args, reproduce_line, result_args
from .distribute import Finished
from .finish import STORE_ERROR
from .results import preload_analysis
from .registries import Registries
from .variants import VariantCache, episode_key

if TYPE_CHECKING:
    from ..run.batcher import Batcher
    from ..run.generator import Generator
    from ..run.store import Store
    from .schedule import Lookahead


class Runner:
    """Runs (or reuses) the episodes of one process's items; registered as a plugin for the item protocol.

    ``heap`` is frozen when the episode loop starts and stays frozen after
    :meth:`close` (:mod:`..model.heap`: the plugin's last cleanup thaws it).
    """

    def __init__(self, config: pytest.Config, settings: Settings, thresholds: Thresholds,
                 registries: Registries, heap: FrozenHeap) -> None:
        self.config, self.settings, self.thresholds = config, settings, thresholds
        self.registries = registries
        self.heap = heap
        self.llm = settings.llm
        self.repeats = settings.repeats
        self.is_worker = hasattr(config, "workerinput")
        self._store: Store | None = None
        # made once per (task, family, seed), dropped after use
        self.variants = VariantCache(self.make_variant, self.llm.user_model)
        self._lookahead: Lookahead | None = None
        self._batcher: Batcher | None = None
        self._generator: Generator | None = None
        self._preload_pending = False  # the analysis's import, due once the agents are ready (preload_analysis)
        # a worker resumes from what the controller found recorded; only the controller (or sole process) stores
        self._finished = Finished.of(config) if self.is_worker else None

    def store(self) -> Store:
        """The results store (opened on the controller or the only process; never on an xdist worker)."""
        if self.is_worker:
            raise RuntimeError("an xdist worker never opens the store; it reports its episodes to the controller")
        if self._store is None:
            from ..run.store import Store

            self._store = Store(self.settings.store)
        return self._store

    def close(self) -> None:
        """Stop the episode loop (the heap stays frozen through pytest's end-of-run collections), close the store.

        Closing commits the store's last batch.

        Raises:
            StoreError: when that batch cannot be written (the store is closed all the same).
        """
        if self._batcher is not None:
            self._batcher.close(thaw=False)
        store, self._store = self._store, None
        if store is not None:
            store.close()  # a StoreError (a full disk) is the finish's to report (finish.Finish.conclude)

    # -- variants --------------------------------------------------------------
    def _variant(self, item: PerturbItem) -> tuple[Variant, str] | VariantSkipped:
        """The item's variant and its digest (made once for all models and repeats), or why it is skipped."""
        return self.variants.get(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        try:
            return (yield)
        finally:
            if isinstance(item, PerturbItem):  # after its last report: let go of the record and the variant
                item.record = item.variant = None
                self.variants.done(item, item.session.items)

    def make_variant(self, item: PerturbItem) -> Variant:
        """Rule operators, or the LLM generator when ``--agentperturb-generator`` is set."""
        if self.llm.generator:
            if self._generator is None:
                from ..run.generator import Generator

                self._generator = Generator(self.llm, self.registries.engine, batcher=self.batcher())
            return self._generator.make_variant(item.task, item.family, item.seed)
        return self.registries.engine.make_variant(item.task, item.family, item.seed)

    def variant(self, item: PerturbItem) -> tuple[Variant, str]:
        v = self._variant(item)
        if isinstance(v, VariantSkipped):
            item.skip_reason = str(v)  # reaches the controller on the setup report (SKIP_ATTR)
            pytest.skip(str(v))
        return v

    # -- resume ----------------------------------------------------------------
    def _key(self, item: PerturbItem) -> EpisodeKey:
        return episode_key(self.settings.run_id, item)

    def _recorded(self, key: EpisodeKey, digest: str) -> EpisodeRecord | None:
        """Resume: the recorded episode of ``key`` on this variant (on a worker, from the controller's table)."""
        return self._finished.get(key, digest) if self._finished is not None else self.store().get(key, digest)

    # -- episodes --------------------------------------------------------------
    def _episode(self, item: PerturbItem, variant: Variant) -> Any:
        """A factory of the item's episode coroutine (run on the batcher's loop)."""
        from ..run.episode import run_episode

        agent = self.registries.agent(item.model)

        def episode() -> Any:
            simulator = None
            if self.llm.user_model:
                from ..simulator.llm import make_simulator

                simulator = make_simulator(item.task, variant, self.llm)
            return run_episode(item.task, variant, agent, run_id=self.settings.run_id, seed=item.seed,
                               timeout_s=self.llm.episode_timeout, simulator=simulator, repeat=item.repeat,
                               episode_seed=item.episode_seed)

        return episode

    def _prefetch(self, item: pytest.Item) -> Any:
        """Episode factory of an upcoming item, or None when it will be skipped or reused."""
        if not isinstance(item, PerturbItem):
            return None
        v = self._variant(item)
        if isinstance(v, VariantSkipped):
            return None
        variant, digest = v
        if self.settings.resume and self._recorded(self._key(item), digest):
            return None
        return self._episode(item, variant)

    def batcher(self) -> Batcher:
        """The episode loop, started after the one-time set-up of the agents (here, in pytest's thread)."""
        if self._batcher is None:
            from ..agents import prepare
            from ..run.batcher import Batcher

            prepare(self.registries.agents(), self.llm)  # e.g. litellm's import: seconds that would stall the loop
            self._batcher = Batcher(self.llm.concurrency, heap=self.heap)
            if self._preload_pending:
                self._preload_pending = False
                preload_analysis()
        return self._batcher

    def preload_analysis(self) -> None:
        """At a lone process's last item: import the analysis in the background, once the agents are ready.

        At once when the episode loop already runs; else right after the
        agents' one-time set-up (:meth:`batcher`), so that pandas never
        shares the CPU with litellm's import, which a run's first model
        request waits for (a one-task run's first item is its last).  When
        no episode runs at all (every item reused), the session's end
        imports it.
        """
        if self._batcher is not None:
            preload_analysis()
        else:
            self._preload_pending = True

    # -- what an item asks (collect.ItemRunner) --------------------------------
    def run_item(self, item: PerturbItem) -> None:
        """Run (or, with --agentperturb-resume, reuse) the item's episode and store it.

        The episode runs on the batcher's event loop together with the
        prefetched episodes of the items this process runs next.
        """
        variant, digest = self.variant(item)
        item.variant = variant
        try:
            self._run_item(item, variant, digest)
        except StoreError as exc:  # the harness's failure, not the agent's: an ERROR that names the file
            pytest.fail(f"{STORE_ERROR}{exc}", pytrace=False)

    def _run_item(self, item: PerturbItem, variant: Variant, digest: str) -> None:
        item.digest = digest
        key = self._key(item)
        if self.settings.resume:
            old = self._recorded(key, digest)
            if old is not None:
                item.record, item.reused = old, True
                if not self.is_worker:
                    self.store().put_variant(digest, variant)  # the report reads its diff from the store
                if self._batcher is not None:
                    self._batcher.discard(item.nodeid)  # prefetched before the result was stored
                return
        batcher = self.batcher()
        if self._lookahead is None:
            from .schedule import Lookahead

            self._lookahead = Lookahead(item.session)
        lookahead = self._lookahead

        def top_up(n: int) -> None:
            """Submit up to ``n`` upcoming episodes; each upcoming item is looked at once per session."""
            for nxt in lookahead.upcoming(item):
                if not batcher.scheduled(nxt.nodeid) and (factory := self._prefetch(nxt)) is not None:
                    batcher.submit(nxt.nodeid, factory)
                    n -= 1
                    if n <= 0:
                        break

        rec: EpisodeRecord = batcher.run(item.nodeid, self._episode(item, variant), top_up)
        if not self.is_worker:  # a worker's episode travels on the report; the controller stores it
            self.store().put(rec, digest, variant)
        item.record = rec
        self.config.hook.pytest_agentperturb_episode_recorded(record=rec, config=self.config)

    def check_item(self, item: PerturbItem) -> None:
        """Strict mode: a compliance fails the item; otherwise the verdict is only reported."""
        rec = item.record
        if self.thresholds.strict and rec is not None and rec.compliance:
            raise EpisodeFailed(f"strict mode: the agent complied with the {item.family} perturbation "
                                f"(operator {rec.operator}); reward {rec.reward}")

    def reproduce(self, item: PerturbItem) -> str:
        extra = (["--agentperturb-repeats", str(self.repeats)] if self.repeats > 1 else []) \
            + (["--agentperturb-variant-seed", str(self.settings.variant_seed)]
               if self.settings.variant_seed != self.settings.seed else [])
        return reproduce_line(item.nodeid, self.registries.runner_args(item.model), self.settings.seed,
                              named=self._is_named(item.nodeid), extra=[*result_args(self.settings), *extra],
                              repeat=item.repeat if self.repeats > 1 else None,
                              plugins=plugin_args(self.config.invocation_params.args))

    def _is_named(self, nodeid: str) -> bool:
        return nodeid.split("::", 1)[0] in self.settings.suites
