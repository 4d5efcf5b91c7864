import pytest

from obleth.core.models import Model, SlurmSettings
from tests.plugins.factories import make_model


@pytest.mark.django_db
def test_database_is_postgresql_and_models_save() -> None:
    from django.db import connection

    assert connection.vendor == "postgresql"
    model = make_model(name="smoke")
    assert Model.objects.get(pk=model.pk).name == "smoke"
    assert SlurmSettings.load().pk == 1
