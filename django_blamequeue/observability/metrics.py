"""Prometheus metrics (the optional ``prometheus`` extra, prometheus_client).

Call ``enable()`` once per process (e.g. in your ``AppConfig.ready``); ``runworker
--metrics-port N`` enables it and serves ``/metrics`` on port N; ``metrics_view`` serves the
same from Django. Counters follow the ``audit_event`` signal (sent after commit, in the
process that made the change), so they count what really happened:

=========================================  ====================================================
``blamequeue_jobs_enqueued_total``         jobs stored (not a deduplicated enqueue)
``blamequeue_jobs_started_total``          attempts started (claims)
``blamequeue_jobs_succeeded_total``        attempts that ended ``done``
``blamequeue_jobs_failed_total``           attempts that failed (retried or not)
``blamequeue_jobs_retried_total``          failed attempts sent back to ``pending``
``blamequeue_jobs_dead_lettered_total``    jobs that reached the DLQ (incl. stalled)
``blamequeue_jobs_stalled_total``          expired leases rescued by the sweeper
``blamequeue_jobs_cancelled_total``        jobs cancelled
``blamequeue_jobs_expired_total``          jobs cancelled as expired (not started in time)
``blamequeue_lock_lost_total``             acks refused and leases lost (another worker won)
``blamequeue_flow_fan_outs_total``         flow parents that fanned out (manifest stored)
``blamequeue_flow_child_reports_total``    child outcomes recorded on their parent (once each)
``blamequeue_flow_settles_total``          flow parents settled (``collect`` is due)
``blamequeue_flow_cascades_total``         cascading cancels of a settled/cancelled flow
``blamequeue_schedule_fires_total``        schedule occurrences fired
``blamequeue_schedule_skips_total``        occurrences skipped: the last run still going
``blamequeue_outbox_skipped_total``        outbox rows a relay pass skipped (left for retry)
``blamequeue_unique_conflicts_total``      enqueues of a held unique key, by ``outcome``:
                                           ``skip``, ``replace``, ``debounce``
``blamequeue_job_run_seconds``             histogram: claim to ack, per attempt
``blamequeue_job_wait_seconds``            histogram: available to claimed (engine clock)
``blamequeue_queue_jobs``                  gauge: jobs per queue and state, read at scrape
``blamequeue_queue_oldest_pending_seconds``  gauge: age of the oldest due pending job
=========================================  ====================================================

Labels: ``backend`` and ``queue`` (plus ``state`` on ``blamequeue_queue_jobs``). Multi-process:
set ``PROMETHEUS_MULTIPROC_DIR`` (an empty directory, the same for every process of a host)
before the processes start; counters and histograms then live in files there and any one
process's endpoint reports the sum. The gauges are read from the backends at scrape time.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from django_blamequeue import audit
from django_blamequeue.backends import all_backends
from django_blamequeue.signals import audit_event

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

    from django_blamequeue.core.records import Claimed

__all__ = ["disable", "enable", "enabled", "metrics_view", "registry", "serve"]

logger = logging.getLogger("django_blamequeue.metrics")

enabled = False
_lock = threading.Lock()
_m: _Metrics | None = None

LABELS = ("backend", "queue")
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)


@dataclass(frozen=True, slots=True)
class _Metrics:
    enqueued: Any
    started: Any
    succeeded: Any
    failed: Any
    retried: Any
    dead_lettered: Any
    stalled: Any
    cancelled: Any
    expired: Any
    lock_lost: Any
    fan_outs: Any
    child_reports: Any
    settles: Any
    cascades: Any
    schedule_fires: Any
    schedule_skips: Any
    outbox_skipped: Any
    unique_conflicts: Any
    run_seconds: Any
    wait_seconds: Any


def _require() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImproperlyConfigured(
            "metrics need prometheus_client: pip install 'django-blamequeue[prometheus]'"
        ) from exc
    return prometheus_client


def _create() -> _Metrics:
    p = _require()

    def counter(name: str, doc: str) -> Any:
        return p.Counter(f"blamequeue_{name}", doc, LABELS)

    return _Metrics(
        enqueued=counter("jobs_enqueued", "Jobs stored."),
        started=counter("jobs_started", "Attempts started (claims)."),
        succeeded=counter("jobs_succeeded", "Attempts that ended done."),
        failed=counter("jobs_failed", "Attempts that failed, retried or not."),
        retried=counter("jobs_retried", "Failed attempts sent back to pending."),
        dead_lettered=counter("jobs_dead_lettered", "Jobs that reached the DLQ."),
        stalled=counter("jobs_stalled", "Expired leases rescued by the sweeper."),
        cancelled=counter("jobs_cancelled", "Jobs cancelled."),
        expired=counter("jobs_expired", "Jobs cancelled as expired: not started in time."),
        lock_lost=counter("lock_lost", "Acks refused and leases lost to another worker."),
        fan_outs=counter("flow_fan_outs", "Flow parents that fanned out."),
        child_reports=counter("flow_child_reports", "Child outcomes recorded on their parent."),
        settles=counter("flow_settles", "Flow parents settled (collect due)."),
        cascades=counter("flow_cascades", "Cascading cancels of unfinished children."),
        schedule_fires=counter("schedule_fires", "Schedule occurrences fired."),
        schedule_skips=counter(
            "schedule_skips", "Schedule occurrences skipped: the last run still going."
        ),
        outbox_skipped=p.Counter(
            "blamequeue_outbox_skipped", "Outbox rows skipped by a relay pass.", ("backend", "kind")
        ),
        unique_conflicts=p.Counter(
            "blamequeue_unique_conflicts",
            "Enqueues of a held unique key, by what they did to its holder.",
            (*LABELS, "outcome"),
        ),
        run_seconds=p.Histogram(
            "blamequeue_job_run_seconds", "Claim to ack, per attempt.", LABELS, buckets=RUN_BUCKETS
        ),
        wait_seconds=p.Histogram(
            "blamequeue_job_wait_seconds", "Available to claimed.", LABELS, buckets=WAIT_BUCKETS
        ),
    )


def enable() -> None:
    """Count in this process (idempotent). Raises ``ImproperlyConfigured`` without the extra."""
    global enabled, _m
    with _lock:
        if _m is None:
            _m = _create()
            if not _multiprocess():
                _require().REGISTRY.register(QueueStatsCollector())
        audit_event.connect(_on_event, dispatch_uid="django_blamequeue.metrics")
        enabled = True


def disable() -> None:
    """Stop counting (the metrics stay registered, with their values)."""
    global enabled
    audit_event.disconnect(dispatch_uid="django_blamequeue.metrics")
    enabled = False


def _multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


# -- counters from audit events --------------------------------------------------------------
def _on_event(sender: Any, event: audit.Event, **kwargs: Any) -> None:
    m = _m
    if m is None:
        return
    labels = (event.backend or "", event.queue or "")
    action = event.action
    if action == audit.ENQUEUE:
        m.enqueued.labels(*labels).inc()
    elif action == audit.CONSUME_START:
        m.started.labels(*labels).inc()
    elif action == audit.CONSUME_SUCCESS:
        m.succeeded.labels(*labels).inc()
    elif action == audit.CONSUME_FAILURE:
        m.failed.labels(*labels).inc()
        if "retry_in" in event.data:
            m.retried.labels(*labels).inc()
    elif action == audit.DLQ_WRITE:
        m.dead_lettered.labels(*labels).inc()
    elif action == audit.STALLED:
        m.stalled.labels(*labels).inc()
    elif action == audit.CANCEL:
        m.cancelled.labels(*labels).inc()
    elif action == audit.LOCK_LOST:
        m.lock_lost.labels(*labels).inc()
    elif action == audit.UNIQUE:
        m.unique_conflicts.labels(*labels, str(event.data.get("outcome") or "skip")).inc()
    elif action in _FLOW_COUNTERS:
        getattr(m, _FLOW_COUNTERS[action]).labels(*labels).inc()


_FLOW_COUNTERS = {
    audit.FLOW_FAN_OUT: "fan_outs",
    audit.FLOW_REPORT: "child_reports",
    audit.FLOW_SETTLE: "settles",
    audit.FLOW_CASCADE: "cascades",
    audit.SCHEDULE_FIRE: "schedule_fires",
    audit.SCHEDULE_SKIP: "schedule_skips",
    audit.EXPIRE: "expired",
}


# -- worker hooks (what no audit event carries) ----------------------------------------------
def run_started(backend: str, claimed: Claimed, lease: float) -> None:
    """Wait time on the engine's clock: the claim set ``lease_expires_at = now + lease``."""
    if _m is None or claimed.available_at is None:
        return
    claimed_at = claimed.lease_expires_at - timedelta(seconds=lease)
    wait = max(0.0, (claimed_at - claimed.available_at).total_seconds())
    _m.wait_seconds.labels(backend, claimed.queue).observe(wait)


