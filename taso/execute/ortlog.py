"""onnxruntime's own log lines (its red ``[E:onnxruntime:...]`` on stderr): off unless asked for.

subst runs onnxruntime where a failure is expected and handled (a constant subgraph it cannot evaluate alone is
kept as it is, a unit that cannot run alone is estimated): onnxruntime logs each such failure before it comes
back as an exception, and those lines reached stderr on runs that succeeded. Every session subst makes takes its
options from `session_options`, at `QUIET` unless `set_verbose` asked for `VERBOSE` (the CLI's ``--verbose``).
"""

from __future__ import annotations

from typing import Any

QUIET = 4
"""onnxruntime's severity for fatal errors only: what it would log, subst reports itself or handles."""
VERBOSE = 2
"""Its warnings and errors: for a user who wants to see what onnxruntime says of the models subst runs."""

_severity = QUIET


def set_verbose(verbose: bool) -> None:
    """Log onnxruntime's warnings and errors from now on (``verbose``), or only what is fatal."""
    global _severity
    _severity = VERBOSE if verbose else QUIET


def session_options() -> Any:  # onnxruntime.SessionOptions: onnxruntime is imported only when a session is made
    """Fresh session options at the severity asked for; onnxruntime's process-wide logger (which logs what no
    session owns) set to it as well. Their threads wait without spinning: these sessions compute (the check,
    folds, the float64 reference), none is timed, and spinning threads only burned CPU beside them (the timed
    ones, `taso.cost.profiler`, turn spinning off too)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(_severity)
    opts = ort.SessionOptions()
    opts.log_severity_level = _severity
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts
