"""Online serving: four servers behind the same load generator over HTTP.

Run with the serving environment:  .venv-serve/bin/python benchmarks/serving_online.py
(options: --models tiny,100m --concurrency 1,8,32 --rounds 2 --input-len 32 --output-len 64
--servers vllm-tpu,vllm-cpu,sglang-tpu,sglang-cpu).

Servers (one model at a time, all four up together; an idle one sleeps):
  vllm-tpu    `vllm serve` on tpu (torch_tpu's step runner: one program per step)
  vllm-cpu    `vllm serve` with vLLM's own CPU engine (its C++/oneDNN kernels, enforce-eager)
  sglang-tpu  `python -m sglang.launch_server` on tpu (torch_tpu's SGLang platform)
  sglang-cpu  SGLang on the host CPU through an out-of-tree CPU platform with SGLang's own
              torch_native attention and PyTorch sampler (benchmarks/sglang_cpu/)
The load generator is vLLM's `vllm bench serve` (random token prompts, offline; OpenAI
completions endpoint, streaming) for every server. Per model, round and concurrency the servers
take turns (the order alternates between rounds); each measured run follows a warm-up run of the
same load, so programs compile before it. Reported: output tokens/s, time to first token and
inter-token latency (p50 / p99), medians over the rounds. Models are random-weight Llamas built
from configs with a word-level tokenizer, saved locally; float32 everywhere.
Results: benchmarks/results/serving_online.{json,md,svg}.
"""

import argparse
import contextlib
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = pathlib.Path(sys.executable).parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
from vllm_throughput import MODELS  # noqa: E402

KV_BYTES = 512 * 1024 * 1024
METRICS = ["output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms"]


def save_model(name, root):
    import torch
    import transformers
    from vllm_assets import save_word_tokenizer

    path = root / name
    config = transformers.LlamaConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, **MODELS[name])
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(path, safe_serialization=True)
    save_word_tokenizer(path, vocab_size=config.vocab_size)
    return path


def cpu_platform_dir(root):
    """SGLang's CPU contender as an installed-looking plugin: its module and an entry point."""
    d = root / "sglang_cpu_oot"
    dist = d / "sglang_cpu_oot-0.0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-cpu-oot\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text("[sglang.srt.platforms]\nbench_cpu = sglang_cpu_platform:activate\n")
    (d / "sglang_cpu_platform.py").write_text((HERE / "sglang_cpu" / "sglang_cpu_platform.py").read_text())
    return d


