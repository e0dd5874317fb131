"""The flow graph's layout and drawing, as pure functions over JobInfo records."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django_blamequeue.admin import graph
from django_blamequeue.admin.display import STATE_STYLES
from django_blamequeue.core.records import JobInfo

from .factories import SVG_XSS, XSS

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def job(key: str, state: str = "pending", **fields: Any) -> JobInfo:
    base: dict[str, Any] = {
        "job_id": f"J{key:0>25}"[-26:],
        "backend": "default",
        "queue": "q",
        "name": "app.step",
        "state": state,
        "payload": None,
        "priority": 0,
        "attempts": 0,
        "max_attempts": 3,
        "progress": 0,
        "result": None,
        "error": None,
        "traceback": None,
        "classification": None,
        "trace_id": None,
        "dedupe_key": None,
        "flow_id": "F",
        "parent_id": None,
        "available_at": None,
        "created_at": NOW,
        "started_at": None,
        "finished_at": None,
        "flow_key": key,
    }
    base.update(fields)
    return JobInfo(**base)


def build(jobs: list[JobInfo]) -> graph.Graph:
    return graph.build(jobs, lambda i: f"/job/{i}/", lambda n: f"?group={n}")


def test_columns_follow_the_longest_path_from_a_root() -> None:
    a, b = job("a"), job("b")
    c = job("c", depends_on=(a.job_id,))
    d = job("d", depends_on=(a.job_id, c.job_id))
    col = graph.columns([j.job_id for j in (a, b, c, d)], graph.edges_of([a, b, c, d]))
    assert [col[j.job_id] for j in (a, b, c, d)] == [0, 0, 1, 2]


def test_a_parent_child_tree_draws_dashed_child_edges() -> None:
    parent = job("parent", "waiting_children")
    kids = [job(f"k{i}", "done" if i else "failed", parent_id=parent.job_id) for i in range(3)]
    g = build([parent, *kids])
    assert [e.kind for e in g.edges] == [graph.CHILD] * 3
    svg = str(graph.svg(g))
    assert svg.count('stroke-dasharray="5 4"') == 3
    assert svg.count('class="bq-node"') == 4
    by_job = dict(re.findall(r'data-job-id="(\w+)" data-state="(\w+)"', svg))
    assert by_job[parent.job_id] == "waiting_children" and by_job[kids[0].job_id] == "failed"
    xs = {n.key: n.x for n in g.nodes}
    assert xs[parent.job_id] < xs[kids[0].job_id] == xs[kids[2].job_id]


def test_node_colours_and_links() -> None:
    j = job("only", "done")
    svg = str(graph.svg(build([j])))
    assert f'fill="{STATE_STYLES["done"].fill}"' in svg
    assert f'<a href="/job/{j.job_id}/">' in svg


def test_a_wide_column_becomes_groups_by_name() -> None:
    root = job("root", "done")
    pages = [
        job(
            f"p{i}",
            "done" if i % 3 else "failed",
            name="app.render_page",
            depends_on=(root.job_id,),
        )
        for i in range(300)
    ]
    mails = [job(f"m{i}", name="app.mail", depends_on=(root.job_id,)) for i in range(50)]
    g = build([root, *pages, *mails])
    groups = g.groups()
    assert [(n.label, len(n.members)) for n in groups] == [
        ("mail ×50", 50),
        ("render_page ×300", 300),
    ]
    assert groups[1].state == "failed"  # the most urgent state of its members
    assert groups[1].counts == {"done": 200, "failed": 100}
    assert len(g.edges) == 2  # root → each group, deduplicated


def test_a_column_of_all_different_names_is_one_group() -> None:
    root = job("root")
    kids = [job(f"k{i}", name=f"k{i}", depends_on=(root.job_id,)) for i in range(100)]
    (group,) = build([root, *kids]).groups()
    assert len(group.members) == 100 and group.label == "jobs ×100"


def test_labels_and_ids_are_escaped() -> None:
    evil = job("x", flow_key=SVG_XSS, name=XSS)
    svg = str(graph.svg(build([evil])))
    assert "<svg onload" not in svg and "<script" not in svg
    assert "&lt;svg onload" in svg.replace("&quot;&gt;", "")
    grid = str(graph.member_grid([evil], lambda i: f"/job/{i}/"))
    assert "<svg onload" not in grid and "&lt;svg onload" in grid


def test_member_grid_has_one_linked_cell_per_job() -> None:
    jobs = [job(f"g{i}", "done" if i % 2 else "inflight") for i in range(45)]
    grid = str(graph.member_grid(jobs, lambda i: f"/job/{i}/"))
    assert grid.count('class="bq-cell"') == 45
    assert grid.count('data-state="inflight"') == 23
    assert 'height="36"' in grid  # two rows of 40 columns
