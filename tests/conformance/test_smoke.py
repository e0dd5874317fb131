from typing import Any

from django_blamequeue import queue
from django_blamequeue.testing import wait_until


def test_a_job_enqueued_is_run_once_and_recorded_done(backend: str) -> None:
    seen = []

    def handler(job: Any, ctx: Any) -> dict[str, int]:
        seen.append(job.payload)
        return {"ok": job.payload["n"]}

    enq = queue.enqueue("smoke", {"n": 1}, backend=backend)
    consumer = queue.consume("smoke", handler, backend=backend, poll_interval=0.1)

    def done() -> bool:
        info = queue.get_job(enq.job_id, backend=backend)
        return info is not None and info.state == "done"

    assert wait_until(done, 10)
    consumer.cancel()
    consumer.join(5)
    info = queue.get_job(enq.job_id, backend=backend)
    assert info is not None and info.result == {"ok": 1}
    assert seen == [{"n": 1}]
