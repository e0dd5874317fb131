"""The table of backends (conf/engines.py), and entries that name their engine class
(``"BACKEND": "dotted.path.Class"``, check E014)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.utils.module_loading import import_string
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import conf
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf.engines import AVAILABLE, ENGINES, engine_class
from django_blamequeue.conf.validator import validate
from django_blamequeue.exceptions import ErrorCode, QueueError
from tests.outside_engine.engine import Engine

DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql"}}
PATH = "tests.outside_engine.engine.Engine"
BASE = "django_blamequeue.backends.base.Backend"


class Homegrown(Engine):
    """An engine of a protocol the table has no row for."""

    protocol = "homegrown"


def entry(**options: Any) -> dict[str, Any]:
    return {"BACKENDS": {"default": {"PROTOCOL": "local"}, "out": options}}


def found(raw: object) -> list[conf.Problem]:
    return validate(raw, databases=DATABASES, caches={})


# -- the table ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", AVAILABLE)
def test_each_available_row_names_a_backend_of_its_own_protocol(name: str) -> None:
    row = ENGINES[name]
    assert row.path is not None
    engine = import_string(row.path)
    assert issubclass(engine, Backend) and engine.protocol == name
    assert engine_class(row.path) is engine
    assert set(row.environment.values()) | row.flags | set(row.numbers) <= set(row.defaults)


@pytest.mark.parametrize("name", AVAILABLE)
def test_each_row_s_options_are_upper_case_and_its_numbers_default_within_bounds(
    name: str,
) -> None:
    row = ENGINES[name]
    assert not {"PROTOCOL", "BACKEND", "QUEUES"} & set(row.defaults)  # not options
    assert all(key == key.upper() for key in row.defaults)
    assert not row.flags & set(row.numbers)
    for key, (accepts, what) in row.numbers.items():
        assert accepts(row.defaults[key]), f"{key} default {row.defaults[key]!r} is not {what}"


@pytest.mark.parametrize(
    ("key", "accepted", "refused"),
    [
        ("MAX_RECEIVE_COUNT", [1, 1000], [0, 1001, 5.0, True]),
        ("WAIT_TIME_SECONDS", [0, 20], [-1, 21, 1.5, False]),  # ReceiveMessage's own bounds
        ("SEND_GRACE", [0.1, 30, 1e6], [0, -1, math.nan, True]),
    ],
)
def test_an_sqs_number_accepts_its_bounds_and_refuses_past_them(
    key: str, accepted: list[Any], refused: list[Any]
) -> None:
    accepts, _ = ENGINES["sqs"].numbers[key]
    assert all(accepts(v) for v in accepted)
    assert not any(accepts(v) for v in refused)


def test_claim_onward_after_ms_is_none_or_milliseconds_up_to_a_minute() -> None:
    accepts, _ = ENGINES["local"].numbers["CLAIM_ONWARD_AFTER_MS"]
    assert all(accepts(v) for v in [None, 0, 5, 2.5, 60_000])
    assert not any(accepts(v) for v in [-1, 60_001, math.nan, True, "5"])


def test_amqp_and_nats_are_rows_with_only_their_names() -> None:
    assert {n: r.label for n, r in ENGINES.items() if not r.available} == {
        "amqp": "AMQP 0-9-1 (RabbitMQ etc.)",
        "nats": "NATS JetStream",
    }


def test_an_unavailable_row_refuses_to_build_with_protocol_unavailable() -> None:
    refused = ENGINES["nats"].refusal("broker")
    assert refused.code == ErrorCode.PROTOCOL_UNAVAILABLE
    either = f"{', '.join(AVAILABLE[:-1])} or {AVAILABLE[-1]}"  # local, redis or sqs
    assert refused.message == (
        "backend 'broker': protocol 'nats' (NATS JetStream) is known but not available in "
        f"django-blamequeue; use {either}"
    )


@pytest.mark.django_db
def test_get_backend_builds_the_class_the_table_names_for_the_protocol() -> None:
    engine = get_backend("default")
    assert type(engine) is import_string(ENGINES["local"].path or "")
    assert conf.backend_config("default").engine == ENGINES["local"].path


# -- entries naming their BACKEND ------------------------------------------------------------------
def test_a_backend_subclass_of_a_protocol_is_checked_as_that_protocol() -> None:
    assert found(entry(BACKEND=PATH)) == []
    [problem] = found(entry(BACKEND=PATH, DATABASE="replica"))
    assert problem.id == "E005" and 'BLAMEQUEUE["BACKENDS"]["out"]["DATABASE"]' in problem.message
    [problem] = found(entry(BACKEND=PATH, LISTN=True))
    assert problem.id == "E001" and 'Did you mean "LISTEN"?' in problem.message
    assert problem.hint == (
        "Known keys: BACKEND, QUEUES, DATABASE, LISTEN, PREPARE, CLAIM_ONWARD_AFTER_MS."
    )


def test_an_engine_of_another_protocol_gets_its_options_as_written(
    settings: SettingsWrapper,
) -> None:
    path = f"{__name__}.Homegrown"
    settings.BLAMEQUEUE = entry(BACKEND=path, URL="homegrown://h:9092", QUEUES=["a"])
    config = conf.backend_config("out")
    assert (config.protocol, config.engine, config.queues) == ("homegrown", path, ("a",))
    assert dict(config.options) == {"URL": "homegrown://h:9092"}
    [problem] = found(entry(BACKEND=path, QUEUES="a"))
    assert problem.id == "E012" and '["QUEUES"]' in problem.message


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (42, "is 42; expected the dotted path of a " + BASE + " subclass"),
        ("nowhere.Engine", "which cannot be imported: ModuleNotFoundError: No module named"),
        ("tests.outside_engine.engine.Nothing", "which cannot be imported: ImportError"),
        ("collections.OrderedDict", "which is not a subclass of " + BASE),
        (BASE, "which does not implement"),  # its abstract verbs, named
    ],
    ids=["not-a-path", "no-module", "no-class", "not-a-backend", "abstract"],
)
def test_a_backend_that_is_no_usable_engine_class_is_e014(value: object, says: str) -> None:
    [problem] = found(entry(BACKEND=value))
    assert problem.id == "E014"
    assert problem.message.startswith(f'BLAMEQUEUE["BACKENDS"]["out"]["BACKEND"] is {value!r}')
    assert says in problem.message, problem.message
    assert problem.hint == f"Name a subclass of {BASE}, or choose a PROTOCOL."


def test_protocol_and_backend_together_are_e014() -> None:
    [problem] = found(entry(PROTOCOL="local", BACKEND=PATH))
    assert problem.id == "E014" and "sets both PROTOCOL and BACKEND" in problem.message


def test_e014_refuses_at_run_time_with_invalid_config(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = entry(BACKEND="nowhere.Engine")
    with pytest.raises(QueueError) as caught:
        conf.get_settings()
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert caught.value.message.startswith('E014: BLAMEQUEUE["BACKENDS"]["out"]["BACKEND"]')