def run_finished(backend: str, queue: str, seconds: float) -> None:
    if _m is not None:
        _m.run_seconds.labels(backend, queue).observe(max(0.0, seconds))


def outbox_skipped(backend: str, kind: str, rows: int = 1) -> None:
    """A relay pass left rows it could not deliver (no audit event: nothing changed)."""
    if _m is not None:
        _m.outbox_skipped.labels(backend, kind).inc(rows)


def lease_lost(backend: str, queue: str) -> None:
    """A heartbeat found the lease gone (refused acks come as ``lock_lost`` audit events)."""
    if _m is not None:
        _m.lock_lost.labels(backend, queue).inc()


# -- gauges, read at scrape time -------------------------------------------------------------
class QueueStatsCollector:
    """Queue depth per state and oldest pending age, from every backend's ``stats()``."""

    def describe(self) -> Iterable[Any]:
        return []  # not known before a scrape: the registry must not collect at register

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        depth = GaugeMetricFamily(
            "blamequeue_queue_jobs",
            "Jobs per queue and state.",
            labels=["backend", "queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "blamequeue_queue_oldest_pending_seconds",
            "Age of the oldest due pending job.",
            labels=["backend", "queue"],
        )
        for b in all_backends():
            try:
                stats = b.stats()
            except Exception:  # one unreachable backend must not fail the whole scrape
                logger.warning("stats of backend %r failed", b.alias, exc_info=True)
                continue
            for s in stats:
                for state, n in s.counts.items():
                    depth.add_metric([b.alias, s.queue, state], float(n))
                oldest.add_metric([b.alias, s.queue], float(s.oldest_pending_age or 0.0))
        yield depth
        yield oldest


# -- exposition ------------------------------------------------------------------------------
def registry() -> Any:
    """What to expose: this process's registry, or every process's files (multi-process)."""
    p = _require()
    if not _multiprocess():
        return p.REGISTRY
    from prometheus_client import multiprocess

    reg = p.CollectorRegistry()
    multiprocess.MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
    reg.register(QueueStatsCollector())
    return reg


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``path("metrics/", metrics_view)``. Protect it as you would any internal page."""
    from django.http import HttpResponse

    p = _require()
    enable()
    return HttpResponse(p.generate_latest(registry()), content_type=p.CONTENT_TYPE_LATEST)


def serve(port: int, address: str = "127.0.0.1") -> Any:
    """Serve ``/metrics`` from a daemon thread (``runworker --metrics-port``); answers the
    server (``.server_port``, ``.shutdown()``). Loopback unless told otherwise: metrics name
    queues, jobs and hosts, and nothing guards this port."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from django.db import connections

    _require()  # names the extra when prometheus_client is missing
    from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

    enable()
    app = make_wsgi_app(registry())

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        try:
            return app(environ, start_response)
        finally:
            connections.close_all()  # this request thread's, opened by the stats gauges

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = make_server(address, port, wsgi, ThreadingWSGIServer, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, name="blamequeue-metrics", daemon=True)
    thread.start()
    return server
