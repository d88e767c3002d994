"""Shared pieces of LLM serving on ``tpu``, used by the vLLM (``torch_tpu.vllm``) and SGLang
(``torch_tpu.sglang``) integrations. Neither engine copies the other's code; both build on these:

* ``packing``: the step's integer metadata as one packed int32 buffer - filled on the host with
  NumPy, uploaded once, unpacked on the device as views (float fields travel as their bits).
* ``attention``: causal grouped-query attention over gathered KV windows (paged KV cache in
  device memory; each engine gathers its own layout).
* ``paged_attention``: decode attention read in place from the paged cache (a host kernel on the
  CPU plugin, the gathered formulation elsewhere).
* ``sampler``: vLLM's sampling semantics (greedy, temperature, top-k, top-p, min-p, penalties,
  logit edits, allowed tokens, grammar bitmasks, seeded generators, log-probs) in plain device
  ops with no host read, so it is part of the step program.
* ``rng``: counter-based random numbers (a request's seed and its output position), so sampling
  inside a replayed program is reproducible and needs no generator state.
* ``buckets``: the bucket sizes that bound how many programs a server compiles.
* ``step_state``: what an engine keeps on the device between steps and how a step is planned
  and launched; its programs are ``torch_tpu.captured.CapturedPrograms`` (one per bucket,
  recorded once through Fused Eager, then replayed from C++ with no per-op work).
* ``memory``: the KV-cache budget rule (never more than the host or device can hold).
"""
