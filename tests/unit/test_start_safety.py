"""The start-up check (config/safety.py) and ``Settings.secret``: which configurations an
API or worker refuses to start with, what the refusal says, and what it never shows."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from orchestrator.config.safety import (
    MIN_KEY_CHARS,
    Process,
    UnsafeSettingsError,
    check_start,
    is_loopback_host,
    review,
)
from orchestrator.config.settings import MissingSecretError, Settings
from tests.support.secrets import TEST_SECRETS

#: What a production deployment looks like, secrets apart.
PRODUCTION: dict[str, Any] = {
    "apify_api_url": "https://api.apify.com",
    "public_url": "https://orchestrator.example.com",
    "database_url": "postgresql+psycopg://orchestrator@db.internal/orchestrator",
}
REAL_SECRETS: dict[str, Any] = {
    "webhook_secret": "Zq3" * 15,
    "callback_secret_key": "Kx9" * 15,
    "apify_token": "apify_api_0123456789abcdefghijklmnopqrstuvwxyz",
}


@pytest.fixture(autouse=True)
def no_orchestrator_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test passes counts (a developer's shell may set ORCHESTRATOR_*)."""
    import os

    for name in [n for n in os.environ if n.startswith("ORCHESTRATOR_")]:
        monkeypatch.delenv(name)


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def problems(config: Settings, process: Process = "worker") -> list[str]:
    return [str(finding) for finding in review(config, process).refusals]


def test_production_with_real_secrets_passes() -> None:
    for process in ("api", "worker"):
        found = review(settings(**PRODUCTION, **REAL_SECRETS), process)
        assert found.refusals == () and found.warnings == ()


def test_no_secret_has_a_default_and_each_missing_one_is_named() -> None:
    config = settings(**PRODUCTION)
    assert (config.apify_token, config.webhook_secret, config.callback_secret_key) == (None,) * 3
    assert problems(config) == [
        "ORCHESTRATOR_APIFY_TOKEN is not set",
        "ORCHESTRATOR_WEBHOOK_SECRET is not set",
        "ORCHESTRATOR_CALLBACK_SECRET_KEY is not set",
    ]
    # The API never calls the platform: it is not asked for the Apify token.
    assert problems(config, "api") == [
        "ORCHESTRATOR_WEBHOOK_SECRET is not set",
        "ORCHESTRATOR_CALLBACK_SECRET_KEY is not set",
    ]
    # An empty variable is no secret either.
    assert problems(settings(**PRODUCTION, **(REAL_SECRETS | {"webhook_secret": ""}))) == [
        "ORCHESTRATOR_WEBHOOK_SECRET is not set"
    ]


@pytest.mark.parametrize("name", ["apify_token", "webhook_secret", "callback_secret_key"])
def test_the_public_development_values_are_refused(name: str) -> None:
    public = Settings.DEVELOPMENT_SECRETS[name]
    config = settings(**PRODUCTION, **(REAL_SECRETS | {name: public}))
    assert problems(config) == [
        f"ORCHESTRATOR_{name.upper()} has a public value (it is in the source code)"
    ]


def test_the_emulator_token_is_fine_against_a_local_emulator_only() -> None:
    token = {"apify_token": Settings.DEVELOPMENT_SECRETS["apify_token"]}
    for url in ("http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765"):
        config = settings(**(PRODUCTION | REAL_SECRETS | token | {"apify_api_url": url}))
        assert problems(config) == [], url
    # Anywhere else it is refused (the parametrized test above: api.apify.com).
    remote = settings(**(PRODUCTION | REAL_SECRETS | token | {"apify_api_url": "https://10.0.0.9"}))
    assert problems(remote) == [
        "ORCHESTRATOR_APIFY_TOKEN has a public value (it is in the source code)"
    ]


def test_short_server_keys_are_refused_without_showing_them() -> None:
    short = "s3cr3t-" * 4  # 28 characters
    assert len(short) < MIN_KEY_CHARS
    config = settings(**PRODUCTION, **(REAL_SECRETS | {"callback_secret_key": short}))
    assert problems(config) == [
        f"ORCHESTRATOR_CALLBACK_SECRET_KEY is shorter than {MIN_KEY_CHARS} characters"
    ]
    # The Apify token has the platform's format; its length is not judged.
    assert problems(settings(**PRODUCTION, **(REAL_SECRETS | {"apify_token": "abc"}))) == []


