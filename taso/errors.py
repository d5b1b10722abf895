"""The two ways subst refuses: input it cannot use (exit 2) and a check that failed (exit 1)."""


class BadInput(Exception):
    """The user's input cannot be used: missing, corrupt, unsupported or unsafe. One line says why."""


class CheckFailed(Exception):
    """A result failed a check (e.g. the rewritten model's outputs differ): nothing was written."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report
