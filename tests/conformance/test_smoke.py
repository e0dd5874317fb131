from django_blamequeue import queue
from django_blamequeue.testing import capture_events


def test_a_job_enqueued_is_run_once_and_recorded_done(backend: str) -> None:
    seen = []

    def handler(job, ctx):
        seen.append(job.payload)
        return {"ok": job.payload["n"]}

    with capture_events() as events:
        enq = queue.enqueue("smoke", {"n": 1}, backend=backend)
        consumer = queue.consume("smoke", handler, backend=backend, poll_interval=0.1)
        assert (
            events.wait_for(
                lambda _: queue.get_job(enq.job_id, backend=backend).state == "done" or False, 5
            )
            or True
        )
    consumer.cancel()
    consumer.join(5)
    info = queue.get_job(enq.job_id, backend=backend)
    assert info is not None and info.state == "done", info
    assert info.result == {"ok": 1}
    assert seen == [{"n": 1}]
