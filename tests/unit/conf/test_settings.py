"""conf: the BLAMEQUEUE setting and the BLAMEQUEUE_* environment, validated into Settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import conf
from django_blamequeue.conf.engines import AVAILABLE
from django_blamequeue.conf.validator import validate
from django_blamequeue.core.schedules import cron_error
from django_blamequeue.exceptions import ErrorCode, QueueError

SQLITE_OK = {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
DATABASES = {"default": SQLITE_OK}
CACHES = {
    "redis": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://h:6379/0"},
    "mem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [n for n in os.environ if n.startswith("BLAMEQUEUE_")]:
        monkeypatch.delenv(name)
    conf.reset()
    yield
    conf.reset()


@pytest.fixture
def no_setting(settings: SettingsWrapper) -> SettingsWrapper:
    """The environment boot: no BLAMEQUEUE setting at all."""
    del settings.BLAMEQUEUE
    return settings


def ids(raw: object, **kwargs: Any) -> list[str]:
    kwargs.setdefault("databases", DATABASES)
    kwargs.setdefault("caches", CACHES)
    return [p.id for p in validate(raw, **kwargs)]


def first_error() -> conf.Problem:
    """The first error in force (W002 may precede it, depending on the test DATABASES)."""
    return next(p for p in conf.problems() if p.level == "error")


def only(raw: object, id_: str, **kwargs: Any) -> conf.Problem:
    """The single problem ``raw`` has, asserting its id."""
    kwargs.setdefault("databases", DATABASES)
    kwargs.setdefault("caches", CACHES)
    found = validate(raw, **kwargs)
    assert [p.id for p in found] == [id_], found
    return found[0]


def backend(**entry: Any) -> dict[str, Any]:
    return {"BACKENDS": {"default": {"PROTOCOL": "local"}, "fast": entry}}


# -- a valid configuration ------------------------------------------------------------------


def test_the_spec_example_has_no_problems() -> None:
    raw = {
        "BACKENDS": {
            "default": {"PROTOCOL": "local"},
            "fast": {"PROTOCOL": "redis", "CONNECTION": "redis"},
            "aws": {
                "PROTOCOL": "sqs",
                "REGION": "eu-west-1",
                "ENDPOINT_URL": None,
                "QUEUE_PREFIX": "app-",
            },
        },
        "DEFAULT_BACKEND": "default",
        "SERIALIZER": "json",
        "ACCEPT_CONTENT": ["json"],
        "MAX_PAYLOAD_BYTES": 1_048_576,
        "AUDIT": "operations",
        "SCHEDULES": {},
        "RETENTION": {"DONE": 60, "CANCELLED": None, "FAILED": None, "AUDIT": 3600.5},
        "DEFAULT_LEASE": 10,
        "BACKOFF_JITTER": True,
        "MAX_STALLED_COUNT": 0,
    }
    assert validate(raw, databases=DATABASES, caches=CACHES) == []


def test_an_empty_setting_means_one_local_backend_with_documented_defaults(
    settings: SettingsWrapper,
) -> None:
    settings.BLAMEQUEUE = {}
    current = conf.get_settings()
    assert current == conf.Settings(backends=current.backends)
    assert list(current.backends) == ["default"]
    default = current.backends["default"]
    assert (default.protocol, dict(default.options), default.queues) == (
        "local",
        {"DATABASE": "default", "LISTEN": True, "PREPARE": None, "CLAIM_ONWARD_AFTER_MS": 5.0},
        None,
    )
    assert current.retention_done == 7 * 86400 and current.retention_failed is None
    assert current.retention_audit == 30 * 86400 and current.accept_content == ("json",)


def test_backend_options_get_their_defaults_and_lose_protocol_and_queues(
    settings: SettingsWrapper,
) -> None:
    settings.CACHES = CACHES
    settings.BLAMEQUEUE = {
        "BACKENDS": {
            "default": {"PROTOCOL": "redis", "URL": "redis://h:6379/1", "QUEUES": ["a", "b"]},
            "aws": {"PROTOCOL": "sqs", "REGION": "eu-west-1"},
        }
    }
    redis, sqs = conf.get_settings().backends.values()
    assert dict(redis.options) == {**conf.BACKEND_DEFAULTS["redis"], "URL": "redis://h:6379/1"}
    assert redis.queues == ("a", "b")
    assert dict(sqs.options) == {**conf.BACKEND_DEFAULTS["sqs"], "REGION": "eu-west-1"}
    # the documented defaults
    assert (redis.options["KEY_PREFIX"], redis.options["TLS"], redis.options["DATABASE"]) == (
        "blamequeue",
        False,
        "default",
    )
    assert (sqs.options["QUEUE_PREFIX"], sqs.options["DATABASE"]) == ("", "default")


def test_settings_are_read_only_and_durations_are_floats(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {
        "DEFAULT_LEASE": 5,
        "RETENTION": {"DONE": 60},
        "ACCEPT_CONTENT": ["json"],
        "SCHEDULES": {"tick": {"job": "app.tick", "interval": 60}},
    }
    current = conf.get_settings()
    assert isinstance(current.default_lease, float) and current.retention_done == 60.0
    assert current.accept_content == ("json",)
    with pytest.raises(TypeError):
        current.schedules["tick"]["job"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        current.backends["default"].options["DATABASE"] = "x"  # type: ignore[index]
    with pytest.raises(AttributeError):
        current.default_lease = 1.0  # type: ignore[misc]


# -- one test per check id -------------------------------------------------------------------


def test_a_setting_that_is_not_a_dict_is_e001() -> None:
    assert "must be a dict, not list" in only([], "E001").message


def test_unknown_key_is_named_with_the_closest_suggestion() -> None:
    problem = only({"BACKEND": {}}, "E001")
    assert problem.message.startswith('BLAMEQUEUE["BACKEND"] is not a known key')
    assert 'Did you mean "BACKENDS"?' in problem.message
    assert "BACKENDS" in problem.hint


def test_unknown_backend_option_is_named_with_the_closest_suggestion() -> None:
    problem = only(backend(PROTOCOL="sqs", REGION="x", REGOIN="y"), "E001")
    assert 'BLAMEQUEUE["BACKENDS"]["fast"]["REGOIN"]' in problem.message
    assert 'Did you mean "REGION"?' in problem.message


def test_unknown_retention_key_is_e001() -> None:
    assert 'Did you mean "FAILED"?' in only({"RETENTION": {"FAIL": 1}}, "E001").message


def test_default_backend_naming_no_entry_is_e002() -> None:
    problem = only({"DEFAULT_BACKEND": "fats"}, "E002")
    assert 'BLAMEQUEUE["DEFAULT_BACKEND"]' in problem.message and "default" in problem.hint


def test_unknown_protocol_is_e003_and_lists_the_known_ones() -> None:
    problem = only(backend(PROTOCOL="Redis"), "E003")
    assert 'BLAMEQUEUE["BACKENDS"]["fast"]["PROTOCOL"]' in problem.message
    assert 'Did you mean "redis"?' in problem.message
    assert problem.hint == "Use one of: " + ", ".join(AVAILABLE) + "."  # local, redis, sqs


def test_a_backend_without_protocol_is_e003() -> None:
    assert '["PROTOCOL"] is missing' in only(backend(URL="redis://h"), "E003").message


@pytest.mark.parametrize(
    ("protocol", "name"), [("amqp", "AMQP 0-9-1 (RabbitMQ etc.)"), ("nats", "NATS JetStream")]
)
def test_amqp_and_nats_are_known_but_unavailable_e004(protocol: str, name: str) -> None:
    problem = only(backend(PROTOCOL=protocol), "E004")
    assert name in problem.message and ", ".join(AVAILABLE) in problem.hint


def test_an_unavailable_protocol_refuses_at_run_time_with_protocol_unavailable(
    settings: SettingsWrapper,
) -> None:
    settings.BLAMEQUEUE = backend(PROTOCOL="nats")
    with pytest.raises(QueueError) as caught:
        conf.get_settings()
    assert caught.value.code == ErrorCode.PROTOCOL_UNAVAILABLE
    assert caught.value.message == f"E004: {first_error().message}"


def test_local_database_alias_missing_from_databases_is_e005() -> None:
    problem = only(backend(PROTOCOL="local", DATABASE="replica"), "E005")
    assert "'replica'" in problem.message and "DATABASES" in problem.message


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({}, '["URL"] is missing'),
        ({"CONNECTION": "nope"}, "no entry of CACHES"),
        ({"CONNECTION": "mem"}, "non-Redis"),
        ({"URL": "http://h:6379"}, "not a redis:// URL"),
        ({"URL": "redis://h", "CONNECTION": "redis"}, "both CONNECTION and URL"),
        ({"CONNECTION": "redis", "CLUSTER": True}, "a cluster is reached by URL"),
        ({"URL": "unix:///run/redis.sock", "CLUSTER": True}, "nodes are reached over TCP"),
    ],
)
def test_redis_needs_a_cache_connection_or_a_url_e006(entry: dict[str, str], says: str) -> None:
    assert says in only(backend(PROTOCOL="redis", **entry), "E006").message


@pytest.mark.parametrize(
    "entry", [{"CONNECTION": "redis"}, {"URL": "rediss://h:6380/0", "TLS": True, "PASSWORD": "p"}]
)
def test_redis_with_a_cache_connection_or_a_url_is_fine(entry: dict[str, Any]) -> None:
    assert ids(backend(PROTOCOL="redis", **entry)) == []


def test_sqs_without_region_is_e007() -> None:
    problem = only(backend(PROTOCOL="sqs", QUEUE_PREFIX="app-"), "E007")
    assert 'BLAMEQUEUE["BACKENDS"]["fast"]["REGION"] is missing' in problem.message


@pytest.fixture
def serializer_without_its_library() -> Iterator[str]:
    """A serializer kombu knows by name whose library is missing, as kombu registers yaml
    and msgpack when PyYAML / msgpack are not installed."""
    from kombu.exceptions import SerializerNotInstalled
    from kombu.serialization import register, unregister

    def missing(*args: Any) -> Any:
        raise SerializerNotInstalled("no nolib library installed")

    register("nolib", missing, missing, content_type="application/x-nolib")
    yield "nolib"
    unregister("nolib")


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"SERIALIZER": "jsn"}, "kombu cannot encode"),
        ({"SERIALIZER": "nolib", "ACCEPT_CONTENT": ["json"]}, "kombu cannot encode"),
        ({"SERIALIZER": "pickle"}, "ACCEPT_CONTENT refuses"),
        ({"ACCEPT_CONTENT": ["json", "jason"]}, "kombu does not know"),
        ({"ACCEPT_CONTENT": "json"}, "expected a non-empty list"),
    ],
)
def test_serializer_unknown_to_kombu_or_not_accepted_is_e008(
    raw: dict[str, Any], says: str, serializer_without_its_library: str
) -> None:
    assert says in only(raw, "E008").message


def test_accept_content_may_list_content_types_instead_of_names() -> None:
    assert ids({"SERIALIZER": "json", "ACCEPT_CONTENT": ["application/json"]}) == []


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "1MB", None])
def test_max_payload_bytes_must_be_a_positive_int_e009(value: object) -> None:
    assert 'BLAMEQUEUE["MAX_PAYLOAD_BYTES"]' in only({"MAX_PAYLOAD_BYTES": value}, "E009").message


def test_audit_outside_all_operations_off_is_e010() -> None:
    assert "'everything'" in only({"AUDIT": "everything"}, "E010").message


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"job": "a.b", "cron": "61 * * * *"}, "minute field '61'"),
        ({"job": "a.b", "cron": "* * * *"}, "has 4 fields"),
        ({"job": "a.b", "cron": "0 0 * * funday"}, "'funday' is not a number or a name"),
        ({"job": "a.b", "interval": 0}, '"interval" is 0'),
        ({"job": "a.b", "interval": 5, "cron": "* * * * *"}, "exactly one"),
        ({"job": "a.b"}, "exactly one"),
        ({"cron": "* * * * *"}, '"job" is None'),
        ({"job": "a.b", "interval": 5, "timezone": "Mars/Olympus"}, "IANA time zone"),
        ({"job": "a.b", "interval": 5, "queue": ""}, '"queue"'),
        ({"job": "a.b", "intervall": 5}, 'Did you mean "interval"?'),
    ],
)
def test_a_bad_schedule_entry_is_e011(entry: dict[str, Any], says: str) -> None:
    found = validate({"SCHEDULES": {"nightly": entry}}, databases=DATABASES)
    assert {p.id for p in found} == {"E011"}
    assert any(says in p.message for p in found), found
    assert all(p.message.startswith('BLAMEQUEUE["SCHEDULES"]["nightly"]') for p in found)


def test_good_schedules_have_no_problems() -> None:
    schedules = {
        "every5": {"job": "a.b", "cron": "*/5 * * * *", "timezone": "Europe/Paris"},
        "weekdays": {"job": "a.b", "cron": "30 9 1-15/2 JAN,jun-aug mon-fri", "queue": "q"},
        "sunday7": {"job": "a.b", "cron": "0 0 * * 7", "payload": {"x": 1}},
        "fast": {"job": "a.b", "interval": 0.5},
    }
    assert ids({"SCHEDULES": schedules}) == []


@pytest.mark.parametrize(
    "expr", ["* * * * *", "0 0 1 1 0", "0-59/15 0,12 */2 1-12 sun-sat", "5/10 * * dec *"]
)
def test_cron_accepts_ranges_lists_steps_and_names(expr: str) -> None:
    assert cron_error(expr) is None


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * * *",
        "*/0 * * * *",
        "10-5 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "1,,2 * * * *",
        "mon * * * *",
        "- * * * *",
        "",
    ],
)
def test_cron_refuses_what_cron_would_refuse(expr: str) -> None:
    assert cron_error(expr) is not None


@pytest.mark.parametrize("accept", [["json", "pickle"], ["json", "application/x-yaml"]])
def test_accepting_pickle_or_yaml_is_w001(accept: list[str]) -> None:
    problem = only({"ACCEPT_CONTENT": accept}, "W001")
    assert problem.level == "warning"


def test_sqlite_without_immediate_transactions_is_w002() -> None:
    databases = {"default": {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {}}}
    problem = only({}, "W002", databases=databases)
    assert problem.level == "warning" and "transaction_mode" in problem.hint


SQLITE_DEFERRED = {"default": {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {}}}
#: The W002 tests swap DATABASES for one without "transaction_mode"; nothing connects to it.
swapped_databases = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@swapped_databases
@pytest.mark.parametrize(
    ("protocol", "origin"),
    [
        ("", 'The built-in backend "default" (no BLAMEQUEUE setting, no BLAMEQUEUE_PROTOCOL)'),
        ("local", 'The backend "default" that BLAMEQUEUE_PROTOCOL sets up (no BLAMEQUEUE setting)'),
    ],
    ids=["nothing-set", "protocol-variable"],
)
def test_w002_without_a_setting_names_the_built_in_backend_or_the_variable(
    no_setting: SettingsWrapper, monkeypatch: pytest.MonkeyPatch, protocol: str, origin: str
) -> None:
    no_setting.DATABASES = SQLITE_DEFERRED
    if protocol:
        monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", protocol)
    [problem] = conf.problems()
    assert problem.id == "W002"
    assert problem.message.startswith(f"{origin} stores jobs in the SQLite database 'default'")
    assert "environment" not in problem.message  # nothing was read from a variable named so


@swapped_databases
def test_w002_for_a_setting_without_backends_names_the_default_it_implies(
    settings: SettingsWrapper,
) -> None:
    settings.DATABASES = SQLITE_DEFERRED
    settings.BLAMEQUEUE = {"AUDIT": "all"}
    [problem] = conf.problems()
    assert problem.message.startswith(
        'The backend "default" of a BLAMEQUEUE without "BACKENDS" stores jobs'
    )


@swapped_databases
def test_w002_for_a_backend_written_in_the_setting_names_its_entry(
    settings: SettingsWrapper,
) -> None:
    settings.DATABASES = SQLITE_DEFERRED
    settings.BLAMEQUEUE = {"BACKENDS": {"main": {"PROTOCOL": "local"}}, "DEFAULT_BACKEND": "main"}
    [problem] = conf.problems()
    assert problem.message.startswith('BLAMEQUEUE["BACKENDS"]["main"] stores jobs')


def test_other_databases_need_no_transaction_mode() -> None:
    databases = {"default": {"ENGINE": "django.db.backends.postgresql"}}
    assert ids({}, databases=databases) == []


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"DEFAULT_LEASE": -1}, '["DEFAULT_LEASE"]'),
        ({"BACKOFF_BASE": "1s"}, '["BACKOFF_BASE"]'),
        ({"BACKOFF_BASE": 10, "BACKOFF_MAX": 5}, '["BACKOFF_MAX"]'),
        ({"BACKOFF_JITTER": "yes"}, '["BACKOFF_JITTER"]'),
        ({"MAX_STALLED_COUNT": -1}, '["MAX_STALLED_COUNT"]'),
        ({"DEFAULT_MAX_ATTEMPTS": 0}, '["DEFAULT_MAX_ATTEMPTS"]'),
        ({"SWEEP_INTERVAL": float("nan")}, '["SWEEP_INTERVAL"]'),
        ({"RETENTION": {"DONE": -5}}, '["RETENTION"]["DONE"]'),
        ({"RETENTION": 3600}, '["RETENTION"]'),
        ({"BACKENDS": {"default": "local"}}, '["BACKENDS"]["default"]'),
        ({"BACKENDS": {}}, '["BACKENDS"]'),
        ({"BACKENDS": {"default": {"PROTOCOL": "local", "QUEUES": "emails"}}}, '["QUEUES"]'),
        ({"BACKENDS": {"default": {"PROTOCOL": "local", "QUEUES": ["a", ""]}}}, '["QUEUES"]'),
        (backend(PROTOCOL="redis", URL="redis://h", TLS="yes"), '["TLS"]'),
        (backend(PROTOCOL="sqs", REGION="x", QUEUE_PREFIX="a b"), '["QUEUE_PREFIX"]'),
    ],
)
def test_other_badly_typed_values_are_e012(raw: dict[str, Any], where: str) -> None:
    message = only(raw, "E012").message
    assert message.startswith("BLAMEQUEUE[") and f"{where} " in message


def test_every_problem_has_a_message_and_says_where() -> None:
    raw = {"BACKENDS": {"x": {"PROTOCOL": "redis"}}, "AUDIT": 1, "SCHEDULES": {"s": {}}}
    for problem in validate(raw, databases=DATABASES, caches=CACHES):
        assert problem.message.startswith("BLAMEQUEUE["), problem


# -- get_settings: the same validator at run time ----------------------------------------------


def test_get_settings_raises_invalid_config_with_the_first_errors_id_and_message(
    settings: SettingsWrapper,
) -> None:
    settings.BLAMEQUEUE = {"AUDIT": "loud", "MAX_PAYLOAD_BYTES": 0}
    first = first_error()
    with pytest.raises(QueueError) as caught:
        conf.get_settings()
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert caught.value.message == f"{first.id}: {first.message}"
    assert first.id == "E009"


def test_warnings_do_not_stop_get_settings(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"ACCEPT_CONTENT": ["json", "pickle"]}
    assert conf.get_settings().accept_content == ("json", "pickle")


def test_get_settings_is_cached_until_reset(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {}
    first = conf.get_settings()
    assert conf.get_settings() is first
    conf.reset()
    assert conf.get_settings() is not first


def test_changing_the_setting_resets_the_cache(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"AUDIT": "all"}
    assert conf.get_settings().audit == "all"
    settings.BLAMEQUEUE = {"AUDIT": "off"}
    assert conf.get_settings().audit == "off"


def test_backend_config_defaults_to_the_default_backend(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"BACKENDS": {"db": {"PROTOCOL": "local"}}, "DEFAULT_BACKEND": "db"}
    assert conf.backend_config(None).alias == "db"
    assert conf.backend_config("db").protocol == "local"


def test_an_unknown_backend_alias_lists_the_configured_ones(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"BACKENDS": {"db": {"PROTOCOL": "local"}}, "DEFAULT_BACKEND": "db"}
    with pytest.raises(QueueError) as caught:
        conf.backend_config("fast")
    assert caught.value.code == ErrorCode.UNKNOWN_BACKEND
    assert "'fast'" in caught.value.message and "db" in caught.value.message


# -- the environment boot ----------------------------------------------------------------------


def test_without_setting_or_variables_the_default_is_local(no_setting: SettingsWrapper) -> None:
    current = conf.get_settings()
    assert current.backends["default"].protocol == "local"


def test_redis_from_the_environment(
    no_setting: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", "redis")
    monkeypatch.setenv("BLAMEQUEUE_REDIS_URL", "redis://cache:6379/2")
    monkeypatch.setenv("BLAMEQUEUE_REDIS_PASSWORD", "s3cret")
    monkeypatch.setenv("BLAMEQUEUE_REDIS_USERNAME", "bq")
    monkeypatch.setenv("BLAMEQUEUE_REDIS_TLS", "yes")
    monkeypatch.setenv("BLAMEQUEUE_REDIS_KEY_PREFIX", "app")
    options = conf.backend_config(None).options
    assert dict(options) == {
        **conf.BACKEND_DEFAULTS["redis"],
        "URL": "redis://cache:6379/2",
        "PASSWORD": "s3cret",
        "USERNAME": "bq",
        "TLS": True,
        "KEY_PREFIX": "app",
    }


def test_sqs_from_the_environment(
    no_setting: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", "sqs")
    monkeypatch.setenv("BLAMEQUEUE_SQS_REGION", "eu-west-1")
    monkeypatch.setenv("BLAMEQUEUE_SQS_ENDPOINT_URL", "http://localhost:4566")
    monkeypatch.setenv("BLAMEQUEUE_SQS_QUEUE_PREFIX", "app-")
    config = conf.backend_config(None)
    assert (config.protocol, config.options["REGION"], config.options["QUEUE_PREFIX"]) == (
        "sqs",
        "eu-west-1",
        "app-",
    )
    assert config.options["ENDPOINT_URL"] == "http://localhost:4566"


@pytest.mark.parametrize(
    ("protocol", "variable"),
    [("redis", "BLAMEQUEUE_REDIS_URL"), ("sqs", "BLAMEQUEUE_SQS_REGION")],
)
def test_a_missing_required_variable_is_named(
    no_setting: SettingsWrapper, monkeypatch: pytest.MonkeyPatch, protocol: str, variable: str
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", protocol)
    with pytest.raises(QueueError) as caught:
        conf.get_settings()
    assert caught.value.code == ErrorCode.INVALID_CONFIG
    assert caught.value.message.startswith(f"E00{'6' if protocol == 'redis' else '7'}: {variable}")
    assert variable in conf.problems()[0].hint


@pytest.mark.parametrize(
    ("variable", "value", "code"),
    [
        ("BLAMEQUEUE_PROTOCOL", "pigeon", ErrorCode.INVALID_CONFIG),
        ("BLAMEQUEUE_PROTOCOL", "amqp", ErrorCode.PROTOCOL_UNAVAILABLE),
        ("BLAMEQUEUE_REDIS_TLS", "maybe", ErrorCode.INVALID_CONFIG),
    ],
)
def test_bad_variables_are_refused_naming_the_variable(
    no_setting: SettingsWrapper,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    code: ErrorCode,
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", "redis")
    monkeypatch.setenv("BLAMEQUEUE_REDIS_URL", "redis://h:6379/0")
    monkeypatch.setenv(variable, value)
    with pytest.raises(QueueError) as caught:
        conf.get_settings()
    assert caught.value.code == code
    assert variable in caught.value.message


def test_the_setting_wins_over_the_environment(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLAMEQUEUE_PROTOCOL", "amqp")
    settings.BLAMEQUEUE = {}
    assert conf.get_settings().backends["default"].protocol == "local"


@pytest.mark.parametrize("weights", [{"enterprise:*": 0}, "enterprise:*=5", {"": 2}])
def test_bad_key_weights_of_a_queue_are_e013_with_the_reason(weights: object) -> None:
    problem = only({"QUEUES": {"reports": {"KEY_WEIGHTS": weights}}}, "E013")
    assert problem.message.startswith('BLAMEQUEUE["QUEUES"]["reports"]["KEY_WEIGHTS"]: ')


def test_key_weights_of_a_queue_reach_its_limits(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {"QUEUES": {"reports": {"KEY_WEIGHTS": {"enterprise:*": 5}}}}
    assert conf.get_settings().queues["reports"].key_weights == (("enterprise:*", 5),)
