"""Statistics of one task's rewards and the special functions under them: pass@k, intervals,
GRPO signal; log B, the incomplete beta, bisection, Nelder-Mead; binomial helpers."""
