"""The consumer: claims into free slots and starts runs; its main loop, and its control.

One main thread talks to the backend (claims, acks, heartbeats, checkpoints) and decides every
transition; slot threads (``slots``) run sync handlers, one event loop (``aio``) runs
``async def`` ones. Finished attempts queue up while the main thread is busy, and while few
slots are free it waits a moment for more (``gather``, at most 2 ms): their acks go out with
the next claim, one round trip and one commit for the batch. Ending attempts — reaping,
interrupting, deciding, acking, the shutdown grace — follows, on the same thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from datetime import timedelta

from django.db import connections

from django_blamequeue import encryption
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import AckResult, Backlog, Claimed
from django_blamequeue.exceptions import ErrorCode, LeaseLost, QueueError, WorkerShutdown
from django_blamequeue.jobs import registry
from django_blamequeue.jobs.workflow import Workflow
from django_blamequeue.observability import metrics
from django_blamequeue.relay.outbox import RelayReport, settle_pending
from django_blamequeue.worker import atomic, fleet
from django_blamequeue.worker.acks import PendingAcks, account
from django_blamequeue.worker.ahead import Ahead
from django_blamequeue.worker.atomic_turns import Turns
from django_blamequeue.worker.batching import Gather
from django_blamequeue.worker.checkpoint_writer import Checkpointer
from django_blamequeue.worker.control_cache import ControlView
from django_blamequeue.worker.counters import Counters, StartWindow
from django_blamequeue.worker.event_loop import EventLoop
from django_blamequeue.worker.execution import (
    Handler,
    Run,
    is_async,
    new_run,
    read_flow_states,
    transition_for,
)
from django_blamequeue.worker.heartbeat import Heartbeat
from django_blamequeue.worker.liveness import Liveness
from django_blamequeue.worker.notify import Notifier
from django_blamequeue.worker.probation import Probation
from django_blamequeue.worker.slots import SlotPool
from django_blamequeue.worker.tally import Tally

logger = logging.getLogger("django_blamequeue.worker")

#: Seconds the exiting worker waits for its slot threads to close their connections.
STOP_WAIT = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    queues: tuple[str, ...]
    concurrency: int = 1
    lease: float = 30.0
    poll_interval: float = 1.0
    fast_poll: float = 0.05
    rate_limit: tuple[int, float] | None = None
    burst: bool = False  # exit when nothing is due (delayed jobs are left to come due)
    wait_delayed: bool = False  # burst: wait for delayed jobs too
    register: bool = True  # in the worker registry (queue.workers())
    max_jobs: int | None = None  # claim no more than this many in the worker's life (recycling)


class Consumer:
    """A worker: claims into free slots and starts runs; reaps, decides and acks them."""

    def __init__(self, backend: Backend, options: WorkerOptions, handler: Handler | None = None):
        self.backend = backend
        self.options = options
        self.handler = handler
        self.counters = Counters()
        self.tally = Tally(backend, options.lease)  # the console's charts
        self.heartbeat = Heartbeat(backend, options.lease)
        self.listening = False
        self._settings = get_settings()
        self._wake = threading.Event()
        self._finished: deque[Run] = deque()
        self._running: dict[str, Run] = {}
        self._acks = PendingAcks()
        self._probation = Probation(self._settings.max_stalled_count)
        self._turns = Turns(backend, options.queues, dispatching=handler is None)
        self._gather = Gather(options.concurrency)
        self._ahead = Ahead(options.concurrency, enabled=options.rate_limit is None)
        self.notifier = Notifier()  # hooks and lifecycle signals, after each ack
        #: Burst mode: what was left when the worker last looked (delayed jobs it leaves).
        self.left: Backlog | None = None
        #: The exception that ended the main loop, if one did (runworker exits non-zero).
        self.failure: BaseException | None = None
        self._starts = StartWindow(options.rate_limit)
        self._stopping = False
        self._grace_until: float | None = None
        self._error_delay = 0.0
        self.liveness = Liveness(
            backend.alias, options.poll_interval, self._settings.worker_stalled_after
        )
        self._thread = threading.Thread(target=self._main, name="blamequeue-consumer", daemon=True)
        self._exited = threading.Event()
        self.pool = SlotPool(options.concurrency, handler, self._report)
        self.loop = EventLoop(handler, self._report)  # async runs, in the same slots
        self.checkpointer = Checkpointer(backend, self._settings.progress_throttle, self._wake)
        self.control = ControlView(
            backend,
            options.queues,
            self._settings.queues,
            options.poll_interval,
            registry.rate_limits() if handler is None else (),
        )
        self._listener: object = None
        #: Job names this worker handed back for lack of a handler, with how often.
        self.no_handler: dict[str, int] = {}
        names = [fleet.ANY_NAME] if handler is not None else list(registry.registered())
        # a beat at least every half WORKER_STALLED_AFTER, so the verdict it carries is fresh
        beat = min(fleet.HEARTBEAT, max(self._settings.worker_stalled_after / 2, 0.5))
        self.registration = fleet.Registration(
            backend, options.queues, options.concurrency, names, self._snapshot, heartbeat=beat
        )
        self._acks.worker = self.registration.worker_id  # each attempt's history names it

    # -- control ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def cancel(self, grace: float | None = None) -> None:
        """Stop leasing; let running handlers finish within ``grace``, then release them."""
        grace = self._settings.shutdown_grace if grace is None else grace
        until = time.monotonic() + grace
        self._grace_until = until if self._grace_until is None else min(self._grace_until, until)
        self._stopping = True
        self._wake.set()

    def abort(self) -> None:
        """Second signal: release everything now."""
        self.cancel(grace=0)

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def in_flight(self) -> int:
        return len(self._running)

    # -- main loop -------------------------------------------------------------------------
    def _main(self) -> None:
        listener = None
        try:
            try:
                listener = self.backend.listener(self.options.queues)
                if listener is not None:
                    listener.start(self._wake)
            except Exception:  # wake-ups only hasten claims: poll without them
                logger.exception("starting the wake-up listener failed; polling instead")
                listener = None
            self._listener = listener
            wakeup.register(self.options.queues, self._wake)
            if self.options.register:
                self.registration.start()
            self._loop(listener)
        except BaseException as exc:  # only what escaped every round's guard: die loudly
            self.failure = exc
            logger.critical("the worker's main loop died", exc_info=True)
        finally:
            wakeup.unregister(self.options.queues, self._wake)
            if listener is not None:
                listener.stop()
            self.pool.stop(wait=STOP_WAIT)  # the slots' connections close before we return
            self.loop.stop()
            self.tally.flush_due(time.monotonic(), force=True)
            self._settle_queued()
            self.notifier.stop(max(self._grace_until or 0.0, time.monotonic() + 1.0))
            if self.options.register:
                self.registration.stop()
            self._exited.set()
            connections.close_all()

    def _snapshot(self) -> fleet.Snapshot:
        """For the registry's heartbeat thread: what runs here now."""
        for _ in range(5):
            try:
                running = tuple(self._running)
                break
            except RuntimeError:  # the main thread changed it meanwhile: read again
                continue
        else:
            running = ()
        c = self.counters
        if self._stopping:
            state = "stopping"
        else:
            held = self._probation.held
            state = self.liveness.state(
                running=max(0, len(running) - held),
                due=self._due,
                describe=lambda: (
                    f"in flight {len(running)}/{self.options.concurrency}, "
                    f"{held} held to run alone, backing off {self._error_delay:.1f} s"
                ),
            )
        return fleet.Snapshot(running=running, state=state, done=c.done, failed=c.failed)

    def _due(self) -> int:
        """Jobs due on this worker's queues (the stall check asks, from the registry's
        thread, only once the loop has been quiet for ``WORKER_STALLED_AFTER``)."""
        b = self.backend
        return b.resilience.call(lambda: b.backlog(self.options.queues), idempotent=True).due

    @staticmethod
    def _settle_queued() -> None:
        """Settle the parents this process's acks queued for the relay thread, before the
        process goes (otherwise the flow sweeper would, up to FLOW_SWEEP_INTERVAL later)."""
        try:
            settle_pending(RelayReport())
        except Exception:
            logger.warning("settling queued flow parents at exit failed", exc_info=True)

    def _loop(self, listener: object) -> None:
        """Rounds until stopped. A round that raises is logged and backed off, never the
        end: unsent acks stay to be sent again (fenced, so safe)."""
        while True:
            try:
                if self._round(listener):
                    return
            except Exception as exc:
                self._failed("a worker round", exc)
                self._wake.wait(self._error_delay)

    def _round(self, listener: object) -> bool:
        """One round; True when the worker is done (stopped, or a burst found nothing due)."""
        self._wake.clear()
        self.listening = bool(getattr(listener, "listening", False))
        self._reap()
        self._check_deadlines()
        if self._stopping and self._shutdown_step():
            return True
        self._heartbeat()
        self.tally.flush_due(time.monotonic())
        self.control.refresh(listener)
        self._start_alone()
        self._start(self._turns.due(self._running))
        self._start(self._ahead.due(self._open_slots(), time.monotonic()))
        claimed_full = False
        free = 0 if self._stopping or self._probation.busy(self._running) else self._free_slots()
        # Gather on the open slots: the room to claim ahead is always there, and would make
        # every round trip go at once, a few jobs at a time.
        gathered = min(free, self._open_slots())
        hold = self._gather.hold(gathered, len(self._running), time.monotonic())
        if hold > 0:  # more runs are about to finish: one round trip for them all
            self._wake.wait(min(hold, self._wait_time()))
            return False
        if free > 0:
            if self.backend.supports_apply_and_claim and not self._acks.isolating:
                got = self._flush_and_claim(free)
            else:
                self._flush()
                got = self._claim(free)
            claimed_full = got == free and got > 0
            if self.options.burst and got == 0 and self._drained():
                self._flush()
                return True
        else:
            self._flush()
        if not (claimed_full or self._finished):
            self._wake.wait(self._wait_time())
        return False

    def _busy(self) -> int:
        """Runs holding a slot. An atomic run waiting its turn holds none (it has no thread),
        so the other jobs of its queue keep their slots; at most ``concurrency`` of them are
        left out of the count, which bounds what a worker leases at twice its slots. A run
        claimed ahead (``ahead.py``) holds none either until a slot frees."""
        left_out = min(self._turns.waiting, self.options.concurrency) + self._ahead.waiting
        return len(self._running) - left_out

    def _open_slots(self) -> int:
        """Slots with no run in them now."""
        return max(0, self.options.concurrency - self._busy())

    def _free_slots(self) -> int:
        """How many jobs to lease now: the open slots, and the room to claim ahead."""
        free = self.options.concurrency - self._busy()
        if not self._stopping:
            free += self._ahead.room()
        if self.options.max_jobs is not None:
            free = min(free, self.options.max_jobs - self.counters.claimed)
        if free <= 0:
            return free
        room = self._starts.room(time.monotonic())
        if room <= 0:  # the rate window is closed: nothing to ask now
            self.liveness.idle()
        return min(free, room)

    def _wait_time(self) -> float:
        now = time.monotonic()
        if self._error_delay:
            return self._error_delay
        if self._stopping:
            return 0.05
        if self._running and self._busy() >= self.options.concurrency:
            wait = self.options.poll_interval  # woken by the next finished handler
        elif self.backend.cheap_polling or self.options.burst:
            wait = self.options.fast_poll
        else:
            wait = self.options.poll_interval
        wait = min(wait, self._starts.next_room(now))
        wait = min(wait, self.heartbeat.next_due(self._running, now))
        wait = min(wait, self.checkpointer.next_due(now))
        if self._busy() < self.options.concurrency:
            wait = min(wait, self.control.rate_wait())  # a rate window may open before a poll
        return max(wait, 0.0005)

    # -- claims ----------------------------------------------------------------------------
    def _claim(self, limit: int) -> int:
        queues, limits = self.control.claim_args()
        queues = self._turns.claimable(queues)
        if not queues:  # every queue paused
            self.liveness.idle()
            return 0
        try:
            claimed = self.backend.resilience.call(
                lambda: self.backend.claim(queues, limit, self.options.lease, limits=limits),
                probe_after=self.options.poll_interval,
            )
        except Exception as exc:  # never let one bad round kill the worker
            self._failed("claim", exc)
            return 0
        self._answered()
        return self._dispatch_all(claimed)

    def _flush_and_claim(self, limit: int) -> int:
        """Ack what finished and lease up to ``limit`` more, in one transaction."""
        queues, limits = self.control.claim_args()
        queues = self._turns.claimable(queues)
        if not queues:  # every queue paused
            self.liveness.idle()
            self._flush()
            return 0
        if self._acks and not self._store_checkpoints():
            return 0
        acks = self._acks.batch()
        try:
            results, claimed = self.backend.resilience.call(
                lambda: self.backend.apply_and_claim(
                    acks, queues, limit, self.options.lease, limits=limits
                ),
                probe_after=self.options.poll_interval,
            )
        except Exception as exc:  # keep the acks; a re-sent ack is fenced, so retrying is safe
            self._failed("ack and claim", exc)
            if not unavailable(exc):
                self._flush()  # the acks alone: tells a refused ack from a failing claim
            return 0
        self._answered()
        self._settle(results)
        return self._dispatch_all(claimed)

    def _dispatch_all(self, claimed: list[Claimed]) -> int:
        now = time.monotonic()
        open_slots = self._open_slots()  # before these runs are tracked
        runs = []
        for c in claimed:
            run = new_run(
                c, self.backend, now, self.options.lease, self._settings.progress_throttle
            )
            if self.handler is None and run.definition is None and not c.problem:
                self._hand_back(run)
            else:
                runs.append(self._dispatch(run, now))
        read_flow_states(self.backend, runs)
        admitted = self._turns.admit(self._probation.admit(runs))
        self._start(self._ahead.admit(admitted, open_slots, now))
        self.counters.claimed += len(claimed)
        return len(claimed)

    def _hand_back(self, run: Run) -> None:
        """A job this worker has no handler for (a rolling deploy): back to pending without
        spending an attempt, for a worker that has it (``lifecycle.NoHandler`` decides how
        long it waits, and fails it once no worker had a handler for it for
        ``MISSING_HANDLER_TIMEOUT``). Acked at once, with no slot taken."""
        c = run.claimed
        claimed_at = c.lease_expires_at - timedelta(seconds=self.options.lease)  # engine clock
        age = (claimed_at - c.created_at).total_seconds() if c.created_at else 0.0
        outcome = lifecycle.NoHandler(
            name=c.name,
            age=max(age, 0.0),
            known_elsewhere=self.registration.known_elsewhere(c.queue, c.name),
            worker=self.registration.worker_id,
        )
        self._acks.add(run, transition_for(c, None, outcome))
        self.no_handler[c.name] = self.no_handler.get(c.name, 0) + 1
        self._wake.set()  # ack it in the next round, not after a poll

    def _dispatch(self, run: Run, now: float) -> Run:
        """Track a claimed job as running; the caller hands the run to the pool."""
        c = run.claimed
        run.ctx.on_extend = run.extended
        if run.definition is not None and run.definition.atomic and self.handler is None:
            atomic.prepare(run)
            run.ctx.atomic = True  # no checkpoints: its writes roll back with a failure
        if run.definition is not None and run.definition.durable and self.handler is None:
            # ctx.step & co. replay its record (encrypted like the job's payload)
            run.ctx.workflow = Workflow(run.ctx, encrypted=encryption.is_encrypted(c.payload))
        self.checkpointer.attach(run)
        old = self._running.get(c.job_id)
        if old is not None:  # leased to us again: the engine gave the old lease up
            old.superseded = True
            self._interrupt(old, LeaseLost, None)
        self._running[c.job_id] = run
        if metrics.enabled:
            metrics.run_started(self.backend.alias, c, self.options.lease)
        self._starts.started(now)
        return run

    def _start_alone(self) -> None:
        """A held probation run starts once it is alone here, its lease marked so."""
        try:
            started = self._probation.start_next(self.backend, self._running)
        except Exception as exc:  # held still: the next round tries again
            self._failed("marking a lease to run alone", exc)
            return
        if started is None:
            return
        run, marked = started
        if not marked:  # the lease is gone: someone else owns the job
            self._untrack(run)
            self.counters.lock_lost += 1
            return
        self._start([run])

    def _start(self, runs: list[Run]) -> None:
        """Hand runs to their runner: a slot thread, or the event loop for async ones."""
        threaded: list[Run] = []
        awaited: list[Run] = []
        for run in runs:
            (awaited if is_async(run, self.handler) else threaded).append(run)
        self.pool.submit_many(threaded)
        self.loop.submit_many(awaited)

    def _drained(self) -> bool:
        """Burst mode: nothing running here, nothing to ack, nothing due anywhere (and,
        with ``wait_delayed``, nothing delayed). A paused queue counts as empty, and so do
        the jobs handed back for lack of a handler this worker does not have either."""
        if self._running or self._acks or self._finished:
            return False
        self.control.refresh(self._listener, force=True)
        queues, _ = self.control.claim_args()
        b = self.backend
        try:
            left = b.resilience.call(lambda: b.backlog(queues), idempotent=True)
            if self.options.wait_delayed and left.delayed and self.handler is None:
                waits = b.resilience.call(lambda: b.handler_waits(queues), idempotent=True)
                mine = sum(w.count for w in waits if registry.get(w.name) is None)
                left = replace(left, delayed=max(0, left.delayed - mine))
            self.left = left
            return left.finished(
                lambda: b.resilience.call(b.now, idempotent=True),
                wait_delayed=self.options.wait_delayed,
            )
        except Exception as exc:
            self._failed("reading the backlog", exc)
            return False

    # -- ending attempts: reap finished runs, interrupt stopped ones, decide, ack ---------
    # An ack goes only after the attempt's last checkpoint is stored; one that cannot be sent
    # stays for the next round (fenced by the lease token, so sending it twice is safe).
    def _report(self, run: Run) -> None:
        """Called from a slot thread when a handler finished (and was not abandoned)."""
        self._finished.append(run)
        if not self._wake.is_set():  # set already: the main thread reaps this run too
            self._wake.set()

    def _reap(self) -> None:
        now = time.monotonic()
        while self._finished:
            run = self._finished.popleft()
            assert run.outcome is not None
            self._ahead.ran(run.took if run.took is not None else now - run.started)
            if run.settled is not None:  # an atomic run acked (or lost) in its own transaction
                self._untrack(run)
                self.checkpointer.end(run, keep=False)  # acked already: nothing to resume
                account(self.counters, self.backend.alias, run, atomic.SETTLED, run.settled)
                self.notifier.ended(run, atomic.SETTLED, run.settled)
                self.tally.add(run, atomic.SETTLED, run.settled)
                continue
            self._decide(run, run.outcome)

    def _decide(self, run: Run, outcome: lifecycle.Outcome) -> None:
        if run.superseded:  # it finished after its job was leased to us again: no ack
            self.checkpointer.end(run, keep=False)
            self.counters.lock_lost += 1
            return
        transition = transition_for(run.claimed, run.definition, outcome)
        self._untrack(run)
        self.checkpointer.end(run, keep=True)  # stored before the ack (``_flush``)
        self._acks.add(run, transition)

    def _untrack(self, run: Run) -> None:
        """Forget ``run`` as running here; never a newer run of the same job that replaced
        it (a job leased again after its lease ran out has two runs here for a while)."""
        if self._running.get(run.claimed.job_id) is run:
            del self._running[run.claimed.job_id]

    def _interrupt(
        self,
        run: Run,
        exc_type: type[Exception] | type[BaseException],
        outcome: lifecycle.Outcome | None,
    ) -> None:
        """Take the decision away from the handler thread, free the slot, ack ``outcome``."""
        if self._probation.discard(run) or self._turns.discard(run) or self._ahead.discard(run):
            pass  # held to run alone, waiting its turn or a slot: never started, no thread
        elif not run.abandon(exc_type):  # type: ignore[arg-type]
            return  # it finished first; its outcome is already queued
        elif not is_async(run, self.handler):  # an async run's task was cancelled instead
            self.pool.replace_one()
        if outcome is None:  # lease lost: someone else owns the job; nothing to ack
            self._untrack(run)
            self.checkpointer.end(run, keep=False)
            self.counters.lock_lost += 1
            if run.invoker is not None:
                atomic.abandoned(run)  # its transaction rolls back: audit its LOCK_LOST
            if metrics.enabled:
                metrics.lease_lost(self.backend.alias, run.claimed.queue)
            logger.warning(
                "lost the lease of job %s; its run was abandoned",
                run.claimed.job_id,
                extra=_extra(run),
            )
            return
        self._decide(run, outcome)

    def _check_deadlines(self) -> None:
        for stop in self.heartbeat.deadlines(self._running, time.monotonic()):
            self.counters.timed_out += 1
            run = stop.run
            logger.warning(
                "job %s timed out after %.3g s",
                run.claimed.job_id,
                run.deadline - run.started if run.deadline else 0.0,
                extra=_extra(run),
            )
            self._interrupt(run, stop.exc_type, stop.outcome)

    def _heartbeat(self) -> None:
        if not self._running:
            return
        now = time.monotonic()
        try:
            for step in (self.heartbeat.renew, self.heartbeat.signals, self.checkpointer.write_due):
                for stop in step(self._running, now):
                    if stop.run.claimed.job_id in self._running:
                        self._interrupt(stop.run, stop.exc_type, stop.outcome)
        except Exception as exc:
            self._failed("heartbeat", exc)

    def _store_checkpoints(self) -> bool:
        """The last checkpoints of ended attempts, stored before their acks may go."""
        try:
            self.checkpointer.flush_final()
        except Exception as exc:  # keep the acks too: acked first, a value would be lost
            self._failed("storing checkpoints", exc)
            return False
        return True

    def _flush(self) -> None:
        if not self._acks or not self._store_checkpoints():
            return
        assert self.backend.resilience is not None
        acks = self._acks.batch()
        try:
            results = self.backend.resilience.call(lambda: self.backend.apply_many(acks))
        except Exception as exc:  # keep the acks; a re-sent ack is fenced, so retrying is safe
            self._failed("ack", exc)
            if not unavailable(exc):
                for run, _ in self._acks.refused(acks, exc):
                    logger.error(
                        "gave up the ack of job %s after refusals; its lease will expire and "
                        "the rescuer re-pend it",
                        *(run.claimed.job_id,),
                        extra=_extra(run),
                    )
            return
        self._answered()
        self._settle(results)

    def _settle(self, results: list[AckResult]) -> None:
        for run, transition, res in self._acks.applied(results):
            account(self.counters, self.backend.alias, run, transition, res)
            self.notifier.ended(run, transition, res)
            self.tally.add(run, transition, res)

    def _failed(self, what: str, exc: BaseException) -> None:
        """A backend call (or a whole round) failed: log it and back off (0.1 s doubling
        to a poll interval, at most 5 s: ``liveness``); the caller keeps what it must send
        again."""
        not_migrated = isinstance(exc, QueueError) and exc.code == ErrorCode.NOT_MIGRATED
        self._error_delay = self.liveness.backoff(
            what, exc, unavailable=unavailable(exc), traceback=not not_migrated
        )

    def _answered(self) -> None:
        """The engine answered a claim or an ack: any outage is over."""
        self._error_delay = 0.0
        self.liveness.progressed()

    # -- shutdown --------------------------------------------------------------------------
    def _shutdown_step(self) -> bool:
        """While stopping: wait for handlers until the grace ends, then release the rest."""
        waiting = [*self._turns.release_all(), *self._ahead.release_all()]
        for held in [*self._probation.release_all(), *waiting]:  # not started
            self._decide(held, lifecycle.Released())
        now = time.monotonic()
        if self._running and self._grace_until is not None and now >= self._grace_until:
            for run in list(self._running.values()):
                self._interrupt(run, WorkerShutdown, lifecycle.Released())
        if self._running:
            self._check_deadlines()
            self._heartbeat()
            self._flush()
            return False
        for _ in range(3):
            self._flush()
            if not self._acks:
                break
            time.sleep(self._error_delay or 0.1)
        return True


def unavailable(exc: BaseException) -> bool:
    """The engine could not be reached (send again later), as opposed to a refusal."""
    return isinstance(exc, QueueError) and exc.code == ErrorCode.BACKEND_UNAVAILABLE


def _extra(run: Run) -> dict[str, object]:
    c = run.claimed
    return {"job_id": c.job_id, "queue": c.queue, "attempt": c.attempt}
