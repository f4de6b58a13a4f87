"""One error type for everything a user can get wrong; main() renders it as two lines."""

from __future__ import annotations

# Exit codes (docs/cli.md): 0 ok, 1 runtime error, 2 usage error, 3 plan does not fit.
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_NO_FIT = 3


class HomespecError(Exception):
    """A failure the user can act on: `message` says what, `hint` says what to do."""

    def __init__(self, message: str, hint: str = "", exit_code: int = EXIT_RUNTIME):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class UsageError(HomespecError):
    """Bad input on the command line (unknown name, absurd number): exit 2."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message, hint, exit_code=EXIT_USAGE)


class FormatError(HomespecError):
    """A model file that cannot be read (truncated, corrupt, not the claimed format): exit 1."""


class ContractError(HomespecError, ValueError):
    """A call that breaks a documented contract between homespec's own parts (the Backend and
    Drafter protocols): a commit with no verified tree, a rollback past the start. A bug in the
    caller, not bad user input: exit 1. Also a ValueError, as such violations were before."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message, hint, exit_code=EXIT_RUNTIME)


class TreeError(ContractError):
    """A draft tree or committed path that breaks the tree contract (homespec.contracts.tree):
    every backend, verifier and drafter raises this one type for it."""
