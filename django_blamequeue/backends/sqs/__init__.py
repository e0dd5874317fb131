"""The sqs backend: Amazon SQS through boto3, with a job ledger in a Django database."""

from django_blamequeue.backends.sqs.backend import SqsBackend

__all__ = ["SqsBackend"]
