"""Console pages on 1,000,000 jobs (and 1,000,000 audit rows) in PostgreSQL.

Starts a throwaway PostgreSQL (tests.servers), migrates the demo project into it, fills the
tables with ``INSERT … SELECT generate_series`` (a realistic mix of queues, names and states),
adds the argument index docs/indexes.md#searching-by-argument recommends and a week of chart
buckets for every (queue, name), then times every console page through Django's test client
as a logged-in superuser: median of ``--runs`` requests after one warm-up, whole request
(queries and rendering). Writes the table
between the ``bench:admin_lists`` markers of docs/admin.md (``--no-write`` to only print)::

    python bench/admin_lists.py [--jobs 1000000] [--runs 5] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "testproject")]
TARGET_S = 0.5
QUEUES = ["emails", "webhooks", "reports", "imports", "pages", "billing", "search", "thumbnails"]

JOBS_SQL = """
INSERT INTO blamequeue_job (id, queue, name, state, payload, content_type, content_encoding,
    priority, available_at, attempts, max_attempts, stalls, cancel_requested, progress,
    flow_depth, snoozes, created_at, updated_at, started_at, finished_at, error, traceback,
    reason, classification, trace_id, dedupe_key, unique_calls)
SELECT 'B' || lpad(i::text, 25, '0'),
       (%(queues)s::text[])[1 + i %% 8],
       'app.jobs.task_' || (i %% 40),
       s.state,
       convert_to('{"n": ' || i || ', "to": "user' || i || '@example.com"}', 'UTF8'),
       'application/json', 'utf-8', 0,
       t.created + interval '1 second', 1, 3, 0, false,
       CASE WHEN s.state = 'done' THEN 100 WHEN s.state = 'inflight' THEN i %% 100 ELSE 0 END,
       0, 0, t.created, t.created,
       CASE WHEN s.state IN ('pending', 'blocked') THEN NULL ELSE t.created + interval '2 s' END,
       CASE WHEN s.state IN ('done', 'failed', 'cancelled') THEN t.created + interval '3 s' END,
       CASE WHEN s.state = 'failed' THEN 'ConnectionError: upstream refused (' || i || ')' END,
       CASE WHEN s.state = 'failed' THEN 'Traceback (most recent call last):\n  ...' END,
       CASE WHEN s.state = 'failed' THEN 'error' END,
       (ARRAY['bulk', 'transactional', 'newsletter', NULL, NULL])[1 + i %% 5],
       md5(i::text),
       CASE WHEN i %% 10 = 0 THEN 'order-' || i END,
       0
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - (%(n)s - i) * interval '250 milliseconds' AS created) AS t,
     LATERAL (SELECT CASE WHEN i %% 100 < 80 THEN 'done' WHEN i %% 100 < 88 THEN 'pending'
                          WHEN i %% 100 < 92 THEN 'failed' WHEN i %% 100 < 95 THEN 'cancelled'
                          WHEN i %% 100 < 97 THEN 'inflight' WHEN i %% 100 < 99 THEN 'blocked'
                          ELSE 'waiting_children' END AS state) AS s
"""

RARE_SQL = """
INSERT INTO blamequeue_job (id, queue, name, state, payload, content_type, content_encoding,
    priority, available_at, attempts, max_attempts, stalls, cancel_requested, progress,
    flow_depth, snoozes, created_at, updated_at, classification, unique_calls)
SELECT 'A' || lpad(i::text, 25, '0'), 'emails', 'app.jobs.rare', 'done', '\\x7b7d'::bytea,
       'application/json', 'utf-8', 0, now() - interval '30 days', 1, 3, 0, false, 100, 0, 0,
       now() - interval '30 days', now() - interval '30 days', 'rare', 0
FROM generate_series(1, 10) AS i
"""

AUDIT_SQL = """
INSERT INTO blamequeue_audit (action, job_id, queue, backend, attempt, "user", data, created_at)
SELECT (ARRAY['system.queue.consume.failure', 'system.queue.dlq.write', 'system.queue.cancel',
              'system.queue.stalled', 'system.queue.dlq.retry'])[1 + i %% 5],
       'B' || lpad((i * 7 %% %(n)s + 1)::text, 25, '0'),
       (%(queues)s::text[])[1 + i %% 8], 'default', 1,
       CASE WHEN i %% 5000 = 0 THEN 'night-operator' END,
       jsonb_build_object('error', 'ConnectionError', 'n', i),
       now() - (%(n)s - i) * interval '250 milliseconds'
