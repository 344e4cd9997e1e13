"""A label's prior on the pass rate and the posteriors it gives: the profile's family (point
masses + a Beta), the grid and histogram families, what bayes knows about a label after the first
round, the warm start from an earlier profile."""
