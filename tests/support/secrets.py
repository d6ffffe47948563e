"""The secrets every test app, worker and process is given: the one place they are chosen.

Settings have no secret defaults (config/safety.py refuses to start without them), so a test
that builds ``Settings`` passes these. They are long enough for the start check and are not
the public development values; they are not secret either, being in this file.
"""

from __future__ import annotations

from typing import Any, Final

TEST_WEBHOOK_SECRET: Final = "tests-webhook-secret-0123456789abcdef"
TEST_CALLBACK_SECRET_KEY: Final = "tests-callback-secret-key-0123456789abcdef"
TEST_APIFY_TOKEN: Final = "tests-apify-token"

#: As ``Settings`` keyword arguments (``Any``: mypy checks ``**`` against every parameter).
TEST_SECRETS: Final[dict[str, Any]] = {
    "webhook_secret": TEST_WEBHOOK_SECRET,
    "callback_secret_key": TEST_CALLBACK_SECRET_KEY,
    "apify_token": TEST_APIFY_TOKEN,
}

#: As the environment of a process.
TEST_SECRETS_ENV: Final[dict[str, str]] = {
    f"ORCHESTRATOR_{name.upper()}": value for name, value in TEST_SECRETS.items()
}
