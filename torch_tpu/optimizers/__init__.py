"""``torch.tpu.optimizers``: the original TorchTPU's functional optimizers (``AdamW``, ``Sgd``,
``Muon``, their base ``Optimizer``) and ``SingleTraceTrainer``, which runs a whole training step -
forward, loss, backward and the optimizer update - as one device program.

An optimizer holds only its hyperparameters; ``init_param_group(model_or_params)`` makes the
state it updates (a ``ParamGroup``: the parameters - the model's own tensors, so updates land in
the model - and device tensors for moments and step counts), and ``step(group, grads)`` updates
it in place with plain tensor ops and no host read, so the update can be captured into the
step's program. Results equal ``torch.optim``'s on the CPU (tests)."""
