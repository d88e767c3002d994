"""Runs PyTorch's ModuleInfo database (module_db) on the `tpu` device against the CPU.

    python conformance/module_sweep.py [--modules NAME ...] [--filter TEXT ...] [--exclude TEXT ...]
                                       [--dtypes float32 bfloat16] [--modes train eval no_grad inference_mode]
                                       [--module-budget S] [--module-timeout S] [--json PATH]
                                       [--markdown PATH] [--plugin FILE] [--no-progress] [--list]

Every sample of every ModuleInfo (plus the random modules of conformance/module_extras.py) runs
on the CPU and on the tpu device with the same state dict and inputs, with the CPU fallback
disabled; conformance/module_check.py says what is compared and how each sample is classified
(pass, random, fallback, mismatch, error, skip, truncated). Modules run in worker processes: one
that dies (abort, segfault) or makes no progress for --module-timeout seconds marks the module
it was running as `crash`, and the sweep goes on in a new worker.

Results go to a JSON report (conformance/results/module_sweep.json by default) and, for a full
sweep, to docs/module_coverage.md (conformance/module_report.py regenerates it from the JSON).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run as a script: the `conformance` package lives in ROOT
    sys.path.insert(0, ROOT)

from conformance import module_report  # noqa: E402

DEFAULT_DTYPES = ["float32", "bfloat16"]
ALL_MODES = ["train", "eval", "no_grad", "inference_mode"]
DEFAULT_JSON = module_report.DEFAULT_JSON


def plugin_infos(path):
    """The MODULE_INFOS list of the Python file at `path` (ModuleInfos of your own modules)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("module_sweep_plugin", path)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return list(plugin.MODULE_INFOS)


def all_module_infos(plugin=None):
    """{name: ModuleInfo} for module_db, the extras and the plugin's, in that order."""
    from torch.testing._internal.common_modules import module_db

    from conformance.module_extras import EXTRA_MODULE_DB

    infos = {}
    for info in list(module_db) + EXTRA_MODULE_DB + (plugin_infos(plugin) if plugin else []):
        infos.setdefault(info.name, info)
    return infos


def extra_names():
    from conformance.module_extras import EXTRA_MODULE_DB

    return [info.name for info in EXTRA_MODULE_DB]


def select(names, modules=None, filters=None, excludes=None):
    """The names to run: `modules` exactly (unknown names raise), else those containing any of
    `filters` (all without filters), minus those containing any of `excludes`."""
    if modules:
        unknown = sorted(set(modules) - set(names))
        if unknown:
            raise SystemExit(f"unknown modules: {', '.join(unknown)} (known: {', '.join(names)})")
        chosen = [n for n in names if n in modules]
    else:
        chosen = [n for n in names if not filters or any(f.lower() in n.lower() for f in filters)]
    return [n for n in chosen if not any(x.lower() in n.lower() for x in excludes or [])]


# --------------------------------------------------------------------------- worker side


def worker_main(names, dtypes, modes, budget, progress_path, plugin=None):
    from conformance.opinfo_sweep import _setup_worker_imports

    _setup_worker_imports()  # the package snapshot; no shape-churn warnings
    import warnings

    from conformance.module_check import check_module

    warnings.filterwarnings("ignore")
    infos = all_module_infos(plugin)
    with open(progress_path, "a") as progress:
        for name in names:
            progress.write(json.dumps({"start": name}) + "\n")
            progress.flush()
            result = check_module(infos[name], dtypes, time_budget=budget, modes=modes)
            progress.write(json.dumps({"done": name, "result": result}) + "\n")
            progress.flush()


# --------------------------------------------------------------------------- parent side


def _describe_exit(code, stderr_path):
    if code < 0:
        try:
            why = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            why = f"killed by signal {-code}"
    else:
        why = f"worker exited with {code}"
    try:
        tail = [line for line in open(stderr_path, errors="replace").read().splitlines()
                if line.strip() and "cpu_aot_loader" not in line]
    except OSError:
        tail = []
    return why + (f": {tail[-1].strip()}" if tail else "")


