"""The one exception type the worker API turns into a ``{"error": code, "message": ...}`` response."""
from __future__ import annotations


class ApiError(Exception):
    """A request the server refuses; nothing was stored."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 retry_after_s: float | None = None, setting: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}  # e.g. Retry-After on a 429
        # Retry-After counts whole seconds; clients that can wait a fraction of one read this instead.
        self.retry_after_s = retry_after_s
        # For a limit: the setting that lifts it, for whoever runs the study (the JSON's "setting", a
        # line of the HTML error page).
        self.setting = setting

    def to_dict(self) -> dict[str, str | float]:
        body: dict[str, str | float] = {"error": self.code, "message": self.message}
        if self.retry_after_s is not None:
            body["retry_after_s"] = round(self.retry_after_s, 3)
        if self.setting is not None:
            body["setting"] = self.setting
        return body


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


def reject_unknown(body: dict, known) -> None:
    """A 400 naming the fields of ``body`` outside ``known``: a typo must not be silently ignored."""
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise invalid(f"unknown field(s): {', '.join(unknown)}")
