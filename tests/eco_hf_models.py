"""Tiny Hugging Face Transformers models (hidden 64, 2 layers, vocabulary 128) built from configs
only, for the Transformers integration tests. Nothing is downloaded."""


# Offline: tests/conftest.py sets HF_HUB_OFFLINE and friends for every test and subprocess.

import torch  # noqa: E402
import transformers  # noqa: E402

VOCAB = 128

# Decoder attention: 4 query heads sharing 2 key/value heads (grouped-query attention).
_DECODER = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    # No special tokens: greedy generation always runs for max_new_tokens.
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=0,
)


def _config(name):
    if name == "llama":
        return transformers.LlamaConfig(**_DECODER)
    if name == "qwen3":
        return transformers.Qwen3Config(head_dim=16, **_DECODER)
    if name == "qwen3_moe":
        # Every layer sparse: 4 experts, 2 per token; experts run through torch._grouped_mm.
        return transformers.Qwen3MoeConfig(
            head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, **_DECODER
        )
    if name == "gpt2":
        return transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=None, eos_token_id=None
        )
    if name == "bert":
        return transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64,
        )
    raise ValueError(f"no tiny config named {name!r}")


_CLASSES = {
    "llama": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "bert": "BertForMaskedLM",
}

NAMES = ("llama", "qwen3", "gpt2", "bert")


def model_class(name):
    return getattr(transformers, _CLASSES[name])


def tiny_model(name, seed=0, **config_overrides):
    """A freshly initialised float32 CPU model in eval mode, the same weights for the same seed."""
    config = _config(name)
    for key, value in config_overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    return model_class(name)(config).eval()


def token_ids(batch, length, seed=1):
    """Random token ids (never the pad id 0)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=generator)
