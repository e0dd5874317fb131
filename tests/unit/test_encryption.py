"""The encryption seam (docs/encryption.md): settings checked with E044, the queue setting,
a stored token opened by any configured key, a tampered one refused, the missing extra named."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.fernet import Fernet
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import encryption, job, queue
from django_blamequeue.admin import sealed
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.jobtable import rotation
from django_blamequeue.conf.validator import validate
from django_blamequeue.core.payload import Encoded
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.management import keys
from django_blamequeue.serializers import decode, encode

from .test_extras import uninstall

KEY = Fernet.generate_key().decode()


def configure(settings: SettingsWrapper, **keys: Any) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, **keys}


def e044(raw: dict[str, Any]) -> list[str]:
    return [p.message for p in validate(raw) if p.id == "E044"]


def test_a_key_that_is_not_a_fernet_key_is_e044_without_echoing_it() -> None:
    (message,) = e044({"ENCRYPTION_KEYS": [KEY, "hunter2"]})
    assert '["ENCRYPTION_KEYS"][1]' in message and "hunter2" not in message


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"ENCRYPT": True}, "ENCRYPTION_KEYS is empty"),
        ({"ENCRYPT": "payments", "ENCRYPTION_KEYS": [KEY]}, "expected True, False or queue names"),
        ({"ENCRYPTION_KEYS": KEY}, "expected a list of keys"),
    ],
)
def test_encryption_settings_that_cannot_work_are_e044(raw: dict[str, Any], says: str) -> None:
    (message,) = e044(raw)
    assert says in message


def test_any_configured_key_opens_a_payload_and_the_first_one_seals(
    settings: SettingsWrapper,
) -> None:
    old = Fernet.generate_key().decode()
    configure(settings, ENCRYPTION_KEYS=[old])
    sealed = encryption.seal(encode({"n": 1}))
    assert sealed.content_encoding == "fernet+utf-8" and b'"n"' not in sealed.body
    configure(settings, ENCRYPTION_KEYS=[KEY, old])
    assert decode(sealed.content_type, sealed.content_encoding, sealed.body) == {"n": 1}
    rotated = encryption.rotate(sealed)
    assert rotated is not None
    configure(settings, ENCRYPTION_KEYS=[KEY])
    assert decode(rotated.content_type, rotated.content_encoding, rotated.body) == {"n": 1}


def test_a_tampered_token_is_decrypt_failed(settings: SettingsWrapper) -> None:
    configure(settings, ENCRYPTION_KEYS=[KEY])
    sealed = encryption.seal(encode({"n": 1}))
    body = sealed.body[:-5] + (b"A" if sealed.body[-5:-4] != b"A" else b"B") + sealed.body[-4:]
    with pytest.raises(QueueError) as caught:
        decode(sealed.content_type, sealed.content_encoding, body)
    assert caught.value.code == ErrorCode.DECRYPT_FAILED


@pytest.mark.django_db
def test_the_encrypt_setting_encrypts_only_the_queues_it_names(settings: SettingsWrapper) -> None:
    configure(settings, ENCRYPTION_KEYS=[KEY], ENCRYPT=["vault"])
    queue.enqueue("vault", {"secret": 1})
    queue.enqueue("open", {"plain": 1})
    engine = get_backend()
    (vault,) = engine.claim(["vault"], 1, 30.0)
    (plain,) = engine.claim(["open"], 1, 30.0)
    assert encryption.is_encrypted(vault.payload) and not encryption.is_encrypted(plain.payload)


def test_encrypted_on_a_job_must_be_a_bool() -> None:
    with pytest.raises(QueueError, match="encrypted must be True or False"):
        job(queue="vault", name="tests.unit.encrypted_flag", encrypted="yes")  # type: ignore[call-overload]


def test_encryption_without_cryptography_names_the_extra(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(settings, ENCRYPTION_KEYS=[KEY])
    uninstall(monkeypatch, "cryptography")
    monkeypatch.setattr(encryption, "_cipher", None)
    with pytest.raises(QueueError, match=r"pip install 'django-blamequeue\[crypto\]'"):
        encryption.seal(Encoded("application/json", "utf-8", b"{}"))


@pytest.mark.django_db
def test_the_console_lists_an_encrypted_job_sealed_and_a_plain_one_as_it_is(
    settings: SettingsWrapper,
) -> None:
    configure(settings, ENCRYPTION_KEYS=[KEY], ENCRYPT=["vault"])
    secret = queue.get_job(queue.enqueue("vault", {"card": 1}).job_id)
    plain = queue.get_job(queue.enqueue("open", {"n": 1}).job_id)
    assert secret is not None and plain is not None
    assert (secret.encrypted, secret.payload) == (True, {"card": 1})
    assert sealed.listed(secret).payload == sealed.SEALED
    assert sealed.listed(plain) is plain


def test_rotate_keys_keeps_error_text_no_key_opens_rather_than_lose_it(
    settings: SettingsWrapper,
) -> None:
    configure(settings, ENCRYPTION_KEYS=[KEY])
    mine = encryption.seal_text("ValueError: declined")
    assert keys._text("fernet:not-a-token") == "fernet:not-a-token"
    assert keys._text(None) is None
    assert keys._text("RuntimeError: stalled") == "RuntimeError: stalled"  # plain stays plain
    assert encryption.open_text(keys._text(mine)) == "ValueError: declined"


@pytest.mark.django_db
def test_the_job_table_rewrites_a_batch_and_says_where_it_stopped(
    settings: SettingsWrapper,
) -> None:
    old = Fernet.generate_key().decode()
    configure(settings, ENCRYPTION_KEYS=[old], ENCRYPT=True)
    first, second = (queue.enqueue("vault", {"n": n}).job_id for n in range(2))
    configure(settings, ENCRYPTION_KEYS=[KEY, old])
    table = get_backend().jobtable  # type: ignore[attr-defined]
    rotate = encryption.rotate
    step = rotation.rotate(table, lambda e: rotate(e) or e, encryption.seal_text, limit=1)
    assert (step.seen, step.rewritten, step.last_id) == (1, 1, min(first, second))
    configure(settings, ENCRYPTION_KEYS=[KEY])
    opened = {j: queue.get_job(j) for j in (first, second)}
    assert sorted((info.payload is not None) for info in opened.values() if info is not None) == [
        False,
        True,
    ]


def test_sealed_error_text_fits_its_column_whole_however_long_the_error(
    settings: SettingsWrapper,
) -> None:
    configure(settings, ENCRYPTION_KEYS=[KEY])
    for text in ("x" * 10_000, "é" * 10_000):
        stored = encryption.seal_text(text, 4096)
        assert stored is not None and len(stored) <= 4096
        opened = encryption.open_text(stored)
        assert opened is not None and opened.startswith(text[:100])


@pytest.mark.django_db
def test_rotate_keys_leaves_a_job_no_key_opens_and_goes_on(settings: SettingsWrapper) -> None:
    from io import StringIO

    from django.core.management import call_command

    configure(settings, ENCRYPTION_KEYS=[Fernet.generate_key().decode()], ENCRYPT=True)
    lost = queue.enqueue("vault", {"n": 1}).job_id
    configure(settings, ENCRYPTION_KEYS=[KEY], ENCRYPT=True)
    kept = queue.enqueue("vault", {"n": 2}).job_id
    out = StringIO()
    call_command("blamequeue", "--backend", "default", "rotate-keys", stdout=out)
    assert "1 job(s) re-encrypted with the first key; 1 left as they were" in out.getvalue()
    assert queue.get_job(kept).payload == {"n": 2}  # type: ignore[union-attr]
    assert queue.get_job(lost).payload is None  # type: ignore[union-attr]


def test_an_encrypted_jobs_checkpoint_is_sealed_and_capped_on_its_plain_text(
    settings: SettingsWrapper,
) -> None:
    from django_blamequeue.core.checkpoints import MAX_CHECKPOINT_BYTES

    configure(settings, ENCRYPTION_KEYS=[KEY])
    stored = encryption.seal_checkpoint({"card": "4111"}, True)
    assert stored.startswith(encryption.TEXT_PREFIX) and "4111" not in stored
    assert encryption.open_checkpoint(stored) == {"card": "4111"}
    assert encryption.seal_checkpoint({"at": 3}, False) == '{"at":3}'
    largest = "x" * (MAX_CHECKPOINT_BYTES - 2)  # its JSON text is exactly the cap
    assert encryption.open_checkpoint(encryption.seal_checkpoint(largest, True)) == largest
    with pytest.raises(QueueError) as refused:
        encryption.seal_checkpoint(largest + "x", True)
    assert refused.value.code == ErrorCode.CHECKPOINT_TOO_LARGE


@pytest.mark.django_db
def test_rotate_keys_names_a_backend_that_cannot_and_changes_nothing(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.management import CommandError, call_command

    old = Fernet.generate_key().decode()
    configure(settings, ENCRYPTION_KEYS=[old], ENCRYPT=True)
    job_id = queue.enqueue("vault", {"n": 1}).job_id
    configure(settings, ENCRYPTION_KEYS=[KEY, old], ENCRYPT=True)
    monkeypatch.setattr(get_backend("default"), "supports_key_rotation", False)
    with pytest.raises(CommandError, match="KEY_ROTATION_UNSUPPORTED"):
        call_command("blamequeue", "--backend", "default", "rotate-keys")
    configure(settings, ENCRYPTION_KEYS=[old], ENCRYPT=True)
    assert queue.get_job(job_id).payload == {"n": 1}  # type: ignore[union-attr]


def test_redis_rotation_matches_only_its_prefix_and_reseals_an_attempt_entrys_errors(
    settings: SettingsWrapper,
) -> None:
    import json

    from django_blamequeue.backends.redis import rotation as redis_rotation

    assert redis_rotation._glob("{bq[1]*}") == "{bq\\[1\\]\\*}"  # SCAN's pattern, escaped
    old = Fernet.generate_key().decode()
    configure(settings, ENCRYPTION_KEYS=[old])
    error, trace = encryption.seal_text("ValueError: x"), encryption.seal_text("Traceback: x")
    entry = json.dumps([1, "retried", False, "1", False, False, "ValueError", error, trace])
    configure(settings, ENCRYPTION_KEYS=[KEY, old])
    new = redis_rotation._entry(entry.encode(), keys._text)
    assert new is not None
    configure(settings, ENCRYPTION_KEYS=[KEY])
    fields = json.loads(new)
    assert fields[:7] == [1, "retried", False, "1", False, False, "ValueError"]
    assert [encryption.open_text(f) for f in fields[7:]] == ["ValueError: x", "Traceback: x"]
    plain = json.dumps([1, "retried", False, "1", False, False, "ValueError", "x", False])
    assert redis_rotation._entry(plain.encode(), keys._text) is None  # nothing sealed in it
