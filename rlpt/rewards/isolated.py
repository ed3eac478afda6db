"""A shared process pool for checks that must not run in the caller: math-verify times out with SIGALRM
(main thread only) and some third-party scorers parse policy text with eval; a hung check is killed."""

import concurrent.futures as cf
import multiprocessing as mp

_POOL: cf.ProcessPoolExecutor | None = None
WORKERS = 2


def _pool() -> cf.ProcessPoolExecutor:
    global _POOL
    if _POOL is None:
        # spawn: the caller may hold JAX or threads, which fork would copy in a broken state.
        _POOL = cf.ProcessPoolExecutor(WORKERS, mp_context=mp.get_context("spawn"))
    return _POOL


def _reset_pool() -> None:
    global _POOL
    if _POOL is not None:
        for proc in list(_POOL._processes.values()):  # a hung worker would block shutdown forever
            proc.kill()
        _POOL.shutdown(wait=False, cancel_futures=True)
    _POOL = None


def run_isolated(fn, *args, timeout_s: float):
    """(True, fn(*args)) from a worker process, or (False, 'timeout') after timeout_s (the pool is
    then recycled so the hung worker cannot block later checks). fn must be a module-level function."""
    future = _pool().submit(fn, *args)
    try:
        return True, future.result(timeout=timeout_s)
    except cf.TimeoutError:
        _reset_pool()
        return False, "timeout"
