"""Local stand-ins for torchtitan's downloaded assets: a word-level tokenizer saved the way its
HuggingFaceTokenizer loads it (tokenizer.json + tokenizer_config.json), and JSON-lines text
datasets that its ``c4_test`` loader reads from a local folder (``dataloader.dataset_path``).

Every document is exactly ``seq_len - 1`` words, so with BOS and EOS it packs into exactly one
training sample: batches then line up document by document, which lets a 2-rank run be compared
with a 1-rank run over the same documents."""

import json
import os
import random

BOS, EOS, UNK = "<|begin_of_text|>", "<|end_of_text|>", "<unk>"


def write_tokenizer(folder, n_words=120):
    """A WordLevel tokenizer over ``w0 .. w{n_words-1}`` (ids stay far below the model's vocab)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {UNK: 0, BOS: 1, EOS: 2}
    vocab.update({f"w{i}": i + 3 for i in range(n_words)})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "unk_token": UNK,
                   "add_bos_token": True, "add_eos_token": True}, f)
    return folder


def make_documents(count, seq_len, n_words=120, seed=0):
    """Documents from a sparse Markov chain (each word has 3 likely successors), so a model can
    learn them and the loss falls within a few steps."""
    rng = random.Random(seed)
    successors = {w: rng.sample(range(n_words), 3) for w in range(n_words)}
    docs = []
    for _ in range(count):
        word = rng.randrange(n_words)
        words = []
        for _ in range(seq_len - 1):
            words.append(f"w{word}")
            word = rng.choice(successors[word])
        docs.append(" ".join(words))
    return docs


def write_dataset(folder, docs):
    """``folder/train.jsonl`` with one {"text": ...} per document, in order."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train.jsonl"), "w") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")
    return folder


def interleave_for_ranks(docs, world_size, local_batch):
    """The order a single rank must read ``docs`` in so that its batch of ``world_size *
    local_batch`` at every step holds exactly the documents the ``world_size`` ranks read at that
    step (datasets' split_dataset_by_node gives each rank a contiguous shard)."""
    shard = len(docs) // world_size
    shards = [docs[r * shard:(r + 1) * shard] for r in range(world_size)]
    ordered = []
    for start in range(0, shard, local_batch):
        for r in range(world_size):
            ordered.extend(shards[r][start:start + local_batch])
    return ordered
