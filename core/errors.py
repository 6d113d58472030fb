"""Domain errors: raised by services, turned into `{message, extra}` responses by the API (400, or 409 for a
conflict with the current state)."""
from typing import Any


class ApplicationError(Exception):
    """A request that breaks a business rule; `fields` maps input fields to what is wrong with them."""

    status = 400

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = {"fields": fields, **extra} if fields else extra

    @classmethod
    def for_field(cls, field: str, message: str) -> "ApplicationError":
        return cls(message, fields={field: [message]})


class Conflict(ApplicationError):
    """A well-formed request the current state refuses: the object is in use, in the wrong state, or its name
    is kept; the same request can succeed once the state changes (HTTP 409)."""

    status = 409
