"""Settings for the test suite: PostgreSQL and Redis on this machine, eager Celery."""

import hashlib
import os
from pathlib import Path

# Each checkout gets its own test database and Redis database, derived from its path, so two
# clones' suites on one machine (or a suite beside a running ``scripts/run``, which uses Redis
# database 0) never read each other's rows or gateway load reports. DATABASE_URL / REDIS_URL
# set in the environment win. Child processes the tests start inherit both.
_CHECKOUT = hashlib.sha256(str(Path(__file__).resolve().parent.parent).encode()).digest()
os.environ.setdefault(
    "DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/test{_CHECKOUT.hex()[:8]}"
)
os.environ.setdefault("REDIS_URL", f"redis://127.0.0.1:6379/{1 + _CHECKOUT[0] % 15}")
os.environ.setdefault("OBLETH_SECRET_KEY", "test-secret-key-not-for-production")
os.environ.setdefault("OBLETH_ENCRYPTION_KEY", "test-encryption-key-not-for-production")
os.environ.setdefault("OBLETH_ADMIN_TOKEN", "test-admin-token-0123456789abcdef")
os.environ.setdefault("OBLETH_DEBUG", "0")
os.environ.setdefault("OBLETH_PROVISIONER_DISPATCH", "inline")

from obleth.settings import *  # noqa: E402, F403
from obleth.settings import ALLOWED_HOSTS  # noqa: E402

ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
