"""The ORM workload's app: one table read and one table written per job, for every library.

``models.py`` and ``work.py`` use Django only, so the peers' virtualenv (Celery, Procrastinate)
imports them as well; ``jobs.py`` registers the django-blamequeue job (its ``runworker``
autodiscovers it).
"""
