"""``make screenshots``: every console screen with demo data, as PNGs in docs/img/.

Runs the demo project on a fresh SQLite file in .tmp/, serves it from a thread on 127.0.0.1,
and drives the system's headless Chromium with Playwright::

    python -m tests.admin.screenshots [OUTPUT_DIR]
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
USER, PASSWORD = "operator", "demo-password"


def setup_django(db: Path) -> None:
    sys.path.insert(0, str(ROOT / "testproject"))
    db.unlink(missing_ok=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    for name in [n for n in os.environ if n.startswith("BLAMEQUEUE_")]:
        del os.environ[name]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def demo_data() -> dict[str, object]:
    from django.contrib.auth.models import User
    from django.test import RequestFactory

    from django_blamequeue.admin import operations
    from django_blamequeue.backends import get_backend

    from .demo import build

    user = User.objects.create_superuser(USER, "operator@example.com", PASSWORD)
    data = build()
    request = RequestFactory().post("/")
    request.user = user
    hooks = data["hooks"]
    assert isinstance(hooks, list)
    operations.retry(request, get_backend(), [(hooks[0], "webhooks")])
    data["schedule"] = schedules()
    data["workflow"] = workflow()
    control()
    data.update(console())
    return data


def console() -> dict[str, object]:
    """The console's demo: an hour of chart buckets, failed payments to search and retry in
    bulk, a job with attempts across a DLQ retry, and a read-only operator."""
    import random
    from datetime import timedelta

    from django.contrib.auth.models import Permission, User

    from django_blamequeue import queue
    from django_blamequeue.backends import get_backend
    from django_blamequeue.core.records import Ack, Transition
    from django_blamequeue.core.states import Reason, State
    from django_blamequeue.core.timeseries import SLOTS, Sample

    from .factories import make_jobs, settle

    backend = get_backend()
    end, rng = backend.now(), random.Random(28)
    for minute in range(60, -1, -1):
        at, wave = end - timedelta(minutes=minute), 1 + (minute % 20 < 4) * 3
        samples = [Sample(queue="payments", depth=40 + rng.randint(0, 30) * wave)]
        for name, rate, bad in (("demo.jobs.charge", 40, 2), ("demo.jobs.refund", 12, 1)):
            wait = [0] * SLOTS
            run = [0] * SLOTS
            for _ in range(rate):
                wait[rng.choice((1, 2, 2, 3, 3, 4, 5 + wave))] += 1
                run[rng.choice((3, 4, 4, 5, 5, 6, 7))] += 1
            samples.append(
                Sample(
                    queue="payments",
                    name=name,
                    done=rate + rng.randint(-5, 5),
                    failed=rng.randint(0, bad * wave),
                    retried=rng.randint(0, 3 * wave),
                    wait=tuple(wait),
                    run=tuple(run),
                )
            )
        backend.record_samples(samples, at)
    payloads = [{"customer_id": 1234 if i % 3 else 77, "amount": 10 + i} for i in range(30)]
    make_jobs("payments", 30, payloads=payloads, max_attempts=1)
    settle("payments", ["failed"] * 30, error="TimeoutError: the payment provider took 30 s")
    # One job's attempts: three failures, a DLQ retry, two more.
    [job_id] = make_jobs("invoices", 1, max_attempts=3)
    errors = ["TimeoutError: smtp.example.com", "ConnectionError: connection reset by peer"]
    for round_ in (3, 2):
        for attempt in range(1, round_ + 1):
            [claimed] = backend.claim(["invoices"], 1, 30)
            error = errors[attempt % 2]
            last = attempt == 3
            transition = Transition(
                state=State.FAILED if last else State.PENDING,
                delay=0.0,
                error=error,
                traceback=f'Traceback (most recent call last):\n  File "invoices.py"\n{error}',
                reason=Reason.ERROR,
                error_type="builtins." + error.split(":")[0],
            )
            worker = f"web-{attempt}:42{attempt}1:a1b2c3"
            backend.apply_many(
                [Ack(job_id=job_id, token=claimed.token, transition=transition, worker=worker)]
            )
        if round_ == 3:
            queue.dlq_retry(job_id)
    viewer = User.objects.create_user("viewer", password=PASSWORD, is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_blamequeue",
            codename__in=["view_job", "view_auditevent", "view_schedule"],
        )
    )
    return {"attempts": job_id}


def workflow() -> str:
    """An order-fulfilment workflow two steps in (its charge recorded by the second attempt),
    parked on the carrier's webhook (docs/workflows.md): its job page shows the timeline."""
    from datetime import timedelta

    from django.utils import timezone

    from django_blamequeue import workflow as durable
    from django_blamequeue.models import WorkflowStep

    @durable(queue="orders", name="shop.workflows.fulfil")
    def fulfil(payload: object) -> None:
        return None  # never run here: its rows below are what a run would have recorded

    job_id = fulfil.enqueue({"order": 4711}).job_id
    now = timezone.now()

    def at(minutes: float) -> object:
        return now - timedelta(minutes=90) + timedelta(minutes=minutes)

    steps = [
        ("reserve-stock", "atomic", "done", 1, 0, 0.02, '["SKU-1042","SKU-77"]', ""),
        ("charge", "step", "done", 2, 0.05, 1.6, '"ch_3PzQ8fL2mK9"', ""),
        ("event:carrier.picked_up", "event", "waiting", 2, 1.7, None, None, ""),
    ]
    for seq, (name, kind, status, attempt, start, end, result, error) in enumerate(steps):
        WorkflowStep.objects.create(
            job_id=job_id,
            backend="default",
            seq=seq,
            name=name,
            kind=kind,
            status=status,
            attempt=attempt,
            result=result,
            result_bytes=len(result or ""),
            error=error,
            started_at=at(start),
            finished_at=at(end) if end is not None else None,
            wake_at=at(start) + timedelta(days=2) if kind == "event" else None,
            event_name="carrier.picked_up" if kind == "event" else "",
            event_key="4711" if kind == "event" else "",
        )
    return job_id


