"""Sizing a sweep from a pilot run: the maths of `rewardprof estimate` (tools/estimate.py reads
the pilot's files and prints): the pilot's throughput and costs per label, the useful fraction at
K and its intervals, adaptive sampling's expected rollouts, the startup overhead per job, the
sweep's GPU-hours and wall time."""
