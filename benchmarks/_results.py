"""Writes a benchmark's results to benchmarks/results/<name>.json and <name>.md."""

import json
import os
import platform
import time

import torch

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def cpu_model():
    """The CPU's model name and its widest vector units ("AMD EPYC (avx2)"): ratios against PyTorch's
    CPU kernels move with them (Inductor and oneDNN use AVX-512 and AMX where there are)."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    units = [u for u in ("avx2", "avx512f", "amx_tile") if u in flags]
    return f"{name} ({', '.join(units)})" if units else name


def environment():
    import torch_tpu  # noqa: F401

    props = torch.tpu.get_device_properties(0)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
        "cpu": cpu_model(),
        "plugin": os.path.basename(props.plugin),
        "pjrt_api": props.pjrt_api_version,
        "device": props.name,
    }


def write(name, title, data, table, notes=()):
    """`table` is a list of rows (the first is the header); `notes` are markdown lines."""
    os.makedirs(RESULTS, exist_ok=True)
    data = {"benchmark": name, "environment": environment(), **data}
    with open(os.path.join(RESULTS, name + ".json"), "w") as f:
        json.dump(data, f, indent=2)
    lines = [f"# {title}", "", f"Measured {data['environment']['date']} on {data['environment']['cpu_cores']} CPU "
             f"cores ({data['environment']['cpu']}), torch {data['environment']['torch']}, plugin {data['environment']['plugin']} "
             f"(PJRT {data['environment']['pjrt_api']}).", ""]
    lines.append("| " + " | ".join(table[0]) + " |")
    lines.append("|" + "---|" * len(table[0]))
    for row in table[1:]:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    lines += [""] + list(notes)
    with open(os.path.join(RESULTS, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
