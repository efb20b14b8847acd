"""The one exception type the worker API turns into a ``{"error": code, "message": ...}`` response."""
from __future__ import annotations


class ApiError(Exception):
    """A request the server refuses; nothing was stored."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)
