"""Client side of tests/test_sglang_tpu.py's server test (runs in .venv-serve).

usage: sglang_client.py BASE_URL MODEL REQUEST_JSON OUT_JSON
REQUEST_JSON: {"prompts": [[ids]], "shared": [[ids]], "text_prompt": [ids of words w4..w251],
               "max_tokens": n, "stats": path}
Writes what the server answered; the test compares it with Transformers.
"""

import json
import sys
import urllib.error
import urllib.request


def _post(base, path, body, timeout=300):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _status(base, path, data):
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _stats(path):
    with open(path) as f:
        return json.load(f)


def main():
    base, model, request_path, out_path = sys.argv[1:5]
    request = json.load(open(request_path))
    n = request["max_tokens"]
    greedy = {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}
    result = {}

    def generate(prompts, params=greedy):
        out = _post(base, "/generate", {"input_ids": prompts, "sampling_params": params})
        return [o["output_ids"] for o in out]

    result["single"] = [generate([p])[0] for p in request["prompts"]]
    before = _stats(request["stats"])
    result["batched"] = generate(request["prompts"])
    warm = _stats(request["stats"])
    result["batched_again"] = generate(request["prompts"])  # the same buckets: nothing compiles
    result["stats_warm"], result["stats_again"] = warm, _stats(request["stats"])
    # Prompts with a shared prefix, twice: the second pass reuses the radix cache's KV.
    result["shared_first"] = generate(request["shared"])
    shared_again = _post(base, "/generate", {"input_ids": request["shared"], "sampling_params": greedy})
    result["shared_again"] = [o["output_ids"] for o in shared_again]
    result["cached_tokens"] = [o["meta_info"].get("cached_tokens", 0) for o in shared_again]
    after = _stats(request["stats"])
    result["stats_before"], result["stats_after"] = before, after

    sampled = {"temperature": 1.0, "top_p": 0.9, "top_k": 50, "max_new_tokens": n, "ignore_eos": True}
    result["seeded"] = [generate([request["prompts"][0]], {**sampled, "sampling_seed": 7})[0] for _ in range(2)]
    result["seeded_in_batch"] = generate(request["prompts"], {**sampled, "sampling_seed": 7})[0]
    result["other_seed"] = generate([request["prompts"][0]], {**sampled, "sampling_seed": 8})[0]

    import openai

    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=120, max_retries=0)
    text = " ".join(f"w{t}" for t in request["text_prompt"])
    done = client.completions.create(model=model, prompt=text, max_tokens=n, temperature=0,
                                     extra_body={"ignore_eos": True})
    result["completion_text"] = done.choices[0].text
    result["completion_finish"] = done.choices[0].finish_reason
    pieces = [c.choices[0].text for c in client.completions.create(
        model=model, prompt=text, max_tokens=n, temperature=0, extra_body={"ignore_eos": True}, stream=True)
        if c.choices]
    result["completion_stream_text"] = "".join(pieces)
    messages = [{"role": "user", "content": "w5 w6 w7"}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0,
                                          extra_body={"ignore_eos": True})
    result["chat_content"] = chat.choices[0].message.content
    result["chat_finish"] = chat.choices[0].finish_reason
    pieces = [c.choices[0].delta.content for c in client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}, stream=True)
        if c.choices and c.choices[0].delta.content]
    result["chat_stream_content"] = "".join(pieces)

    result["bad_json_status"], _ = _status(base, "/generate", b"{not json")
    result["bad_params_status"], _ = _status(base, "/generate", json.dumps(
        {"input_ids": request["prompts"][0], "sampling_params": {"temperature": -1, "max_new_tokens": 2}}).encode())
    result["unsupported_status"], result["unsupported_body"] = _status(base, "/generate", json.dumps(
        {"input_ids": request["prompts"][0], "return_logprob": True, "sampling_params": greedy}).encode())
    with urllib.request.urlopen(base + "/health", timeout=60) as r:
        result["health_after"] = r.status
    result["stats_end"] = _stats(request["stats"])
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
