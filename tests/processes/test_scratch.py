import time, pytest
from django_blamequeue import queue
from tests.procapp.jobs import QUEUE
from .conftest import states
pytestmark = [pytest.mark.django_db(transaction=True, databases="__all__")]

@pytest.mark.parametrize("name", ["procapp.effect", "procapp.noop"])
def test_speed(backend, processes, report, name):
    queue.enqueue_many(QUEUE, [{}]*1000, name=name, backend=backend)
    t=time.monotonic()
    w = processes.worker(backend, "--burst", "--concurrency", "4", "--no-sweep")
    assert w.wait(100) == 0, w.tail()
    report(f"speed[{backend},{name}]", s=time.monotonic()-t, out=w.stdout().splitlines()[-1])
