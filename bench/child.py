"""A step of a benchmark in a process of its own, killed past its time: a hang or a crash in torch or onnxruntime
(a segfault takes the process with it) costs the step's row, not the run. A module apart from bench/bench_fresh.py,
which uses it, so that a child imports no more than its step needs.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection


def _call(conn: Connection, fn: Callable[..., dict], args: tuple) -> None:
    """In the child: ``fn(*args)``, or its exception as the row's error, sent back."""
    try:
        out = fn(*args)
    except Exception as e:  # anything the child raises is a result to record
        out = {"error": f"{type(e).__name__}: {e}"[:1000]}
    conn.send(out)
    conn.close()


def in_child(fn: Callable[..., dict], args: tuple, timeout: float) -> dict:
    """``fn(*args)`` in a fresh process ("spawn": no CUDA state inherited), or ``{"error": ...}`` saying why
    not: its exception, its death (a crash in onnxruntime) or ``timeout`` seconds passed (it is killed)."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_call, args=(send, fn, args))
    child.start()
    send.close()
    try:
        if receive.poll(timeout):
            return receive.recv()
        return {"error": f"timed out after {timeout:g} s"}
    except EOFError:
        child.join(5)
        return {"error": f"the process died (exit {child.exitcode})"}
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
