"""Errors a user can fix. The CLI maps them to exit code 2; anything else is an internal error (1)."""


class InputError(ValueError):
    """Bad usage or input. The message names the value, what was expected and the fix."""


class MissingDependency(InputError):
    """An optional dependency is absent; the message gives the exact install line."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise InputError(message)
