import pytest

# Every conformance test touches the job tables of every configured database.
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "conformance" in str(item.fspath):
            item.add_marker(pytest.mark.django_db(transaction=True, databases="__all__"))
