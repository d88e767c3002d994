"""Independent subprocess jobs of one test run side by side: each such job here (a vLLM engine, a
torchtitan run, an interpreter importing SGLang) spends its first ~12-16 s importing its framework
on one core, so two of them together finish well before two in turn on a 2-core machine."""

from concurrent.futures import ThreadPoolExecutor


def side_by_side(fn, *jobs):
    """fn(*args, **kwargs) for each (args, kwargs) of `jobs`, each on its own thread; returns the
    results in the jobs' order, or raises the first job's failure once all have ended."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(fn, *args, **kwargs) for args, kwargs in jobs]
        return [f.result() for f in futures]
