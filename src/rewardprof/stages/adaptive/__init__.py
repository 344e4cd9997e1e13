"""Adaptive sampling's stages after the rounds: the labels' priors fitted on every shard's first
round (prior), the audit sample's agreement with fixed K (audit), what sampling saved
(savings). They read the store and the decisions only; the stages that sample (the rounds,
bayes' first round) are the rollout stage's (stages/rollout/)."""
