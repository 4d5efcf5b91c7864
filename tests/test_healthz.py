from typing import Any

import pytest
from django.test import Client


@pytest.mark.django_db
def test_healthz_answers_without_credentials() -> None:
    answer = Client().get("/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


@pytest.mark.django_db
def test_healthz_says_503_when_the_database_is_unreachable(monkeypatch: Any) -> None:
    from django.db import DatabaseError, connection

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise DatabaseError("connection refused")

    monkeypatch.setattr(connection, "cursor", broken)
    answer = Client().get("/healthz")
    assert answer.status_code == 503 and answer.json()["database"] == "unreachable"