def server_command(kind, model, port, max_len, oot_dir, stats_path):
    common_env = dict(os.environ, **OFFLINE)
    common_env.pop("PYTHONPATH", None)
    if kind.endswith("-tpu"):
        common_env["TORCH_TPU_SERVING_STATS"] = str(stats_path)  # the step runner's counters
    if kind.startswith("vllm"):
        cmd = [str(BIN / "vllm"), "serve", str(model), "--served-model-name", "m", "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-num-seqs", "32", "--max-model-len", str(max_len),
               "--kv-cache-memory-bytes", str(KV_BYTES), "--no-enable-prefix-caching"]
        if kind == "vllm-cpu":
            cmd.append("--enforce-eager")
            common_env.update(TORCH_TPU_VLLM="0", VLLM_TARGET_DEVICE="cpu")
        return cmd, common_env
    cmd = [str(BIN / "python"), "-m", "sglang.launch_server", "--model-path", str(model), "--served-model-name", "m",
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-running-requests", "32",
           "--context-length", str(max_len), "--disable-radix-cache",
           # its torch.distributed store: a port of our block, not a random one two servers may share
           "--nccl-port", str(port + 10)]
    if kind == "sglang-cpu":
        cmd += ["--max-total-tokens", str(KV_BYTES // _token_bytes(model))]
        common_env.update(TORCH_TPU_SGLANG="0", PYTHONPATH=str(oot_dir))
    else:
        common_env["TORCH_TPU_KVCACHE_SPACE"] = str(KV_BYTES / 2**30)
    return cmd, common_env


def _token_bytes(model):
    cfg = json.loads((pathlib.Path(model) / "config.json").read_text())
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head * 4


def _port_free(port) -> bool:
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_block(start, count, width=50):
    """``count`` ports ``width`` apart with the ``width`` ports after each free (SGLang takes a few
    ports after its own for its processes)."""
    ports, port = [], start
    while len(ports) < count:
        if all(_port_free(p) for p in range(port, port + width)):
            ports.append(port)
        port += width
    return ports


class Server:
    def __init__(self, kind, model, port, max_len, oot_dir, log_dir):
        if not _port_free(port):
            raise RuntimeError(f"port {port} is taken: another server is running")
        self.stats_path = log_dir / f"{kind}.stats.json"
        cmd, env = server_command(kind, model, port, max_len, oot_dir, self.stats_path)
        self.kind, self.port = kind, port
        self.log = open(log_dir / f"{kind}.log", "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=log_dir,
                                     start_new_session=True)

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.flush()
                tail = pathlib.Path(self.log.name).read_text()[-4000:]
                raise RuntimeError(f"{self.kind} exited; the end of its log:\n{tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(2)
        raise RuntimeError(f"{self.kind} did not become healthy in {timeout} s; see {self.log.name}")

    def programs(self):
        """(step programs captured, step programs compiled in the background, seconds the server
        spent in captures) by the tpu server's process so far - a capture whose program is in the
        disk cache or was compiled in the background compiles nothing; None for the CPU engines."""
        if not self.kind.endswith("-tpu"):
            return None
        if not self.stats_path.exists():
            return (0, 0, 0.0)
        stats = json.loads(self.stats_path.read_text())
        return (stats["captures"], stats["background_compiles"], stats["capture_seconds"])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()


def load(port, model, concurrency, args, out_dir, label):
    """One `vllm bench serve` run; its result JSON."""
    n = max(8, 4 * concurrency)
    result = out_dir / f"{label}.json"
    cmd = [str(BIN / "vllm"), "bench", "serve", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
           "--endpoint", "/v1/completions", "--model", "m", "--tokenizer", str(model), "--dataset-name", "random",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
           "--num-prompts", str(n), "--max-concurrency", str(concurrency), "--request-rate", "inf", "--ignore-eos",
           "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99", "--save-result",
           "--result-dir", str(out_dir), "--result-filename", result.name, "--disable-tqdm", "--seed", "0"]
    env = dict(os.environ, **OFFLINE)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=out_dir)
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"vllm bench serve against {label} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    data = json.loads(result.read_text())
    if data.get("failed", 0):
        raise RuntimeError(f"{label}: {data['failed']} requests failed")
    return {k: data[k] for k in METRICS}


@contextlib.contextmanager
def _work_dir(keep):
    if keep:
        path = pathlib.Path(keep)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="serving_online_") as tmp:
        yield pathlib.Path(tmp)


def _terminate(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")  # runs the finally blocks: servers are stopped


def main():
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,100m")
    parser.add_argument("--servers", default="vllm-tpu,vllm-cpu,sglang-tpu,sglang-cpu")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per load run")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (models, server logs, stats)")
    args = parser.parse_args()
    kinds = args.servers.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = [["model", "concurrency", "server", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms",
             "tok/s vs same engine on CPU", "measured runs: step programs captured / compiled in the background / s in captures"]]
    data, plot = {"runs": []}, {}
    with _work_dir(args.keep) as tmp:
        oot = cpu_platform_dir(tmp)
        for name in args.models.split(","):
            model = save_model(name, tmp)
            max_len = MODELS[name]["max_position_embeddings"]
            ports = free_port_block(31500, len(kinds))
            servers = []
            try:
                for kind, port in zip(kinds, ports):
                    servers.append(Server(kind, model, port, max_len, oot, tmp))
                for s in servers:
                    s.wait(args.timeout)
                results = {(s.kind, c): [] for s in servers for c in levels}
                new_programs = {(s.kind, c): [0, 0, 0.0] for s in servers for c in levels}
                for r in range(args.rounds):
                    for c in levels:
                        for s in (servers if r % 2 == 0 else servers[::-1]):
                            label = f"{name}_{s.kind}_c{c}_r{r}"
                            if r == 0:
                                load(s.port, model, c, args, tmp, label + "_warmup")
                            before = s.programs()
                            results[(s.kind, c)].append(load(s.port, model, c, args, tmp, label))
                            if before is not None:
                                for i, (b, a) in enumerate(zip(before, s.programs())):
                                    new_programs[(s.kind, c)][i] += a - b
                            print(f"{label}: {results[(s.kind, c)][-1]}", flush=True)
            finally:
                for s in servers:
                    s.stop()
            for c in levels:
                for kind in kinds:
                    med = {m: statistics.median(x[m] for x in results[(kind, c)]) for m in METRICS}
                    base = kind.replace("-tpu", "-cpu")
                    ratio = "-"
                    if kind.endswith("-tpu") and (base, c) in results:
                        ref = statistics.median(x["output_throughput"] for x in results[(base, c)])
                        ratio = f"{med['output_throughput'] / ref:.2f}x"
                    rows.append([name, c, kind, f"{med['output_throughput']:.1f}", f"{med['p50_ttft_ms']:.1f}",
                                 f"{med['p99_ttft_ms']:.1f}", f"{med['p50_itl_ms']:.2f}", f"{med['p99_itl_ms']:.2f}", ratio,
                                 "{} / {} / {:.2f}".format(*new_programs[(kind, c)]) if kind.endswith("-tpu") else "-"])
                    data["runs"].append({"model": name, "concurrency": c, "server": kind, **med,
                                         "captured_background_capture_seconds_in_measured_runs": new_programs[(kind, c)],
                                         "rounds": results[(kind, c)]})
                    plot.setdefault(name, {}).setdefault(kind, []).append((c, med["output_throughput"]))
    data["settings"] = {"input_len": args.input_len, "output_len": args.output_len, "rounds": args.rounds,
                        "concurrency": levels, "prompts_per_run": "max(8, 4 x concurrency)", "dtype": "float32"}
    notes = [
        f"`vllm bench serve` (random dataset: {args.input_len} input / {args.output_len} output tokens, "
        "ignore_eos, streaming completions) against each server on 127.0.0.1; max(8, 4 x concurrency) prompts "
        f"per run; medians of {args.rounds} rounds with the servers taking turns, each after a warm-up run of the "
        "same load; prefix/radix caching off; float32; random-weight Llamas with a word-level tokenizer.",
        "tpu is XLA's CPU PJRT plugin on the same 2 cores: the servers share the machine with the load generator.",
        "measured runs: step programs the tpu server captured during the measured runs, the step programs it "
        "compiled on its worker thread while a covering bucket served their steps (their captures then compile "
        "nothing), and the seconds its serving thread spent in captures (recording, plus compiling when a step "
        "had no compiled cover: the server's stalls).",
        "sglang-cpu: SGLang on the host through an out-of-tree CPU platform with SGLang's torch_native attention "
        "(benchmarks/sglang_cpu/; SGLang's own CPU engine needs a source build of sgl_kernel).",
    ]
    if args.no_write:
        for row in rows:
            print(" | ".join(str(c) for c in row))
        return
    from _results import write
    from _svg_plot import line_chart

    write("serving_online", "Online serving over HTTP: vLLM and SGLang on tpu and on the CPU", data, rows, notes)
    for name, series in plot.items():
        line_chart(str(HERE / "results" / f"serving_online_{name}.svg"), f"Output tokens/s over HTTP, {name} model",
                   "concurrency", "output tokens/s", series, x_ticks=[(c, str(c)) for c in levels])


if __name__ == "__main__":
    main()
