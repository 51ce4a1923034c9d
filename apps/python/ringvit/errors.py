"""errors.py: the package's exception, ringvit.Error, raised with the library's
message (rv_last_error) when a libringvit call fails. Bad arguments are caught in
Python first and raise ValueError (or TypeError) before any C call."""

_STATUS_NAMES = {
    -1: "invalid argument",
    -2: "out of memory",
    -3: "i/o error",
    -4: "bad format",
    -5: "unsupported",
    -6: "timeout",
    -7: "communication error",
    -8: "backend error",
    -9: "internal error",
}


class Error(RuntimeError):
    """A libringvit call failed. str(e) is the library's message;
    e.status is the rv_status code (negative int), e.status_name its name."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status
        self.status_name = _STATUS_NAMES.get(status, "error") if status is not None else None


class LibraryNotFoundError(Error):
    """libringvit could not be loaded; the message lists every place looked."""
