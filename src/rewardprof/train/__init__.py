"""Training from a profile: one GRPO step of the policy on rollouts (`rewardprof grpo-step`).

The advantages and the batch are rewardprof's (pure Python, `advantages.py`); the optimizer step
needs torch and transformers, which live in the engine's environment, so it runs as a script under
that interpreter (`scripts/grpo_torch.py`), as the model conversion does.
"""
