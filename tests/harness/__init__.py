"""Test harnesses shared by the fault, kill and unit tests and by benchmarks/kill_harness.py:
shardkit (tiny shards against the fake server) and the kill harness."""
