"""The job table, shared by the local backend (``Job``) and the SQS backend's ledger
(``SqsJob``): the same columns, the same SQL, parametrized by table.

Both backends hold the same parts, each an object over one ``JobTable`` (``table.py``: the
model, its database, its vendor, its clock): ``Inserts``, ``Acks``, ``Leases``,
``Checkpoints``, ``Flows``, ``Manifests``, ``Listing``, ``ControlRows`` and
``LimitedClaims``. An edit here changes both backends, and both run the conformance suite.
What differs between the two is passed in: whether wake-ups go out as NOTIFY, what a
transaction owes jobs it made pending (``table.Released``), and the backend through which a
fan-out's children land.
"""