def control() -> None:
    """The control plane's demo: a paused queue, limits (live and from settings), and the
    worker registry with a running, a stopped and a gone worker."""
    from datetime import timedelta

    from django.utils import timezone

    from django_blamequeue import queue
    from django_blamequeue.models import Job, WorkerRecord

    queue.pause("webhooks", reason="hooks.example.com returns 503", user=USER)
    queue.set_limits(
        "emails",
        concurrency=20,
        key_concurrency=2,
        rate_limit=(600, 60),
        key_weights={"enterprise:*": 5},
        user=USER,
    )
    queue.set_limits("imports", key_rate_limit=(5, 1), user=USER)
    now = timezone.now()
    running = list(
        Job.objects.filter(state="inflight").order_by("id").values_list("id", "queue")[:8]
    )
    rows = [
        ("web-1:4211:a1b2c3", "web-1", 4211, ["emails", "webhooks"], 16, "running", 40, 2),
        ("web-2:9120:d4e5f6", "web-2", 9120, ["pages", "reports"], 8, "running", 5, 0),
        ("web-2:8113:0f0f0f", "web-2", 8113, ["imports"], 4, "stopped", 2400, 0),
        ("web-3:3005:deadbe", "web-3", 3005, ["emails"], 16, "running", 900, 0),
    ]
    for worker_id, host, pid, queues, slots, state, ago, failed in rows:
        seen = now - timedelta(seconds=ago)
        mine = [j for j, q in running if q in queues][:slots] if ago < 60 else []
        WorkerRecord.objects.create(
            worker_id=worker_id,
            backend="default",
            host=host,
            pid=pid,
            queues=queues,
            concurrency=slots,
            running=mine,
            job_names=["demo.jobs.send_email", "demo.jobs.render_report"],
            state=state,
            version="0.1.0",
            done=1200 + pid % 500,
            failed=failed,
            started_at=seen - timedelta(hours=3),
            last_seen=seen,
            stopped_at=seen if state == "stopped" else None,
        )


def schedules() -> int:
    from datetime import timedelta

    from django.utils import timezone

    from django_blamequeue.models import Schedule

    now = timezone.now()
    nightly = Schedule.objects.create(
        name="nightly-report",
        job="demo.jobs.render_report",
        payload={"step": "nightly"},
        cron="30 2 * * *",
        timezone="Europe/Paris",
        last_fired_at=now - timedelta(hours=20),
    )
    Schedule.objects.create(
        name="digest-email",
        job="demo.jobs.send_email",
        interval=900,
        payload={"to": "ops@example.com"},
        last_fired_at=now - timedelta(minutes=4),
    )
    Schedule.objects.create(
        name="weekly-cleanup",
        job="demo.jobs.render_report",
        enabled=False,
        cron="0 4 * * mon",
        timezone="America/New_York",
        source="settings",
        payload={"step": "cleanup"},
    )
    return nightly.pk


