"""The audit of adaptive bayes: the sample of tasks never stopped by the prior, and its
flip-rate report."""
