"""The job table, shared by the local backend (``Job``) and the SQS backend's ledger
(``SqsJob``): the same columns, the same SQL, parametrized by table.

The parts are mixins of ``LedgerBase`` composed by ``DatabaseBackend`` and ``SqsBackend``:
an edit here changes both backends, and both run the conformance suite. Nothing here knows
which of the two it serves beyond the ``model``/``table`` it is given and the hooks each
backend overrides (``_made_pending``, ``_notify``).
"""
