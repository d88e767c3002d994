"""OpenAI-client side of tests/test_vllm_tpu.py's `vllm serve` test (runs in .venv-serve).

usage: vllm_client.py BASE_URL MODEL PROMPT_IDS_JSON MAX_TOKENS OUT_JSON
"""

import json
import sys
import urllib.error
import urllib.request


def _token_ids(logprobs_tokens):
    # return_tokens_as_token_ids spells each token "token_id:<id>".
    return [int(t.split(":", 1)[1]) for t in logprobs_tokens]


def main():
    base, model, prompt_json, max_tokens, out_path = sys.argv[1:6]
    prompt, max_tokens = json.loads(prompt_json), int(max_tokens)
    import openai

    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=120, max_retries=0)
    extra = {"return_tokens_as_token_ids": True, "ignore_eos": True}
    result = {}

    done = client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=1, extra_body=extra
    )
    result["completion_tokens"] = _token_ids(done.choices[0].logprobs.tokens)
    result["completion_finish"] = done.choices[0].finish_reason

    streamed = []
    for chunk in client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=1,
        extra_body=extra, stream=True,
    ):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += _token_ids(chunk.choices[0].logprobs.tokens)
    result["stream_tokens"] = streamed

    messages = [{"role": "user", "content": "w5 w6 w7"}]
    chat = client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}
    )
    result["chat_content"] = chat.choices[0].message.content
    result["chat_finish"] = chat.choices[0].finish_reason
    pieces = []
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, extra_body={"ignore_eos": True},
        stream=True,
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    result["chat_stream_content"] = "".join(pieces)

    # Malformed requests: the server answers with an error status, and keeps serving.
    try:
        client.completions.create(model=model, prompt=prompt, max_tokens=-3)
        result["bad_params_status"] = 200
    except openai.APIStatusError as e:
        result["bad_params_status"] = e.status_code
    # A feature the tpu step program does not implement: refused per request, not a crash.
    try:
        client.completions.create(model=model, prompt=prompt, max_tokens=2, extra_body={"bad_words": ["w5"]})
        result["unsupported_status"] = 200
    except openai.APIStatusError as e:
        result["unsupported_status"] = e.status_code
        result["unsupported_message"] = str(e)
    # Seeded sampling through HTTP: the same seed gives the same tokens.
    seeded = [
        _token_ids(client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=1.0, top_p=0.9, seed=11, logprobs=1,
            extra_body=extra).choices[0].logprobs.tokens)
        for _ in range(2)
    ]
    result["seeded_tokens"] = seeded
    req = urllib.request.Request(
        f"{base}/v1/completions", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    try:
        urllib.request.urlopen(req, timeout=60)
        result["bad_json_status"] = 200
    except urllib.error.HTTPError as e:
        result["bad_json_status"] = e.code
    with urllib.request.urlopen(f"{base}/health", timeout=60) as r:
        result["health_after"] = r.status

    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
