"""``OriginMiddleware``: jobs enqueued while a request is served record its user too.

Method and path are recorded with no setup (``request_started`` / ``request_finished``
receivers, connected in ``apps.py``); the user is known only after authentication, so add this
middleware after ``AuthenticationMiddleware`` to record ``JobInfo.origin["user"]``::

    MIDDLEWARE = [
        ...,
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django_blamequeue.middleware.OriginMiddleware",
        ...,
    ]
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from django_blamequeue.jobs import origin


class OriginMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self._acall(request)
        with origin.serving(request):
            return self.get_response(request)

    async def _acall(self, request: Any) -> Any:
        with origin.serving(request):
            response: Awaitable[Any] = self.get_response(request)
            return await response
