"""Domain errors: raised by services, turned into `{message, extra}` 400 responses by the API."""
from typing import Any


class ApplicationError(Exception):
    """A request that breaks a business rule; `fields` maps input fields to what is wrong with them."""

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = {"fields": fields, **extra} if fields else extra

    @classmethod
    def for_field(cls, field: str, message: str) -> "ApplicationError":
        return cls(message, fields={field: [message]})
