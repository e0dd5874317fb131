"""A view that enqueues, for the request part of the blame trail."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_blamequeue import queue


@csrf_exempt
def place_order(request: HttpRequest) -> HttpResponse:
    job = queue.enqueue("orders", {"order": 1})  # the site the trail names
    return JsonResponse({"job_id": job.job_id})


urlpatterns = [path("orders/", place_order)]
