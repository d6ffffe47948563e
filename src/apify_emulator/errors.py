"""Apify error envelopes: one exception type carrying (HTTP status, error type, message).

Handlers raise `ApiError`; the app turns it into `{"error": {"type", "message"}}`.
The trade-off is that error types are plain strings (the spec's enum has ~390
values) instead of an Enum, so a typo is only caught by tests.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

JSON_MEDIA_TYPE = "application/json; charset=utf-8"


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        headers: dict[str, str] | None = None,
        data: Any = None,
    ) -> None:
        super().__init__(f"{status} {type_}: {message}")
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers or {}
        self.data = data

    def response(self) -> JSONResponse:
        error: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return JSONResponse(
            {"error": error},
            status_code=self.status,
            headers=self.headers,
            media_type=JSON_MEDIA_TYPE,
        )

    @classmethod
    def invalid(cls, message: str) -> ApiError:
        return cls(400, "invalid-input", message)

    @classmethod
    def not_found(cls, message: str, type_: str = "record-not-found") -> ApiError:
        return cls(404, type_, message)

    @classmethod
    def run_not_found(cls) -> ApiError:
        return cls.not_found("Actor run was not found")

    @classmethod
    def actor_not_found(cls, type_: str = "record-not-found") -> ApiError:
        return cls.not_found("Actor was not found", type_)

    @classmethod
    def dataset_not_found(cls) -> ApiError:
        return cls.not_found("Dataset was not found")
