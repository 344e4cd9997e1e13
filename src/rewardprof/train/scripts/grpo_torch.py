"""One GRPO optimizer step of a causal LM on a batch of completions (run by the engine interpreter).

Reads a JSON request on stdin: {"model": DIR, "lr": float, "seed": int, "save_dir": DIR or null,
"rows": [{"prompt": str or messages, "completion": str, "advantage": float}]}; prints one JSON
object: loss, grad_norm, lr, steps, and per row the prompt and completion token ids and each
completion token's logprob before and after the step. The loss is GRPO's with beta 0 (no
reference model) and one step on the policy's own samples, so the importance ratio is 1 in value
and its gradient is the policy gradient: loss = -mean_rows(mean_tokens(ratio * advantage)).
The rows' gradients are accumulated one row at a time (the same sum; a batch of long completions
never holds every row's activations at once). With save_dir the updated weights and the
tokenizer are written there (a temporary sibling renamed into place), for the engine to serve.
"""

import json
import math
import os
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def _encode(tok, prompt, completion):
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    prompt_ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "input_ids"):
        prompt_ids = prompt_ids["input_ids"]
    completion_ids = tok(completion, add_special_tokens=False)["input_ids"]
    return list(prompt_ids), list(completion_ids)


def _token_logprobs(model, prompt_ids, completion_ids):
    if not completion_ids:
        return torch.zeros(0)
    ids = torch.tensor([prompt_ids + completion_ids])
    logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    target = torch.tensor(completion_ids)
    return torch.log_softmax(logits, dim=-1).gather(1, target[:, None])[:, 0]


def _save(model, tok, save_dir):
    out = Path(save_dir)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main():
    req = json.load(sys.stdin)
    torch.manual_seed(req["seed"])
    torch.use_deterministic_algorithms(True)
    tok = AutoTokenizer.from_pretrained(req["model"])
    model = AutoModelForCausalLM.from_pretrained(req["model"], dtype=torch.float32)
    model.train()
    encoded = [_encode(tok, r["prompt"], r["completion"]) for r in req["rows"]]
    optimizer = torch.optim.AdamW(model.parameters(), lr=req["lr"], weight_decay=0.0)
    optimizer.zero_grad()
    before, loss = [], 0.0
    for (p, c), row in zip(encoded, req["rows"], strict=True):
        logp = _token_logprobs(model, p, c)
        before.append(logp.detach().tolist())
        if not c:
            continue  # an empty completion has no token to weigh
        ratio = torch.exp(logp - logp.detach())
        row_loss = -(ratio * row["advantage"]).mean() / len(encoded)
        row_loss.backward()
        loss += float(row_loss.detach())
    grads = [p for p in model.parameters() if p.grad is not None]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(grads, float("inf"))) if grads else 0.0
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    model.eval()
    with torch.no_grad():
        after = [_token_logprobs(model, p, c).tolist() for p, c in encoded]
    if req.get("save_dir"):
        _save(model, tok, req["save_dir"])
    out = {"steps": 1, "loss": loss, "grad_norm": grad_norm, "lr": lr}
    out["rows"] = [
        {"prompt_ids": p, "completion_ids": c, "logprobs_before": b, "logprobs_after": a}
        for (p, c), b, a in zip(encoded, before, after, strict=True)
    ]
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        sys.exit(f"grpo step: loss {loss} or gradient norm {grad_norm} is not finite")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
