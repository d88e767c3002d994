"""Turning a StableHLO module (JAX's lowering, or hand-written text) into functions that can be
added to another module: every function symbol gets a prefix unique to the kernel, the entry
function becomes private, and the module wrapper goes. Also finds the custom_call targets a
module needs. Pure text processing: no MLIR bindings and no JAX needed."""

import hashlib
import re

_FUNC_DEF = re.compile(r"func\.func\s+(?:(?:public|private|nested)\s+)?@([A-Za-z_][\w$.]*)")
_FUNC_DEF_KW = re.compile(r"func\.func\s+(public|private|nested)\s+@")
_CUSTOM_CALL = re.compile(r"custom_call\s*@([\w$.\-]+)|call_target_name\s*=\s*\"([^\"]+)\"")
_RESULT_INFO = re.compile(r"\s*\{jax\.result_info\s*=\s*\"[^\"]*\"\}")
_LOC = re.compile(r"\s*loc\((?:[^()]|\([^()]*\))*\)")


_ELEMENT = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64",
    "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "ui8", "bool": "i1",
    "complex64": "complex<f32>", "complex128": "complex<f64>",
}


def tensor_type(shape, dtype, who):
    """The MLIR type of a tensor of ``shape`` and torch ``dtype`` (``who`` names the caller in
    the error for a dtype without one)."""
    name = str(dtype).replace("torch.", "")
    if name not in _ELEMENT:
        raise TypeError(f"{who}: unsupported dtype {dtype}")
    return "tensor<" + "".join(f"{d}x" for d in shape) + _ELEMENT[name] + ">"


def parse_tensor_type(text, who):
    """(shape, torch dtype) of an MLIR ranked tensor type: ``tensor<2x3xf32>`` -> ((2, 3), float32)."""
    import torch

    inner = text.strip()[len("tensor<"):-1]
    *dims, element = inner.split("x")
    names = {v: k for k, v in _ELEMENT.items()}
    if element not in names:
        raise TypeError(f"{who}: unsupported result type {text}")
    return tuple(int(d) for d in dims), getattr(torch, names[element])


def text_hash(text):
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _module_body(text):
    """The text inside ``module ... { ... }`` (the text itself when it has no module wrapper)."""
    lines = [ln for ln in text.strip().splitlines() if not ln.lstrip().startswith("#loc")]
    if lines and lines[0].lstrip().startswith("module"):
        if not lines[0].rstrip().endswith("{"):
            raise ValueError("expected the module header on one line, ending with '{'")
        body = lines[1:]
        while body and not body[-1].strip():
            body.pop()
        if not body or not body[-1].strip().startswith("}"):
            raise ValueError("the module's closing '}' is missing")
        body = body[:-1]
        return "\n".join(body)
    return "\n".join(lines)


def function_names(text):
    return _FUNC_DEF.findall(text)


def custom_call_targets(text):
    return sorted({a or b for a, b in _CUSTOM_CALL.findall(text)})


def prepare(text, prefix, entry="main"):
    """(symbol of the entry function, text of all functions) with every symbol prefixed."""
    body = _module_body(text)
    names = function_names(body)
    if entry not in names:
        raise ValueError(f"the module has no function @{entry} (functions: {', '.join(names) or 'none'})")
    body = _LOC.sub("", body)
    body = _RESULT_INFO.sub("", body)
    # Longest names first, whole symbols only (@main must not touch @main_1).
    for name in sorted(set(names), key=len, reverse=True):
        body = re.sub(r"@" + re.escape(name) + r"(?![\w$.])", f"@{prefix}_{name}", body)
    body = _FUNC_DEF_KW.sub("func.func private @", body)
    body = re.sub(r"func\.func\s+@", "func.func private @", body)
    return f"{prefix}_{entry}", body
