"""Fixtures for the console's tests: users with and without each permission."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

PASSWORD = "correct horse battery staple"


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    perms = Permission.objects.filter(
        content_type__app_label="django_blamequeue", codename__in=codenames
    )
    assert perms.count() == len(codenames), codenames
    user.user_permissions.add(*perms)
    return user


@pytest.fixture
def root() -> User:
    return User.objects.create_superuser("root", "root@example.com", PASSWORD)


@pytest.fixture
def client_as(client: Client) -> Callable[[User], Client]:
    def login(user: User) -> Client:
        client.force_login(user)
        return client

    return login


@pytest.fixture
def admin_client_(client: Client, root: User) -> Client:
    client.force_login(root)
    return client


@pytest.fixture
def viewer() -> User:
    return staff("viewer", "view_job", "view_auditevent")
