"""Writes a benchmark's results to benchmarks/results/<name>.json and <name>.md."""

import json
import os
import platform
import time

import torch

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def environment():
    import torch_tpu  # noqa: F401

    props = torch.tpu.get_device_properties(0)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
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
             f"cores, torch {data['environment']['torch']}, plugin {data['environment']['plugin']} "
             f"(PJRT {data['environment']['pjrt_api']}).", ""]
    lines.append("| " + " | ".join(table[0]) + " |")
    lines.append("|" + "---|" * len(table[0]))
    for row in table[1:]:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    lines += [""] + list(notes)
    with open(os.path.join(RESULTS, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
