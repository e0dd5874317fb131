"""The flow page: the graph (SVG), a legend, the state mix, and a group's members page by page."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.http import urlencode

from django_blamequeue.admin import graph
from django_blamequeue.admin.base import backend_or_404
from django_blamequeue.admin.display import STATE_STYLES, STATES, relative, state_badge
from django_blamequeue.backends import all_backends
from django_blamequeue.backends.replicas import read_database
from django_blamequeue.core.records import JobInfo
from django_blamequeue.core.validation import identifier
from django_blamequeue.exceptions import QueueError
from django_blamequeue.models import FlowDependency, Job

if TYPE_CHECKING:
    from django_blamequeue.admin.overview import Console

MEMBERS_PER_PAGE = 400
#: Flows up to this size also get a table of every job under the graph.
TABLE_ROWS = 200


def flow_page(console: Console, request: HttpRequest, flow_id: str) -> HttpResponse:
    wanted = request.GET.get("backend")
    alias = backend_or_404(wanted).alias if wanted else None
    try:
        identifier(flow_id, "flow_id")
    except QueueError:  # NUL, too long: no flow has such an id
        raise Http404("no such flow") from None
    jobs = flow_nodes(flow_id, alias)
    if not jobs:
        raise Http404(f"no flow {flow_id!r}")
    base = reverse("admin:django_blamequeue_job_flow", args=[flow_id])

    def job_url(job_id: str) -> str:
        backend = by_id[job_id].backend
        return (
            reverse("admin:django_blamequeue_job_change", args=[job_id])
            + "?"
            + urlencode({"backend": backend})
        )

    def group_url(n: int) -> str:
        query: dict[str, str | int] = {"group": n}
        if alias is not None:
            query["backend"] = alias
        return f"{base}?{urlencode(query)}#members"

    by_id = {j.job_id: j for j in jobs}
    g = graph.build(jobs, job_url, group_url)
    counts = Counter(j.state for j in jobs)
    members_ctx = _members(request, g, base, alias, job_url)
    backends = sorted({j.backend for j in jobs})
    list_url = None
    if len(backends) == 1 and backend_or_404(backends[0]).database is not None:
        list_url = (
            reverse("admin:django_blamequeue_job_changelist")
            + "?"
            + urlencode({"backend": backends[0], "flow_id": flow_id})
        )
    return console.render(
        request,
        "flow.html",
        "jobs",
        f"Flow {flow_id}",
        flow_id=flow_id,
        svg=graph.svg(g),
        total=len(jobs),
        legend=[(s, STATE_STYLES[s], counts.get(s, 0)) for s in STATES],
        grouped=bool(g.groups()),
        groups=g.groups(),
        rows=[
            (j, state_badge(j.state), job_url(j.job_id), relative(j.finished_at or j.created_at))
            for j in sorted(jobs, key=lambda j: j.job_id)[:TABLE_ROWS]
        ]
        if len(jobs) <= TABLE_ROWS
        else None,
        has_children=any(e.kind == graph.CHILD for e in g.edges),
        has_deps=any(e.kind == graph.DEP for e in g.edges),
        backends=backends,
        list_url=list_url,
        **members_ctx,
    )


#: What the graph needs of a job; payloads, results and tracebacks are never loaded for it.
NODE_FIELDS = (
    "id",
    "queue",
    "name",
    "state",
    "priority",
    "attempts",
    "max_attempts",
    "progress",
    "classification",
    "trace_id",
    "dedupe_key",
    "flow_id",
    "parent_id",
    "flow_key",
    "created_at",
    "finished_at",
    "reason",
)


def flow_nodes(flow_id: str, alias: str | None) -> list[JobInfo]:
    """The flow's jobs on one backend (``alias``) or all of them.

    A local backend's rows are read column by column (10,000 children must not decode 10,000
    payloads to draw boxes); any other backend answers through ``flow_jobs``.
    """
    found: list[JobInfo] = []
    for b in [backend_or_404(alias)] if alias else all_backends():
        if b.database is None:
            found += b.resilience.call(lambda b=b: b.flow_jobs(flow_id), idempotent=True)  # type: ignore[misc]
            continue
        edges: dict[str, list[str]] = defaultdict(list)
        db = read_database(Job, b.database)  # the replica the routers name, if any
        deps = FlowDependency.objects.using(db).filter(flow_id=flow_id, kind="dag")
        for job_id, dep in deps.values_list("job_id", "depends_on_id"):
            edges[job_id].append(dep)
        rows = Job.objects.using(db).filter(flow_id=flow_id).order_by("id")
        for values in rows.values_list(*NODE_FIELDS):
            row = dict(zip(NODE_FIELDS, values, strict=True))
            job_id = row.pop("id")
            found.append(
                JobInfo(
                    job_id=job_id,
                    backend=b.alias,
                    payload=None,
                    result=None,
                    error=None,
                    traceback=None,
                    available_at=None,
                    started_at=None,
                    depends_on=tuple(edges[job_id]),
                    **row,
                )
            )
    return found


def _members(
    request: HttpRequest,
    g: graph.Graph,
    base: str,
    alias: str | None,
    job_url: Callable[[str], str],
) -> dict[str, object]:
    groups = g.groups()
    try:
        n = int(request.GET.get("group", "0"))
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        n, page = 0, 1
    if not groups or not 0 <= n < len(groups):
        return {"group": None}
    group = groups[n]
    state = request.GET.get("state")
    members = [j for j in group.members if state in (None, "", j.state)]
    last = max(1, -(-len(members) // MEMBERS_PER_PAGE))
    page = min(page, last)
    shown = members[(page - 1) * MEMBERS_PER_PAGE : page * MEMBERS_PER_PAGE]

    def link(**changes: str | int | None) -> str:
        query: dict[str, str | int | None] = {
            "backend": alias,
            "group": n,
            "state": state or None,
            "page": page,
        }
        query.update(changes)
        return f"{base}?{urlencode({k: v for k, v in query.items() if v is not None})}#members"

    return {
        "group": group,
        "group_index": n,
        "group_grid": graph.member_grid(shown, job_url),
        "group_state": state or "",
        "group_states": [
            (s, group.counts.get(s, 0), link(state=s, page=1))
            for s in STATES
            if group.counts.get(s)
        ],
        "group_all_url": link(state=None, page=1),
        "group_page": page,
        "group_last": last,
        "group_shown": len(shown),
        "group_matching": len(members),
        "group_prev": link(page=page - 1) if page > 1 else None,
        "group_next": link(page=page + 1) if page < last else None,
        "group_links": [
            (other.label, i == n, link(group=i, state=None, page=1))
            for i, other in enumerate(groups)
        ],
    }
