"""Adaptive sampling's decisions: the stopping tests, each label's threshold, the round plan
(whole or task by task), the streak test that sends a label to the exact test."""
