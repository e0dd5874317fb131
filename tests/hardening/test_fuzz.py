"""Property-based fuzzing of the public API and the ``blamequeue`` command.

On SQLite and PostgreSQL, random queue names, payloads, delays, priorities, ids and flow specs
either succeed — and what was stored reads back — or raise ``QueueError`` (``CommandError``
for the command) with every table unchanged. Any other exception fails the property. Where
every argument was drawn from the contract's good values, the call must succeed.

``BLAMEQUEUE_FUZZ_EXAMPLES`` sets the examples per property and backend (default 80); the
outcome counts are printed in the run's summary ("blamequeue fuzz figures").
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_blamequeue import QueueError, job, queue
from django_blamequeue.core.validation import MAX_INT
from django_blamequeue.jobs import registry

from . import strategies as s
from .conftest import record, tables

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

EXAMPLES = int(os.environ.get("BLAMEQUEUE_FUZZ_EXAMPLES", "80"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing written under the working tree
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # the backend fixture is the same for every example
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
NAME = "tests.hardening.fuzz"
VERBS = ("get_job", "cancel", "dlq_retry", "flow_jobs", "cancel_flow")
JOB, FLOW = "<job>", "<flow>"


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    @job(queue="fuzz", name=NAME)
    def run(payload: object) -> object:
        return payload

    yield
    registry.unregister(NAME)


def outcome(where: str, call: Any, *args: Any, **kwargs: Any) -> tuple[Any, str]:
    """``(result, "ok")``, or ``(None, code)`` for a ``QueueError`` that wrote nothing to the
    database of backend ``where``."""
    before = tables(where)
    try:
        return call(*args, **kwargs), "ok"
    except QueueError as exc:
        assert tables(where) == before, f"refused with {exc.code} after writing"
        return None, str(exc.code)


@FUZZ
@given(
    name=s.queue_names(),
    payload=s.weighted(
        (2, s.finite_json.map(lambda v: (v, True))),
        (1, s.json_values.map(lambda v: (v, True))),
        (1, s.anything.map(lambda v: (v, False))),
    ),
    depth=st.none() | st.integers(min_value=1, max_value=300),
    case=s.call_options(),
)
def test_enqueue_stores_what_reads_back_or_refuses_with_nothing_written(
    backend: str, name: tuple[Any, bool], payload: tuple[Any, bool], depth: int | None, case: s.Case
) -> None:
    queue_name, good_name = name
    value, is_json = payload
    value = s.nest(value, depth) if depth else value
    before = tables(backend)["Job"]
    enqueued, result = outcome(
        backend, queue.enqueue, queue_name, value, backend=backend, **case.args
    )
    record("enqueue", backend, result)
    shallow = (depth or 0) < 80  # json_values nest 16 levels at most; the cap is 100
    if good_name and case.good and is_json and shallow and not s.has_non_finite(value):
        assert result == "ok", f"refused a good call: {result}"
    if enqueued is None:
        return
    assert tables(backend)["Job"] - before == (0 if enqueued.deduplicated else 1)
    info = queue.get_job(enqueued.job_id, backend=backend)  # every stored row reads back
    assert info is not None and info.queue == queue_name
    if not enqueued.deduplicated:
        if is_json:
            assert info.payload == json.loads(json.dumps(value))
        assert info.priority == case.args.get("priority", 0)
        assert queue.cancel(enqueued.job_id, backend=backend) is True


@FUZZ
@given(
    payloads=s.weighted(
        (3, st.lists(s.finite_json, max_size=4)),
        (1, st.lists(s.json_values, max_size=4)),
        (1, s.anything),
    ),
    case=s.call_options(("delay", "priority", "max_attempts", "classification")),
    dedupe_keys=st.none() | st.lists(st.none() | s.any_text, max_size=5),
)
def test_enqueue_many_stores_all_or_nothing(
    backend: str, payloads: Any, case: s.Case, dedupe_keys: Any
) -> None:
    before = tables(backend)["Job"]
    enqueued, result = outcome(
        backend,
        queue.enqueue_many,
        "fuzz-many",
        payloads,
        backend=backend,
        dedupe_keys=dedupe_keys,
        **case.args,
    )
    record("enqueue_many", backend, result)
    if enqueued is not None:
        fresh = [e for e in enqueued if not e.deduplicated]
        assert tables(backend)["Job"] - before == len(fresh) and len(enqueued) == len(payloads)
        for e in fresh:
            assert queue.get_job(e.job_id, backend=backend) is not None


@FUZZ
@given(verb=st.sampled_from(VERBS), value=st.one_of(s.any_text, s.anything))
def test_an_id_argument_never_reaches_other_jobs(backend: str, verb: str, value: Any) -> None:
    if queue.size("sentinel", backend=backend) == 0:
        queue.enqueue("sentinel", "must stay pending", backend=backend)
    answer, result = outcome(backend, getattr(queue, verb), value, backend=backend)
    record("ids", backend, result)
    assert result in ("ok", "BAD_ARGUMENT")
    assert answer in (None, False, 0, [])  # no id here names a job: nothing found, nothing done
    assert queue.size("sentinel", backend=backend) == 1


@FUZZ
@given(spec=s.flow_specs(), name=s.queue_names())
def test_enqueue_flow_registers_every_node_or_none(
    backend: str, spec: tuple[Any, bool], name: tuple[Any, bool]
) -> None:
    children, valid = spec
    queue_name, good_name = name
    flow, result = outcome(backend, queue.enqueue_flow, queue_name, children, backend=backend)
    record("enqueue_flow", backend, result)
    if valid and good_name:
        assert result == "ok", f"refused a valid DAG: {result}"
    if flow is None:
        return
    jobs = queue.flow_jobs(flow["flow_id"], backend=backend)
    assert sorted(j.flow_key for j in jobs) == sorted(c["name"] for c in children)  # type: ignore[misc]
    blocked = sum(1 for c in children if c.get("depends_on"))
    assert sum(1 for j in jobs if j.state == "blocked") == blocked
    assert queue.cancel_flow(flow["flow_id"], backend=backend) == len(jobs)


def command_args() -> st.SearchStrategy[list[str]]:
    good = s.good_text.filter(lambda t: not t.startswith("-"))  # else argparse reads an option
    text = s.weighted((3, good), (1, s.any_text))
    number = s.weighted(
        (4, st.integers(min_value=0, max_value=1000).map(str)),
        (1, st.integers().map(str)),
        (1, st.integers(min_value=MAX_INT - 2, max_value=2**70).map(str)),
        (1, st.floats().map(repr)),
        (1, text),
    )
    payload = s.weighted(
        (4, s.finite_json.map(json.dumps)),
        (1, s.json_values.map(lambda v: json.dumps(v, allow_nan=True))),
        (1, st.integers(min_value=1, max_value=2000).map(lambda n: "[" * n + "]" * n)),
        (1, text),
    )
    name = s.weighted((3, st.just(NAME)), (1, st.just("no.such.job")), (1, text))
    ids = s.weighted((2, st.just(JOB)), (1, st.just(FLOW)), (2, text))  # a real job's, a flow's
    enqueue = st.tuples(name, payload, number, number, text).map(
        lambda a: [
            *("enqueue", a[0], "--payload", a[1], "--delay", a[2]),
            *("--priority", a[3], "--queue", a[4]),
        ]
    )
    return s.weighted(
        (1, st.just(["stats"])),
        (
            1,
            st.tuples(text, number, number).map(
                lambda a: ["dlq", "list", a[0], "--limit", a[1], "--offset", a[2]]
            ),
        ),
        (1, ids.map(lambda i: ["dlq", "retry", i])),
        (1, text.map(lambda q: ["dlq", "retry", "--all", q])),
        (1, text.map(lambda q: ["purge", q, "--yes"])),
        (1, ids.map(lambda i: ["cancel", i])),
        (1, ids.map(lambda i: ["flow", "show", i])),
        (3, enqueue),
    )


@FUZZ
@given(args=command_args(), alias=st.sampled_from(["", "", "", "nope", " "]))
def test_the_blamequeue_command_succeeds_or_fails_with_nothing_written(
    backend: str, args: list[str], alias: str
) -> None:
    chosen = ["--backend", alias or backend]
    real = {
        JOB: queue.enqueue("fuzz-cmd", 1, backend=backend).job_id,
        FLOW: queue.enqueue_flow("fuzz-cmd", [{"name": "a"}], backend=backend)["flow_id"],
    }
    args = [real.get(a, a) for a in args]
    before = tables(backend)
    try:
        call_command("blamequeue", *chosen, *args, stdout=io.StringIO(), stderr=io.StringIO())
        record("command", backend, "ok")
    except CommandError:
        record("command", backend, "CommandError")
        assert tables(backend) == before, f"{args[:2]} failed after writing"
