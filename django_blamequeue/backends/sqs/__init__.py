"""The sqs backend: Amazon SQS through boto3, with a job ledger in a Django database."""

from .backend import SqsBackend

__all__ = ["SqsBackend"]
