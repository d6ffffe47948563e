"""The one error path: every domain error code has an HTTP status in ``api.errors``, and no
module builds a problem response by hand."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import orchestrator
from orchestrator.api.errors import STATUS_OF_CODE, problem_for
from orchestrator.domain.errors import DomainError
from orchestrator.service.errors import Unauthorized, WebhookUnauthorized

SRC = Path(orchestrator.__file__).parent


def _all_subclasses(cls: type[DomainError]) -> set[type[DomainError]]:
    found: set[type[DomainError]] = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _all_subclasses(sub)
    return found


def test_every_error_code_has_a_status_and_the_domain_carries_none() -> None:
    # Import every module but the migrations (Alembic scripts) so every error type exists.
    for module in pkgutil.walk_packages([str(SRC)], prefix="orchestrator."):
        if ".migrations" not in module.name:
            importlib.import_module(module.name)
    errors = _all_subclasses(DomainError)
    assert len(errors) >= 15
    for error in errors:
        assert error.code in STATUS_OF_CODE, error
        assert not hasattr(error, "status"), f"{error.__name__} carries an HTTP status"


def test_only_api_key_refusals_carry_a_bearer_challenge() -> None:
    assert "Bearer" in problem_for(Unauthorized("x")).headers["www-authenticate"]
    refused = problem_for(WebhookUnauthorized("x"))
    assert refused.status_code == 401 and "www-authenticate" not in refused.headers


def test_no_problem_response_is_built_outside_the_error_module() -> None:
    call = re.compile(r"\bproblem\(")
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path != SRC / "api" / "errors.py" and call.search(path.read_text())
    ]
    assert offenders == []