FROM generate_series(1, %(n)s) AS i
"""


#: The index docs/indexes.md#searching-by-argument recommends, for the bench's ``to`` argument.
ARG_INDEX_SQL = """
CREATE INDEX bq_job_arg_to ON blamequeue_job
    ((blamequeue_payload_json(payload, content_type) #>> '{to}'))
"""

#: A week of chart buckets for every (queue, name) and each queue's depth, at the three
#: resolutions (what the workers and the sweeper would have written).
BUCKETS_SQL = """
INSERT INTO blamequeue_time_bucket (backend, queue, name, step, start, done, failed, retried,
    cancelled, depth, w0, r0, w1, r1, w2, r2, w3, r3, w4, r4, w5, r5, w6, r6, w7, r7, w8, r8,
    w9, r9, w10, r10, w11, r11)
SELECT 'default', (%(queues)s::text[])[1 + k %% 8],
       CASE WHEN k < 40 THEN 'app.jobs.task_' || k ELSE '' END,
       r.step, date_trunc('hour', now()) - g * r.step * interval '1 second',
       CASE WHEN k < 40 THEN 40 + g %% 7 ELSE 0 END, CASE WHEN k < 40 THEN g %% 3 ELSE 0 END,
       CASE WHEN k < 40 THEN g %% 2 ELSE 0 END, 0, CASE WHEN k >= 40 THEN 1000 + g END,
       1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 0, 0, 0, 0
FROM generate_series(0, 47) AS k,
     (VALUES (60, 120), (600, 288), (3600, 192)) AS r(step, points),
     LATERAL generate_series(0, r.points - 1) AS g
"""


def setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    for name in [n for n in os.environ if n.startswith("BLAMEQUEUE_")]:
        del os.environ[name]
    import django

    django.setup()
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["testserver"]
    settings.DEBUG = False
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def fill(n: int) -> dict[str, str]:
    from django.db import connection

    from django_blamequeue import queue

    started = time.monotonic()
    with connection.cursor() as cur:
        cur.execute(JOBS_SQL, {"n": n, "queues": QUEUES})
        cur.execute(RARE_SQL)
        cur.execute(AUDIT_SQL, {"n": n, "queues": QUEUES})
        cur.execute(ARG_INDEX_SQL)
        cur.execute(BUCKETS_SQL, {"queues": QUEUES})
    spec = [{"name": "split"}] + [
        {"name": f"p{i}", "job": None, "depends_on": ["split"]} for i in range(10_000)
    ]
    flow = queue.enqueue_flow(
        "pages", [{k: v for k, v in c.items() if v is not None} for c in spec]
    )
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")  # what autovacuum does to a table this size
        cur.execute("SELECT count(*) FROM blamequeue_job")
        total = cur.fetchone()[0]
    print(
        f"filled {total:,} jobs and {n:,} audit rows in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    failed = "B" + str(n // 2 + 90).rjust(25, "0")  # i % 100 == 90: a failed job
    kept_attempts(failed)
    return {"flow": flow["flow_id"], "job": "B" + str(n // 2).rjust(25, "0"), "failed": failed}


def kept_attempts(job_id: str) -> None:
    """Three failed attempts of one job, as the engine keeps them."""
    from django.utils import timezone

    from django_blamequeue.models import JobAttempt

    now = timezone.now()
    JobAttempt.objects.bulk_create(
        JobAttempt(
            backend="default",
            job_id=job_id,
            attempt=a,
            outcome="retried" if a < 3 else "failed",
            worker="bench-host:4242",
            started_at=now,
            finished_at=now,
            reason="error",
            error_type="builtins.ConnectionError",
            error="ConnectionError: upstream refused",
            traceback="Traceback (most recent call last):\n  ...",
        )
        for a in (1, 2, 3)
    )


def explain_argument_search(n: int) -> str:
    """The plan of the argument search: an index scan on the recommended index."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "EXPLAIN SELECT id FROM blamequeue_job WHERE "
            "(blamequeue_payload_json(payload, content_type) #>> %s) = %s",
            ["{to}", f"user{n // 3}@example.com"],
        )
        return "\n".join(row[0] for row in cur.fetchall())


def pages(ids: dict[str, str], n: int) -> list[tuple[str, str]]:
    job = "/admin/django_blamequeue/job/"
    audit = "/admin/django_blamequeue/auditevent/"
    mid = "B" + str(n // 2 + 7).rjust(25, "0")
    return [
        ("queue overview", f"{job}overview/"),
        ("jobs: all (newest first)", job),
        ("jobs: page 50", f"{job}?p=50"),
        ("jobs: state=failed", f"{job}?state__exact=failed"),
        ("jobs: queue=emails", f"{job}?queue=emails"),
        ("jobs: queue=emails, state=failed", f"{job}?queue=emails&state__exact=failed"),
        ("jobs: name (common)", f"{job}?name=app.jobs.task_7"),
        ("jobs: name (10 rows, oldest)", f"{job}?name=app.jobs.rare"),
        ("jobs: classification=bulk", f"{job}?classification=bulk"),
        ("jobs: flow (10,002 jobs)", f"{job}?flow_id={ids['flow']}"),
        ("jobs: search by id", f"{job}?q={mid}"),
        ("jobs: search by dedupe key", f"{job}?q=order-{n // 2 - n // 2 % 10}"),
        ("jobs: search by trace id", f"{job}?q=c4ca4238a0b923820dcc509a6f75849b"),
        ("jobs: search, no match", f"{job}?q=nothing-like-this"),
        ("job page", f"{job}{ids['job']}/change/"),
        ("DLQ: queues", f"{job}dlq/"),
        ("DLQ: emails, page 1", f"{job}dlq/?queue=emails"),
        ("DLQ: emails, page 100", f"{job}dlq/?queue=emails&page=100"),
        ("retry all: confirmation", f"{job}dlq/retry-all/?queue=emails"),
        ("purge: confirmation", f"{job}purge/?queue=emails"),
        ("flow page: 10,002 jobs", f"{job}flow/{ids['flow']}/"),
        ("flow page: a group's page", f"{job}flow/{ids['flow']}/?group=0&page=10"),
        ("audit log: all", audit),
        ("audit log: action", f"{audit}?action=system.queue.dlq.write"),
        ("audit log: queue", f"{audit}?queue=billing"),
        ("audit log: job", f"{audit}?job_id={mid}"),
        ("audit log: user (200 rows)", f"{audit}?user=night-operator"),
        ("jobs: argument, indexed (to=…)", f"{job}?arg=to%3Duser{n // 3}%40example.com"),
        ("jobs: argument, no index (n=…)", f"{job}?arg=n%3D{n // 3}"),
        ("jobs: error class", f"{job}?error_class=ConnectionError"),
        ("jobs: error text", f"{job}?error=refused+%28{n // 2 + 90}%29"),
        ("jobs: created in an hour", f"{job}?created_after={hour_ago()}"),
        (
            "jobs: argument + state + queue",
            f"{job}?arg=to%3Duser{n // 3}%40example.com&state__exact=done&queue=emails",
        ),
        ("job page with 3 attempts", f"{job}{ids['failed']}/change/"),
        ("bulk retry: confirm all failed", f"{job}bulk/?verb=retry&filters=state__exact%3Dfailed"),
        (
            "bulk move: confirm a queue's pending",
            f"{job}bulk/?verb=move&filters=queue%3Demails%26state__exact%3Dpending",
        ),
        ("charts: hour", f"{job}charts/"),
        ("charts: day, one queue", f"{job}charts/?queue=emails&range=day"),
        ("charts: week, one name", f"{job}charts/?queue=emails&name=app.jobs.task_8&range=week"),
    ]


def hour_ago() -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")


def measure(targets: list[tuple[str, str]], runs: int) -> list[tuple[str, str, float, int]]:
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="bench").first()
    user = user or User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    results = []
    for label, url in targets:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            client.get(url)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        results.append((label, url, median, len(response.content)))
        print(f"{median * 1000:8.1f} ms  {label}", file=sys.stderr)
    return results


def table(results: list[tuple[str, str, float, int]], n: int, runs: int) -> str:
    lines = [
        f"{n:,} jobs + {n:,} audit rows in PostgreSQL {pg_version()}, Django test client, "
        f"median of {runs} after a warm-up; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores. Target: under {TARGET_S * 1000:.0f} ms each.",
        "",
        "| page | median | verdict |",
        "| --- | ---: | --- |",
    ]
    for label, _url, median, _size in results:
        verdict = "ok" if median < TARGET_S else "**over target**"
        lines.append(f"| {label} | {median * 1000:,.0f} ms | {verdict} |")
    return "\n".join(lines)


def pg_version() -> str:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        return str(cur.fetchone()[0]).split()[0]


def write(doc: Path, text: str) -> None:
    start, end = "<!-- bench:admin_lists -->", "<!-- /bench:admin_lists -->"
    body = doc.read_text()
    if start not in body:
        raise SystemExit(f"{doc} has no {start} marker")
    head, rest = body.split(start, 1)
    tail = rest.split(end, 1)[1]
    doc.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from tests.servers import PostgresServer

    with tempfile.TemporaryDirectory(prefix="bq-admin-bench-", dir=ROOT / ".tmp") as tmp:
        server = PostgresServer(Path(tmp) / "pg")
        server.start()
        try:
            setup(server.url)
            ids = fill(args.jobs)
            plan = explain_argument_search(args.jobs)
            print(plan, file=sys.stderr)
            results = measure(pages(ids, args.jobs), args.runs)
            text = table(results, args.jobs, args.runs)
            from django.db import connections

            connections.close_all()
        finally:
            server.stop()
    print(text)
    if not args.no_write:
        write(ROOT / "docs" / "admin.md", text)
    return 0 if all(r[2] < TARGET_S for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