def serve() -> tuple[object, str]:
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.test.testcases import LiveServerThread

    thread = LiveServerThread("127.0.0.1", StaticFilesHandler, connections_override={}, port=0)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    return thread, f"http://127.0.0.1:{thread.port}"


def shoot(base: str, out: Path, data: dict[str, object]) -> list[Path]:
    from playwright.sync_api import sync_playwright

    dag, fan = data["dag"], data["fan"]
    assert isinstance(dag, dict) and isinstance(fan, dict)
    failed = next(j["job_id"] for j in dag["jobs"] if j["name"] == "enrich")
    job = "/admin/django_blamequeue/job/"
    screens = [
        ("overview", f"{job}overview/", False),
        ("jobs", f"{job}?backend=default", False),
        ("jobs-filtered", f"{job}?backend=default&queue=emails&state__exact=failed", False),
        ("job-detail", f"{job}{failed}/change/", True),
        ("job-hostile-payload", f"{job}{data['hostile']}/change/", False),
        ("dlq", f"{job}dlq/?backend=default&queue=webhooks", False),
        ("dlq-retry-all", f"{job}dlq/retry-all/?backend=default&queue=webhooks", False),
        ("purge", f"{job}purge/?backend=default&queue=emails", False),
        ("flow-dag", f"{job}flow/{dag['flow_id']}/", True),
        ("flow-10000", f"{job}flow/{fan['flow_id']}/?group=0&page=19#members", True),
        ("schedules", "/admin/django_blamequeue/schedule/", False),
        ("schedule-edit", f"/admin/django_blamequeue/schedule/{data['schedule']}/change/", True),
        ("audit-log", "/admin/django_blamequeue/auditevent/", False),
        ("control-limits", f"{job}queues/limits/?backend=default&queue=emails", False),
        ("workers", f"{job}workers/", False),
        ("charts", f"{job}charts/?backend=default&queue=payments", True),
        (
            "jobs-search",
            f"{job}?backend=default&arg=customer_id%3D1234&error_class=TimeoutError",
            False,
        ),
        (
            "bulk-confirm",
            f"{job}bulk/?verb=retry&filters="
            + "backend%3Ddefault%26arg%3Dcustomer_id%253D1234%26error_class%3DTimeoutError",
            False,
        ),
        ("job-attempts", f"{job}{data['attempts']}/change/#bq-attempts", False),
        ("workflow", f"{job}{data['workflow']}/change/#bq-workflow", False),
    ]
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
        # The console's tables are wide: start with the admin's model sidebar collapsed.
        page.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        page.goto(f"{base}/admin/login/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(re.compile(r".*/admin/$"))
        for name, path, full in screens:
            page.goto(base + path)
            target = out / f"admin-{name}.png"
            page.screenshot(path=str(target), full_page=full)
            written.append(target)
        # The read-only operator: the same job page, without a button.
        viewer = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
        viewer.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        viewer.goto(f"{base}/admin/login/")
        viewer.fill("#id_username", "viewer")
        viewer.fill("#id_password", PASSWORD)
        viewer.click("input[type=submit]")
        viewer.wait_for_url(re.compile(r".*/admin/$"))
        viewer.goto(f"{base}{job}{failed}/change/")
        target = out / "admin-read-only.png"
        viewer.screenshot(path=str(target), full_page=False)
        written.append(target)
        browser.close()
    return written


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ROOT / "docs" / "img").absolute()
    out.mkdir(parents=True, exist_ok=True)
    if shutil.which("chromium") is None:
        print("screenshots: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 1
    tmp = ROOT / ".tmp"
    tmp.mkdir(exist_ok=True)
    setup_django(tmp / "screenshots.sqlite3")
    data = demo_data()
    thread, base = serve()
    try:
        for path in shoot(base, out, data):
            print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    finally:
        thread.terminate()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
