"""One GRPO optimizer step of a causal LM on a batch of completions (run by the engine interpreter).

Reads a JSON request on stdin: {"model": DIR, "lr": float, "seed": int, "rows": [{"prompt",
"completion", "advantage"}]}; prints one JSON object: loss, grad_norm, lr, steps, and the summed
logprob of each completion before and after the step. The loss is GRPO's with beta 0 (no
reference model) and one step on the policy's own samples, so the importance ratio is 1 in value
and its gradient is the policy gradient: loss = -mean_rows(mean_tokens(ratio * advantage)).
"""

import json
import math
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def _encode(tok, prompt, completion):
    prompt_ids = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "input_ids"):
        prompt_ids = prompt_ids["input_ids"]
    completion_ids = tok(completion, add_special_tokens=False)["input_ids"]
    return list(prompt_ids), list(completion_ids)


def _token_logprobs(model, prompt_ids, completion_ids):
    ids = torch.tensor([prompt_ids + completion_ids])
    logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    target = torch.tensor(completion_ids)
    return torch.log_softmax(logits, dim=-1).gather(1, target[:, None])[:, 0]


def main():
    req = json.load(sys.stdin)
    torch.manual_seed(req["seed"])
    torch.use_deterministic_algorithms(True)
    tok = AutoTokenizer.from_pretrained(req["model"])
    model = AutoModelForCausalLM.from_pretrained(req["model"], dtype=torch.float32)
    model.train()
    encoded = [_encode(tok, r["prompt"], r["completion"]) for r in req["rows"]]
    optimizer = torch.optim.AdamW(model.parameters(), lr=req["lr"], weight_decay=0.0)
    per_row, before = [], []
    for (p, c), row in zip(encoded, req["rows"], strict=True):
        logp = _token_logprobs(model, p, c)
        before.append(float(logp.detach().sum()))
        ratio = torch.exp(logp - logp.detach())
        per_row.append(-(ratio * row["advantage"]).mean())
    loss = torch.stack(per_row).mean()
    optimizer.zero_grad()
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    with torch.no_grad():
        after = [float(_token_logprobs(model, p, c).sum()) for p, c in encoded]
    out = {
        "steps": 1,
        "loss": float(loss),
        "grad_norm": grad_norm,
        "lr": lr,
        "logprob_before": before,
        "logprob_after": after,
    }
    if not (math.isfinite(out["loss"]) and math.isfinite(grad_norm)):
        print(json.dumps(out), file=sys.stderr)
        sys.exit("grpo step: loss or gradient norm is not finite")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
