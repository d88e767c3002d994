"""Device assertions (``torch._assert_async``) in compiled graphs.

A captured program is replayed without running any aten kernel, so an assertion left inside it
would be checked only on the call that captured it. Instead each assertion is taken out of the
ATen graph and its condition becomes an extra graph output (computed inside the one program);
after every call - captured, replayed or op by op - the conditions go to the eager tpu kernel,
which queues the check without waiting for the device (csrc/aten/assert_ops.cc). A failing
assertion therefore raises at the next synchronization, as in eager mode and on CUDA.
"""

import torch

_aten = torch.ops.aten
# (op, index of the message argument or None, index of the dep token the op returns or None)
_ASSERT_OPS = {
    _aten._assert_async.default: (None, None),
    _aten._assert_async.msg: (1, None),
    _aten._functional_assert_async.msg: (1, 2),
}


# The CPU kernel's message for a false _assert_async without one.
_CPU_DEFAULT_MESSAGE = "Expected Tensor with single nonzero value, but got zero"


def keep_asserts_without_message(gm):
    """Gives ``torch._assert_async(cond)`` in a Dynamo graph the CPU kernel's message.

    AOTAutograd drops ``aten._assert_async.default`` as dead code (only the ``.msg`` overload is
    marked side-effectful), so without a message the assertion would never be checked."""
    changed = False
    for node in gm.graph.nodes:
        if (node.op == "call_function" and node.target in (torch._assert_async, _aten._assert_async.default)
                and len(node.args) == 1 and not node.kwargs):
            node.target = _aten._assert_async.msg
            node.args = (node.args[0], _CPU_DEFAULT_MESSAGE)
            changed = True
    if changed:
        gm.recompile()


def _arg(node, index, name):
    if index is None:
        return None
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name)


def hoist_asserts(gm):
    """Removes the assertions of ``gm`` (in place) and appends their conditions to its outputs.

    Returns the messages, one per appended output (None for ``_assert_async`` without one)."""
    graph = gm.graph
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    conditions, messages = [], []
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _ASSERT_OPS:
            continue
        msg_index, token_index = _ASSERT_OPS[node.target]
        if token_index is not None:
            # The functional form returns a new dep token: later uses take the one it was given.
            node.replace_all_uses_with(_arg(node, token_index, "dep_token"))
        conditions.append(node.args[0])
        messages.append(_arg(node, msg_index, "assert_msg"))
        graph.erase_node(node)
    if conditions:
        outs = output.args[0]
        outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        output.args = (outs + tuple(conditions),)
        graph.lint()
        gm.recompile()
    return messages


def check_conditions(outs, messages):
    """Splits the appended conditions off ``outs`` and queues their assertions; returns the rest."""
    if not messages:
        return outs
    outs = list(outs)
    conditions = outs[len(outs) - len(messages):]
    del outs[len(outs) - len(messages):]
    for condition, message in zip(conditions, messages):
        if message is None:
            _aten._assert_async.default(condition)
        else:
            _aten._assert_async.msg(condition, message)
    return outs
