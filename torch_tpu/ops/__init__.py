"""Ops beyond ATen for the ``tpu`` device, published as ``torch.tpu.ops`` (torch_tpu/_public_api.py):
``barrier`` (optimization_barrier), ``pooling`` (max pooling without indices), ``jagged``
(padding helpers of jagged nested tensors), ``collectives`` (dimension-wise all-gather and
reduce-scatter, send and recv), ``attention`` (splash_sdpa), ``ragged`` (ragged_dot for
Mixture-of-Experts layers), ``sparse_dense`` (the sparse_dense_matmul family: DLRM's embedding
lookups and their updates fused with SGD, Adagrad or Adam). Each op is built from existing
lowerings or custom kernels, so Strict, Fused and torch.compile run it alike, and each equals
the same math on CPU tensors."""