def run_sweep(names, dtypes, modes, budget, module_timeout, progress_bar=True, plugin=None):
    """{name: result} for every name; crashes and hangs are results too."""
    import shutil
    import tempfile

    from conformance.opinfo_sweep import snapshot_package

    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="module_sweep_", dir=os.path.join(ROOT, "build"))
    env = dict(os.environ, TORCH_TPU_SWEEP_SNAPSHOT=snapshot_package(workdir))
    progress_path = os.path.join(workdir, "progress.jsonl")
    stderr_path = os.path.join(workdir, "worker.stderr")
    bar = None
    if progress_bar:
        from tqdm import tqdm

        bar = tqdm(total=len(names), unit="module", file=sys.stderr, dynamic_ncols=True)
    results, remaining = {}, list(names)
    try:
        while remaining:
            for path in (progress_path, stderr_path):
                if os.path.exists(path):
                    os.remove(path)
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--progress", progress_path,
                   "--module-budget", str(budget), "--dtypes", *dtypes, "--modes", *modes, "--modules", *remaining]
            if plugin:
                cmd += ["--plugin", os.path.abspath(plugin)]
            with open(stderr_path, "w") as err:
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)
            current, since, read_upto, why = None, time.time(), 0, None
            while True:
                code = proc.poll()
                if os.path.exists(progress_path):
                    with open(progress_path) as f:
                        f.seek(read_upto)
                        chunk = f.read()
                    # Only complete lines: the worker may be writing the next one.
                    complete = chunk[:chunk.rfind("\n") + 1]
                    read_upto += len(complete)
                    for line in complete.splitlines():
                        rec = json.loads(line)
                        if "start" in rec:
                            current, since = rec["start"], time.time()
                            if bar is not None:
                                bar.set_postfix_str(current)
                        else:
                            results[rec["done"]] = rec["result"]
                            current = None
                            if bar is not None:
                                bar.update(1)
                if code is not None:
                    why = None if code == 0 else _describe_exit(code, stderr_path)
                    break
                if current is not None and time.time() - since > module_timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    why = f"hang: no result after {module_timeout}s (worker killed)"
                    break
                time.sleep(0.2)
            remaining = [n for n in remaining if n not in results]
            if why and current is not None:
                results[current] = {"name": current, "crash": why[:300], "dtypes": {}}
                remaining = [n for n in remaining if n != current]
                if bar is not None:
                    bar.update(1)
            elif remaining and not results:
                raise SystemExit(f"sweep worker failed before running any module: {why}")
            elif remaining and why is None:
                raise SystemExit(f"sweep worker exited without running: {', '.join(remaining)}")
    finally:
        if bar is not None:
            bar.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="*", help="exact module names, e.g. nn.Linear (default: all)")
    parser.add_argument("--filter", nargs="*", help="run modules whose name contains any of these")
    parser.add_argument("--exclude", nargs="*", help="skip modules whose name contains any of these")
    parser.add_argument("--dtypes", nargs="*", default=DEFAULT_DTYPES,
                        help="run each where the ModuleInfo lists it")
    parser.add_argument("--modes", nargs="*", default=ALL_MODES, choices=ALL_MODES)
    parser.add_argument("--module-budget", type=float, default=120.0,
                        help="seconds per module; samples past it count as truncated")
    parser.add_argument("--module-timeout", type=float, default=300.0,
                        help="seconds one module may run before its worker is killed (crash: hang)")
    parser.add_argument("--json", default=DEFAULT_JSON)
    parser.add_argument("--markdown", default=None,
                        help="default: docs/module_coverage.md for a full sweep, none otherwise")
    parser.add_argument("--plugin", help="a Python file whose MODULE_INFOS (ModuleInfo list) join the sweep")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    parser.add_argument("--list", action="store_true", help="print the selected module names and exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        worker_main(args.modules, args.dtypes, args.modes, args.module_budget, args.progress, args.plugin)
        return
    full = not (args.modules or args.filter or args.exclude or args.plugin)
    names = select(list(all_module_infos(args.plugin)), args.modules, args.filter, args.exclude)
    if args.list:
        print("\n".join(names))
        return
    if not names:
        raise SystemExit("no module matches the filters")
    if args.markdown is None and full and args.dtypes == DEFAULT_DTYPES and args.modes == ALL_MODES:
        args.markdown = module_report.DEFAULT_MARKDOWN
    started = time.time()
    results = run_sweep(names, args.dtypes, args.modes, args.module_budget, args.module_timeout,
                        progress_bar=not args.no_progress, plugin=args.plugin)
    totals, samples = module_report.summarize(results)
    report = {"dtypes": args.dtypes, "modes": args.modes, "module_budget": args.module_budget,
              "extras": [n for n in extra_names() if n in results], "totals": totals, "samples": samples,
              "seconds": time.time() - started, "modules": results}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    if args.markdown:
        module_report.write_markdown(args.markdown, report)
    print(json.dumps({"modules": len(names), "totals": totals, "samples": samples,
                      "seconds": round(time.time() - started), "json": args.json}))


if __name__ == "__main__":
    main()