def test_insecure_localhost_callbacks_need_a_loopback_public_url() -> None:
    insecure = PRODUCTION | REAL_SECRETS | {"allow_insecure_callback_localhost": True}
    assert problems(settings(**insecure)) == [
        "ORCHESTRATOR_ALLOW_INSECURE_CALLBACK_LOCALHOST is true while "
        "ORCHESTRATOR_PUBLIC_URL is not a loopback address"
    ]
    for local in ("http://127.0.0.1:8000", "http://localhost:8000", "http://127.0.0.5"):
        assert problems(settings(**(insecure | {"public_url": local}))) == [], local
    for remote in ("http://10.0.0.5:8000", "http://localhost.example.com", "https://[::2]"):
        assert len(problems(settings(**(insecure | {"public_url": remote})))) == 1, remote


def test_the_apify_token_never_travels_in_clear() -> None:
    config = settings(**(PRODUCTION | REAL_SECRETS | {"apify_api_url": "http://api.apify.com"}))
    assert problems(config) == [
        "ORCHESTRATOR_APIFY_API_URL is not https: it would send the Apify token in clear"
    ]
    assert problems(config, "api") == []  # the API sends it nowhere


def test_a_plain_http_public_url_is_only_a_warning() -> None:
    found = review(
        settings(**(PRODUCTION | REAL_SECRETS | {"public_url": "http://orch.example"})), "api"
    )
    assert found.refusals == ()
    assert [str(w) for w in found.warnings] == [
        "ORCHESTRATOR_PUBLIC_URL is not https: platform webhooks carry their tokens in clear"
    ]


def test_the_refusal_names_every_problem_and_no_value() -> None:
    values = {"webhook_secret": Settings.DEVELOPMENT_SECRETS["webhook_secret"], "apify_token": "x"}
    config = settings(
        **(PRODUCTION | values | {"allow_insecure_callback_localhost": True}),
    )
    with pytest.raises(UnsafeSettingsError) as raised:
        check_start(config, "worker")
    message = str(raised.value)
    assert message.startswith("orchestrator worker refuses to start")
    for variable in (
        "ORCHESTRATOR_WEBHOOK_SECRET",
        "ORCHESTRATOR_CALLBACK_SECRET_KEY",
        "ORCHESTRATOR_ALLOW_INSECURE_CALLBACK_LOCALHOST",
        "ORCHESTRATOR_INSECURE_DEV_MODE",  # the way out, named
    ):
        assert variable in message
    assert "APIFY_TOKEN" not in message  # nothing wrong with it
    assert Settings.DEVELOPMENT_SECRETS["webhook_secret"] not in message
    assert len(raised.value.refusals) == 3


def test_development_mode_starts_with_warnings_and_the_public_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = settings(**PRODUCTION, insecure_dev_mode=True)
    with caplog.at_level(logging.WARNING, logger="orchestrator.config.safety"):
        check_start(config, "api")
    logged = caplog.text
    assert "ORCHESTRATOR_INSECURE_DEV_MODE=true: development mode, never in production" in logged
    assert "ORCHESTRATOR_WEBHOOK_SECRET is not set" in logged
    for name in ("apify_token", "webhook_secret", "callback_secret_key"):
        assert config.secret(name) == Settings.DEVELOPMENT_SECRETS[name]
        assert Settings.DEVELOPMENT_SECRETS[name] not in logged


def test_secret_gives_the_value_or_names_the_missing_variable() -> None:
    config = settings(**TEST_SECRETS)
    assert config.secret("webhook_secret") == TEST_SECRETS["webhook_secret"]
    assert config.secret("callback_secret_key") == TEST_SECRETS["callback_secret_key"]
    with pytest.raises(MissingSecretError, match=r"^ORCHESTRATOR_APIFY_TOKEN is not set$"):
        settings().secret("apify_token")
    with pytest.raises(MissingSecretError, match="ORCHESTRATOR_WEBHOOK_SECRET"):
        settings(webhook_secret="").secret("webhook_secret")


def test_secrets_are_hidden_in_the_settings_repr() -> None:
    config = settings(**REAL_SECRETS)
    for value in REAL_SECRETS.values():
        assert value not in repr(config) and value not in str(config)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("LOCALHOST", True),
        (None, False),
        ("", False),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("localhost.example.com", False),
        ("orchestrator.example.com", False),
    ],
)
def test_loopback_hosts(host: str | None, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
