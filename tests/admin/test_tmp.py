import pytest, re
from django_blamequeue import queue
from tests.admin.factories import SVG_XSS, XSS
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
def test_x(admin_client_):
    flow = queue.enqueue_flow("f", [{"name": SVG_XSS}, {"name": XSS, "depends_on": [SVG_XSS]}])
    body = admin_client_.get(f"/admin/django_blamequeue/job/flow/{flow['flow_id']}/").content.decode()
    for m in re.finditer("<svg onload|javascript:", body):
        print(repr(body[m.start()-200:m.end()+50]))
