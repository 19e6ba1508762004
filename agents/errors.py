"""Errors services raise; views map them to HTTP statuses."""

from __future__ import annotations


class ServiceError(Exception):
    status = 400

    def __init__(self, message: str, *, current: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.current = current  # the current state, for a 409 body


class Conflict(ServiceError):
    """The request no longer fits the state (decided, expired, changed...)."""

    status = 409


class Forbidden(ServiceError):
    status = 403


class Invalid(ServiceError):
    status = 400
