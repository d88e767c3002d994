"""Offline assets for the serving tests and benchmarks: a word-level tokenizer with a chat template, saved
next to a tiny model so `vllm serve` can run its completions and chat endpoints."""

import json

VOCAB_SIZE = 256
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def save_word_tokenizer(path, vocab_size=VOCAB_SIZE):
    """Ids 0-3 are specials, 4 .. vocab_size-5 the words w4 ... , the last 4 the chat
    template's words (user, assistant, system, ':')."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = SPECIALS + [f"w{i}" for i in range(len(SPECIALS), vocab_size - 4)]
    words += ["user", "assistant", "system", ":"]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    # Older Transformers (the serving environment's) read the template from this file too.
    (path / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return fast


if __name__ == "__main__":  # debugging aid
    import pathlib
    import sys

    t = save_word_tokenizer(pathlib.Path(sys.argv[1]))
    print(json.dumps(t("w5 w9 : user").input_ids))
