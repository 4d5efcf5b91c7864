"""Node address overrides: every bad entry is named at once, not only the first."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from obleth.core.validators import validate_node_addresses


def test_every_bad_node_address_entry_is_named() -> None:
    with pytest.raises(ValidationError) as caught:
        validate_node_addresses({"bad host": "10.0.0.1", "gpu-2": "nothost", "gpu-3": "10.0.0.3"})
    text = " ".join(caught.value.messages)
    assert "'bad host'" in text and "gpu-2" in text and "gpu-3" not in text
