"""What the package says and draws stays bounded however large the flow."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_blamequeue import ErrorCode, queue
from django_blamequeue.admin import graph
from django_blamequeue.core.dag import validate_dag
from django_blamequeue.exceptions import QueueError
from tests.admin.test_graph import job

#: The widest graph: ``MAX_COLUMNS`` columns of boxes and gaps, with the padding.
WIDEST = 2 * graph.PAD + graph.MAX_COLUMNS * (graph.NODE_W + graph.GAP_X)


def refusal(children: list[dict[str, Any]]) -> QueueError:
    with pytest.raises(QueueError) as caught:
        validate_dag(children)
    return caught.value


def chain_spec(n: int) -> list[dict[str, Any]]:
    return [{"name": "n0"}] + [{"name": f"n{i}", "depends_on": [f"n{i - 1}"]} for i in range(1, n)]


# -- messages ------------------------------------------------------------------------------
def test_a_10000_node_cycle_is_shown_from_both_ends_in_under_a_kilobyte() -> None:
    children = chain_spec(10_000)
    children[0] = {"name": "n0", "depends_on": ["n9999"]}
    error = refusal(children)
    assert error.code == ErrorCode.FLOW_CYCLE
    assert len(error.message) < 1024
    assert error.message.startswith("cycle: n0 → n9999 → n9998")  # n0 depends on n9999 …
    assert error.message.endswith("n2 → n1 → n0 (10,000 nodes)")
    assert "… 9,989 more …" in error.message


def test_a_short_cycle_is_still_spelled_in_full() -> None:
    error = refusal([{"name": "a", "depends_on": ["b"]}, {"name": "b", "depends_on": ["a"]}])
    assert error.message == "cycle: a → b → a"


def test_long_names_in_a_cycle_are_cut() -> None:
    a, b = "a" * 255, "b" * 255
    error = refusal([{"name": a, "depends_on": [b]}, {"name": b, "depends_on": [a]}])
    assert len(error.message) < 200 and "a" * 39 + "…" in error.message


@pytest.mark.parametrize(
    "children",
    [
        pytest.param([{"name": "a", "depends_on": ["x" * 1_000_000]}], id="unknown dependency"),
        pytest.param([{"name": "a", "depends_on": ["b", "b"]}], id="dependency twice"),
        pytest.param([{"name": "a"}, {"name": "a"}], id="name twice"),
        pytest.param([{"name": "a", "y" * 1_000_000: 1}], id="unknown key"),
        pytest.param([{"name": "x" * 1_000_000}], id="name too long"),
        pytest.param([{"name": "a", 1: 2, "b": 3}], id="keys of two types"),
    ],
)
def test_refusals_of_a_flow_quote_at_most_a_few_hundred_characters(
    children: list[dict[str, Any]],
) -> None:
    assert len(refusal(children).message) < 300


# -- drawing -------------------------------------------------------------------------------
def test_a_10000_step_chain_is_drawn_in_at_most_max_columns_and_loses_no_job() -> None:
    jobs = [job("s00000")]
    for i in range(1, 10_000):
        jobs.append(job(f"s{i:05d}", depends_on=(jobs[-1].job_id,)))
    g = graph.build(jobs, lambda i: f"/job/{i}/", lambda n: f"?group={n}")
    assert g.width <= WIDEST and g.height < 200
    assert len(g.nodes) == graph.MAX_COLUMNS
    singles = [n for n in g.nodes if not n.is_group]
    assert len(singles) + sum(len(n.members) for n in g.groups()) == 10_000
    assert [n.label for n in singles][:3] == ["s00000", "s00001", "s00002"]
    assert g.groups()[0].label == "steps 4–716 ×713"
    assert len(g.edges) == graph.MAX_COLUMNS - 1  # still one chain, box to box


def test_a_chain_of_max_columns_steps_is_drawn_box_by_box() -> None:
    jobs = [job("s00")]
    for i in range(1, graph.MAX_COLUMNS):
        jobs.append(job(f"s{i:02d}", depends_on=(jobs[-1].job_id,)))
    g = graph.build(jobs, lambda i: f"/job/{i}/", lambda n: f"?group={n}")
    assert not g.groups() and len(g.nodes) == graph.MAX_COLUMNS


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_flow_page_of_a_10000_step_chain_is_a_bounded_svg_with_paged_groups(
    client: Client,
) -> None:
    flow = queue.enqueue_flow("chain", chain_spec(10_000))
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    url = f"/admin/django_blamequeue/job/flow/{flow['flow_id']}/"
    body = client.get(url).content.decode()
    svg = body[body.index('<svg xmlns="http://www.w3.org/2000/svg" class="bq-graph"') :]
    svg = svg[: svg.index("</svg>")]
    width = int(re.search(r'width="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    assert width <= WIDEST
    assert svg.count('class="bq-node"') == graph.MAX_COLUMNS
    members = client.get(f"{url}?group=0").content.decode()
    assert "page 1 of 2" in members and members.count('class="bq-cell"') == 400
